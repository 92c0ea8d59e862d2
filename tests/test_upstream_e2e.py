"""bench/upstream_e2e.py drives the release's own client commands: what it runs and what it reads must be what the
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

from bench import upstream_e2e as ue
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
    from bench import server_pool

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


def test_table_states_each_change_against_all(tmp_path):
    def rec(name, tput, env=None):
        return {"variant": name, "tree": "patched", "env": env or {}, "startup_s": 60.0,
                "bench": {"output_throughput": tput, "median_tpot_ms": 1.0, "median_ttft_ms": 9.0},
                "gsm8k": {"score": 0.01, "output_tok_s": 100.0}}
    for r in (rec("all", 3000.0), rec("P1-off", 1000.0, {"SGLANG_SM120_SPARSE_DECODE": "triton"})):
        (tmp_path / f"{r['variant']}.json").write_text(json.dumps(r))
    text = ue.table(ue.read_records(tmp_path))
    assert "| P1-off | patched | SGLANG_SM120_SPARSE_DECODE=triton | 1000.0 | 3.00x |" in text
    assert "| all | patched | - | 3000.0 | - |" in text
    assert ue.main(["--report", str(tmp_path)]) == 0
