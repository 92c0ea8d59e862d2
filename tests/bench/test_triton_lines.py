"""bench/kernels/triton_lines.py on the CPU: runs planned from the carried folders, logs merged by shape, and the
0.5.23 default's rule judged per row against FlashInfer's faster plan (the GPU run: BENCHMARKS.md)."""
from __future__ import annotations

import json
from pathlib import Path

from bench.kernels import triton_lines as lines


def write_run(out: Path, name: str, rows: list[dict], gpu: str = "NVIDIA H200 (132 SMs), triton 3.8.0") -> None:
    (out / name).mkdir(parents=True)
    text = [f"gpu: {gpu}", "flashinfer sm_120 peer: /tmp/p (FlashInfer 0.7.2 built for this GPU)"]
    text += [json.dumps(r) for r in rows] + ["| a table the bench prints |"]
    (out / name / lines.LOG).write_text("\n".join(text) + "\n")


def row(shape, mma_us, mma_err, fi132=None, fi188=None, fi_err=2.5e-2, config="h16_t16_w4"):
    r = {"shape": shape, "floor_us": 1.0, "mma_us": mma_us, "mma_err": mma_err, "mma_config": config}
    for sm, us in ((132, fi132), (188, fi188)):
        if us is not None:
            r[f"fi{sm}_us"], r[f"fi{sm}_err"] = us, fi_err
    return r


def saved_run(tmp_path: Path, carried_rows: list[dict]) -> Path:
    runs = [{"name": "triton-3.6.0_fi-0.7.2", "triton": None, "triton_release": "3.6.0", "flashinfer": "0.7.2"},
            {"name": "triton-3.8.0_fi-0.7.2", "triton": "/tmp/t38", "triton_release": "3.8.0", "flashinfer": "0.7.2"},
            {"name": "triton-3.8.0_fi-0.7.4", "triton": "/tmp/t38", "triton_release": "3.8.0", "flashinfer": "0.7.4"}]
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    write_run(tmp_path, runs[0]["name"], [row(r["shape"], r["mma_us"] * 0.9, r["mma_err"], 20.0, 21.0)
                                          for r in carried_rows], gpu="NVIDIA H200 (132 SMs), triton 3.6.0")
    write_run(tmp_path, runs[1]["name"], carried_rows)
    write_run(tmp_path, runs[2]["name"], [row(r["shape"], r["mma_us"] * 1.02, r["mma_err"], 19.0, 18.0)
                                          for r in carried_rows])
    return tmp_path


def test_the_rule_takes_flashinfers_faster_plan_and_says_by_how_much_ours_misses(tmp_path, capsys):
    rows = [row("H8/B1", 8.0, 2e-3, fi132=12.0, fi188=10.0),      # holds: faster than both plans
            row("H8/B64", 11.0, 2e-3, fi132=12.0, fi188=10.0),    # slower than the 188-SM plan only
            row("H64/B1", 9.0, 3e-2, fi132=12.0, fi188=12.5)]     # faster, but less accurate
    held, missed = lines.verdict(rows)
    assert held == ["H8/B1"]
    assert missed[0].startswith("H8/B64: 1.10x FlashInfer's time (11.0 vs 10.0 us @188 SMs)")
    assert missed[1] == "H64/B1: error 3.0e-02 vs 2.5e-02"


def test_a_row_without_flashinfer_is_not_counted_as_held():
    held, missed = lines.verdict([row("H8/B1", 8.0, 2e-3)])
    assert held == [] and missed == ["H8/B1: not measured (ours or FlashInfer missing)"]


def test_report_merges_the_runs_by_shape_and_judges_the_carried_triton_with_the_pinned_peer(tmp_path, capsys):
    out = saved_run(tmp_path, [row("H8/B1", 8.0, 2e-3, 12.0, 10.0), row("H8/B64", 11.0, 2e-3, 12.0, 10.0)])
    before = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    assert lines.main(["--report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| H8/B1 | 1.00 | 7.2 [h16_t16_w4] | 8.0 [h16_t16_w4] | 12.0 | 10.0 | 19.0 | 18.0 |" in text
    assert "FlashInfer 0.7.2's faster plan, same run, same inputs): holds in 1 of 2 rows" in text
    assert "misses H8/B64: 1.10x FlashInfer's time" in text
    assert "run to run (ours under triton 3.8.0, two processes): median 2.0 %" in text
    after = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    assert after == before    # --report writes nothing


def test_a_run_cut_short_keeps_the_rows_it_finished(tmp_path):
    write_run(tmp_path, "r", [row("H8/B1", 8.0, 2e-3, 12.0, 10.0)])
    with open(tmp_path / "r" / lines.LOG, "a") as f:
        f.write('{"shape": "H8/B2", "mma_us": 8.1, "mma_err": 0.002}\n')   # killed before its tables
    head, rows = lines.load_rows(tmp_path / "r")
    assert [r["shape"] for r in rows] == ["H8/B1", "H8/B2"] and head["gpu"].endswith("triton 3.8.0")


def test_runs_are_planned_from_the_carried_folders(tmp_path):
    triton = tmp_path / "t38" / "triton"
    triton.mkdir(parents=True)
    (triton / "__init__.py").write_text("__version__ = '3.8.0'\n")
    peers = []
    for v in ("0.7.2", "0.7.4"):
        (tmp_path / v).mkdir()
        (tmp_path / v / "SOURCES.json").write_text(json.dumps({"flashinfer": v}))
        peers.append(tmp_path / v)
    runs = lines.plan_runs(tmp_path / "t38", peers)
    names = [r["name"] for r in runs]
    assert names[1:] == ["triton-3.8.0_fi-0.7.2", "triton-3.8.0_fi-0.7.4"]
    assert names[0].endswith("_fi-0.7.2") and runs[0]["triton"] is None
