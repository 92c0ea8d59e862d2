"""bench/server/upstream_e2e.py drives the release's own client commands: what it runs and what it reads must be what the
pinned 0.5.14 wheel defines and prints (module names, flags, dataset choice, JSONL keys, the run_eval lines).
No server, no GPU: the wheel's source is read, its print statements evaluated."""
from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
from pathlib import Path

import pytest

from bench.server import upstream_e2e as ue
from patchkit.pr.prdata import load_pr_data
from serving import serve_cmd
from tests.conftest import REPO, pristine_wheel

LINE = "0.5.14"   # the line whose server runs on the GPU box (the bundle's)


def _source(rel: str) -> str:
    return pristine_wheel("sglang", LINE).read(rel).decode()


def _args(**kw) -> argparse.Namespace:
    base = ue.parse_args(["--bundle", "b", "--out", "o", "--gsm8k", "g.jsonl"])
    for k, v in kw.items():
        setattr(base, k, v)
    return base


def test_client_modules_are_the_ones_the_prs_print():
    prs = load_pr_data(REPO / "patches" / LINE / "sglang")
    modules = {shlex.split(pr.reproduce[k])[2] for pr in prs.patches.values() for k in ("benchmark", "accuracy")
               if k in pr.reproduce}
    assert modules == {ue.BENCH_MODULE, ue.EVAL_MODULE}


@pytest.mark.parametrize("which", ["bench", "eval"])
def test_every_flag_is_the_pinned_releases(which):
    args = _args()
    argv = (ue.bench_argv("python3", 30000, Path("m"), args, Path("x.jsonl")) if which == "bench"
            else ue.eval_argv("python3", 30000, args))
    rel = argv[2].replace(".", "/") + ".py"
    text = _source(rel)
    flags = [a for a in argv[3:] if a.startswith("--")]
    assert flags and all(f'"{f}"' in text for f in flags), [f for f in flags if f'"{f}"' not in text]
    if which == "bench":   # random-ids is a dataset of the release, and needs no download
        choices = re.search(r'"--dataset-name".*?choices=\[(.*?)\]', text, re.S).group(1)
        assert f'"{argv[argv.index("--dataset-name") + 1]}"' in choices


def test_the_bench_jsonl_keys_are_what_bench_serving_writes(tmp_path):
    text = _source("sglang/bench_serving.py")
    assert all(f'"{k}":' in text for k in ue.BENCH_KEYS)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"completed": 1}) + "\n" + json.dumps({k: 2.5 for k in ue.BENCH_KEYS}) + "\n")
    assert ue.parse_bench_jsonl(path) == {k: 2.5 for k in ue.BENCH_KEYS}
    path.write_text(json.dumps({"completed": 1}) + "\n")
    assert "expected keys output_throughput" in ue.parse_bench_jsonl(path)["error"]
    assert ue.parse_bench_jsonl(tmp_path / "none.jsonl") == {"error": "no record in none.jsonl"}


def _printed_lines(metrics: dict) -> str:
    """The run_eval print() lines that state the score and the throughput, evaluated as the release writes them."""
    tree = ast.parse(_source("sglang/test/run_eval.py"))
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print" and node.args
                and isinstance(node.args[0], ast.JoinedStr)):
            head = node.args[0].values[0]
            if isinstance(head, ast.Constant) and head.value.startswith(("Score:", "Output throughput:")):
                out.append(eval(compile(ast.Expression(node.args[0]), "run_eval", "eval"), {"metrics": metrics}))
    return "\n".join(out)


def test_the_eval_lines_are_read_as_run_eval_prints_them():
    text = _printed_lines({"score": 0.07, "output_throughput": 1234.5678})
    assert "Score: 0.070" in text
    assert ue.parse_eval_stdout("noise\n" + text + "\n{'score': 0.07}\n") == {"score": 0.07, "output_tok_s": 1234.568}
    assert ue.parse_eval_stdout("Traceback ...") == {"error": "run_eval printed no 'Score:' line"}


def test_each_off_switch_is_a_served_switch_set_to_another_value():
    for label, env in ue.OFF_SWITCHES.items():
        for key, value in env.items():
            assert key in serve_cmd.OVERLAY_ENV and serve_cmd.OVERLAY_ENV[key] != value, (label, key)


def test_variants_are_the_patched_tree_but_pinned(tmp_path):
    args = _args(variants=["all", "P1-off", "pinned"], context=4096)
    vs = {v.name: v for v in ue.variants(args, tmp_path)}
    assert [v.tree for v in vs.values()] == ["patched", "patched", "pinned"]
    assert vs["P1-off"].env["SGLANG_SM120_SPARSE_DECODE"] == "triton" and "SGLANG_SM120_SPARSE_DECODE" not in vs["all"].env
    assert all(v.context == 4096 and "--load-format" in v.extra_args for v in vs.values())
    with pytest.raises(argparse.ArgumentTypeError, match="expected names from all,P1-off"):
        ue.variant_list("all,P9-off")


def test_tp_reaches_every_servers_command(tmp_path, monkeypatch):
    """--tp N becomes each variant's server --tp-size N (serving/serve_cmd.py builds the command)."""
    from bench.server import server_pool

    built, real_build = [], serve_cmd.build

    def build_without_bundle(**kw):   # no installed bundle here: the same command, minus the bundle's paths
        built.append(real_build(**{**kw, "bundle_site": None}))
        return built[-1]

    monkeypatch.setattr(serve_cmd, "build", build_without_bundle)
    args = _args(variants=["all", "P4-off"], tp=2)
    server_pool.build(ue.variants(args, tmp_path), tmp_path, "python3", tmp_path, port_base=31000)
    assert len(built) == 2
    for launch in built:
        assert launch.argv[launch.argv.index("--tp-size") + 1] == "2", launch.shell()
    assert ue.parse_args(["--tp", "2"]).tp == 2 and ue.parse_args([]).tp == 1


def test_gsm8k_file_is_checked_by_digest(tmp_path):
    wrong = tmp_path / "test.jsonl"
    wrong.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    assert "expected GSM8K's test.jsonl (sha256 3730d312f6e3...), found sha256" in ue.gsm8k_problem(wrong)
    assert "found no file" in ue.gsm8k_problem(tmp_path / "absent.jsonl")
    rc = ue.main(["--bundle", str(tmp_path), "--out", str(tmp_path / "o"), "--gsm8k", str(wrong)])
    assert rc == 2 and not (tmp_path / "o").exists()


def test_run_evals_report_is_moved_out_of_tmp(tmp_path):
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir(), out.mkdir()
    stem = f"gsm8k_{ue.bench_e2e.SERVED_NAME}"
    (tmp / f"{stem}.json").write_text('{"score": 0.0}')
    (tmp / f"{stem}.html").write_text("<html></html>")
    ue.collect_eval_report(out, "all", tmp)
    assert sorted(p.name for p in out.iterdir()) == ["all-gsm8k.html.gz", "all-gsm8k.json"]
    assert not any(tmp.iterdir())


def _rec(name, tput, env=None, warmup_runs=1):
    return {"variant": name, "tree": "patched", "env": env or {}, "startup_s": 60.0, "warmup_runs": warmup_runs,
            "bench": {"output_throughput": tput, "median_tpot_ms": 1.0, "median_ttft_ms": 9.0, "p99_itl_ms": 4.0},
            "gsm8k": {"score": 0.01, "output_tok_s": 100.0}}


def test_table_states_each_change_against_all(tmp_path):
    for r in (_rec("all", 3000.0), _rec("P1-off", 1000.0, {"SGLANG_SM120_SPARSE_DECODE": "triton"})):
        (tmp_path / f"{r['variant']}.json").write_text(json.dumps(r))
    text = ue.table(ue.read_records(tmp_path))
    assert "| P1-off | patched | SGLANG_SM120_SPARSE_DECODE=triton | 1000.0 | 3.00x | 1.00 | 9.0 | 4.0 |" in text
    assert "| all | patched | - | 3000.0 | - |" in text
    assert ue.main(["--report", str(tmp_path)]) == 0


@pytest.mark.parametrize("unwarmed", ["all", "P1-off"])
def test_no_ratio_to_a_record_measured_without_a_warm_up_run(tmp_path, unwarmed):
    """A pass without a warm-up carries first-use kernel builds (cost set by the machine's caches, not by the
    change): its throughput is printed, never divided."""
    for r in (_rec("all", 3000.0), _rec("P1-off", 1000.0, {"SGLANG_SM120_SPARSE_DECODE": "triton"})):
        if r["variant"] == unwarmed:
            del r["warmup_runs"]          # as the records of 2026-12-04 and 2026-12-05 were written
        (tmp_path / f"{r['variant']}.json").write_text(json.dumps(r))
    row = next(l for l in ue.table(ue.read_records(tmp_path)).splitlines() if l.startswith("| P1-off |"))
    assert row.startswith("| P1-off | patched | SGLANG_SM120_SPARSE_DECODE=triton | 1000.0 | - |"), row
    assert row.endswith(f"| {0 if unwarmed == 'P1-off' else 1} |"), row


class _Launch:
    argv, env = ["python3"], {}

    def shell(self):
        return "python3 -m sglang.launch_server ..."


class _Server:
    variant = ue.server_pool.Variant("all", "patched", {}, model="m")
    launch, port, startup_s = _Launch(), 30300, 1.0


def test_the_recorded_bench_run_comes_after_warm_up_runs_on_other_prompts(tmp_path, monkeypatch):
    calls = []

    def fake_client(argv, env, log):
        calls.append(argv)
        if argv[2] == ue.BENCH_MODULE:
            out = Path(argv[argv.index("--output-file") + 1])
            out.write_text(json.dumps({k: 1.0 for k in ue.BENCH_KEYS}) + "\n")
            return 0, ""
        return 0, "Score: 0.500\nOutput throughput: 10.0 token/s\n"

    monkeypatch.setattr(ue, "run_client", fake_client)
    monkeypatch.setattr(ue.server_pool, "key_harness_lines", lambda server: [])
    record = ue.measure_server(_Server(), _args(out=tmp_path, warmup_runs=2), Path("m"))
    benches = [a for a in calls if a[2] == ue.BENCH_MODULE]
    assert len(benches) == 3 and calls[-1][2] == ue.EVAL_MODULE
    seeds = [a[a.index("--seed") + 1] if "--seed" in a else "default" for a in benches]
    assert seeds == [str(ue.WARMUP_SEED), str(ue.WARMUP_SEED + 1), "default"]
    assert benches[-1][benches[-1].index("--output-file") + 1] == str(tmp_path / "all-bench_serving.jsonl")
    assert record["warmup_runs"] == 2 and record["bench"]["output_throughput"] == 1.0
    assert '"--seed"' in _source("sglang/bench_serving.py")   # a flag of the release


def test_a_failed_warm_up_is_the_rows_error_and_nothing_is_recorded_after_it(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ue, "run_client", lambda argv, env, log: (calls.append(argv), (3, ""))[1])
    record = ue.measure_server(_Server(), _args(out=tmp_path, warmup_runs=1), Path("m"))
    assert len(calls) == 1 and record["bench"] == {"error": "bench_serving warm-up exit 3"}
    assert "error" in record["gsm8k"]
