"""bench/kernels/triton_lines.py on the CPU: runs planned from the carried folders, logs merged by shape, and the
0.5.23 default's rule judged per row against FlashInfer's faster plan (the GPU run: BENCHMARKS.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_a_run_without_peers_reports_each_tritons_fp_fusion_settings_and_judges_nothing(tmp_path, capsys):
    runs = [{"name": "triton-3.6.0", "triton": None, "triton_release": "3.6.0", "flashinfer": None},
            {"name": "triton-3.9.0", "triton": "/tmp/t39", "triton_release": "3.9.0", "flashinfer": None}]
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    for r, us in zip(runs, (8.0, 7.0)):
        write_run(tmp_path, r["name"], [{**row("H8/B1", us, 2e-3), "fusion_on_us": us, "fusion_on_err": 2e-3,
                                         "fusion_off_us": us + 1, "fusion_off_err": 2.5e-3}])
    assert lines.main(["--report", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert ("| shape | fusion on @triton 3.6.0 us | fusion off @triton 3.6.0 us | fusion on @triton 3.9.0 us | "
            "fusion off @triton 3.9.0 us | err on / off: @3.6.0 / @3.9.0 |") in text
    assert "| H8/B1 | 8.0 | 9.0 | 7.0 | 8.0 | 2.00e-03 / 2.50e-03 ; 2.00e-03 / 2.50e-03 |" in text
    assert "rule: not judged" in text


def test_fp_fusion_and_the_release_tree_reach_every_bench_run(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(lines, "run_one", lambda run, out, bench_args, timeout: seen.append(bench_args) or 0)
    monkeypatch.setattr(lines, "report", lambda out: 0)
    assert lines.main(["--out", str(tmp_path / "o"), "--fp-fusion", "both", "--release-tree", str(tmp_path)]) == 0
    assert seen and all(a[a.index("--fp-fusion") + 1] == "both" and a[a.index("--release-tree") + 1] == str(tmp_path)
                        for a in seen)
def test_routing_says_per_heads_and_width_at_which_rows_flashinfer_was_faster():
    rows = [dict(row("H8/B1/win128+ex512", 8.0, 2e-3, 12.0, 10.0), B=1),
            dict(row("H8/P2048/win128+ex512", 900.0, 2e-3, 700.0, 720.0), B=2048),
            dict(row("H8/B8x7/win128+ex512", 30.0, 2e-3, 40.0, 29.0), B=56),
            dict(row("H16/B1/win128+ex1024", 8.0, 2e-3, 12.0, 10.0), B=1),
            dict(row("H16/B2/win128+ex1024", 8.0, 2e-3), B=2)]           # no FlashInfer: not counted
    assert lines.routing(rows) == [
        "routing H8 win128+ex512: FlashInfer faster at rows 56,2048; ours at rows 1",
        "routing H16 win128+ex1024: FlashInfer faster at rows none; ours at rows 1"]


def test_the_row_set_and_the_tree_reach_every_run(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(lines, "run_one", lambda run, out, bench_args, timeout: seen.append(bench_args) or 0)
    monkeypatch.setattr(lines, "report", lambda out: 0)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "SOURCES.json").write_text(json.dumps({"flashinfer": "0.7.2"}))
    assert lines.main(["--peer", str(tmp_path / "p"), "--out", str(tmp_path / "o"), "--rows", "v41",
                       "--extra-topks", "512", "--tree", str(tmp_path / "slice"), "--heads", "8,16"]) == 0
    (args,) = seen
    assert args[args.index("--rows") + 1] == "v41" and args[args.index("--extra-topks") + 1] == "512"
    assert args[args.index("--tree") + 1] == str((tmp_path / "slice").resolve())
    assert args[args.index("--heads") + 1] == "8,16"


def test_the_box_run_can_time_ours_alone_and_the_report_takes_flashinfer_from_the_carried_run(tmp_path, capsys):
    triton = tmp_path / "t38" / "triton"
    triton.mkdir(parents=True)
    (triton / "__init__.py").write_text("__version__ = '3.8.0'\n")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "SOURCES.json").write_text(json.dumps({"flashinfer": "0.7.2"}))
    runs = lines.plan_runs(tmp_path / "t38", [tmp_path / "p"], box_peer=False)
    assert runs[0]["peer"] is None and runs[0]["flashinfer"] is None and runs[1]["flashinfer"] == "0.7.2"
    out = tmp_path / "out"
    out.mkdir()
    (out / "runs.json").write_text(json.dumps([{"name": "triton-3.6.0", "triton": None, "triton_release": "3.6.0",
                                                 "flashinfer": None}] + [{**runs[1], "triton": "/t38", "peer": "/p"}]))
    write_run(out, "triton-3.6.0", [row("H8/B1", 7.0, 2e-3)], gpu="NVIDIA H100 (132 SMs), triton 3.6.0")
    write_run(out, runs[1]["name"], [row("H8/B1", 6.0, 2e-3, 12.0, 10.0)])
    assert lines.main(["--report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| H8/B1 | 1.00 | 7.0 [h16_t16_w4] | 6.0 [h16_t16_w4] | 12.0 | 10.0 |" in text
    assert "holds in 1 of 1 rows" in text


def test_the_fusion_and_row_set_flags_reach_every_run_together(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(lines, "run_one", lambda run, out, bench_args, timeout: seen.append(bench_args) or 0)
    monkeypatch.setattr(lines, "report", lambda out: 0)
    assert lines.main(["--out", str(tmp_path / "o"), "--rows", "v41", "--extra-topks", "512", "--fp-fusion", "both",
                       "--release-tree", str(tmp_path)]) == 0
    assert seen and all(a[a.index("--rows") + 1] == "v41" and a[a.index("--extra-topks") + 1] == "512"
                        and a[a.index("--fp-fusion") + 1] == "both"
                        and a[a.index("--release-tree") + 1] == str(tmp_path) and "--tree" not in a for a in seen)


def test_a_tree_slice_and_a_release_tree_together_are_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lines, "run_one", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as exc:
        lines.main(["--out", str(tmp_path / "o"), "--tree", str(tmp_path), "--release-tree", str(tmp_path)])
    assert exc.value.code == 2
    assert "expected --tree or --release-tree" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
