"""bench/server/bench_e2e.py on a CPU: the server command (--tp reaches --tp-size), the model it generates,
the decode-only arithmetic, and the whole driver against fake servers (no timing is asserted).

The server command and the model are checked against the pinned sglang's own ServerArgs parser,
DeepSeekV4Config and ModelConfig where those import (make test-serve); elsewhere those tests skip.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.server import bench_e2e
from serving import serve_cmd, tiny_model
from tests.serve_env import import_pinned

REPO = Path(__file__).resolve().parents[2]
BENCH = [sys.executable, "-m", "bench.server.bench_e2e"]   # as `make bench-e2e` runs it, from the checkout root
FAKE = REPO / "tests" / "serve_fake_server.py"


def launch_for(*argv: str, tree: str = "patched", site=None) -> serve_cmd.Launch:
    args = bench_e2e.parse_args(list(argv))
    return bench_e2e.server_launch(args, tree, bench_e2e.generate_model(args.layers), site)


def parse_with_pinned(argv: list[str]) -> argparse.Namespace:
    server_args = import_pinned("sglang.srt.server_args")
    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_tp_reaches_the_server_and_multicast_stays_off(tp):
    launch = launch_for("--tp", str(tp), "--concurrency", "1,16,64", "--python", "python3")
    argv = launch.argv
    assert argv[argv.index("--tp-size") + 1] == str(tp)
    for key, value in serve_cmd.MULTI_GPU_ENV.items():
        assert launch.env[key] == value
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "64" and "--disable-cuda-graph" not in argv


def test_server_command_parses_with_the_pinned_parser():
    launch = launch_for("--tp", "8", "--concurrency", "1,16,64", "--python", "python3")
    ns = parse_with_pinned(launch.argv[3:])
    assert ns.tp_size == 8 and ns.context_length == 1 << 20 and ns.load_format == "dummy"
    assert ns.cuda_graph_max_bs_decode == 64 and ns.max_running_requests == 64 and ns.mem_fraction_static == 0.6
    assert ns.disable_cuda_graph is False and ns.served_model_name == bench_e2e.SERVED_NAME
    assert ns.chunked_prefill_size == serve_cmd.PREFILL_CHUNK and ns.attention_backend == "dsv4"


def test_bundle_mode_keeps_the_box_harness(tmp_path, pristine_root, patched_root):
    site = tmp_path / "site"
    (site / "trees").mkdir(parents=True)
    (site / "trees" / "pinned").symlink_to(pristine_root)
    (site / "common").mkdir()
    launch = launch_for("--tp", "4", "--bundle", str(site), tree="pinned", site=site)
    assert launch.env["PYTHONPATH"].split(":")[:2] == [str(serve_cmd.HOOKS_DIR), str(site.resolve() / "trees/pinned")]
    assert launch.argv[0] == sys.executable and "--moe-runner-backend" in launch.argv
    assert launch.argv[launch.argv.index("--tp-size") + 1] == "4"


def test_model_keeps_the_real_per_layer_geometry():
    real = tiny_model.real_config()
    cfg = bench_e2e.flash_shaped_config(4)
    for key in ("hidden_size", "num_attention_heads", "head_dim", "qk_rope_head_dim", "q_lora_rank", "o_lora_rank",
                "o_groups", "index_topk", "index_n_heads", "index_head_dim", "sliding_window", "n_routed_experts",
                "moe_intermediate_size", "num_experts_per_tok", "quantization_config", "max_position_embeddings"):
        assert cfg.get(key) == real.get(key), key
    assert cfg["num_hidden_layers"] == 4 and cfg["compress_ratios"] == [4, 128, 4, 128, 0]
    assert set(cfg["compress_ratios"][:-1]) <= set(real["compress_ratios"])
    assert real["max_position_embeddings"] >= 1 << 20      # the 1M ceiling is the model's own
    with pytest.raises(ValueError, match="expected >= 2"):
        bench_e2e.flash_shaped_config(1)


def test_pinned_config_classes_accept_it_at_a_1m_context():
    cfg_mod = import_pinned("sglang.srt.configs.deepseek_v4")
    mc_mod = import_pinned("sglang.srt.configs.model_config")
    model_dir = bench_e2e.generate_model(6)
    assert cfg_mod.DeepSeekV4Config(**json.loads((model_dir / "config.json").read_text())).num_hidden_layers == 6
    mc = mc_mod.ModelConfig(str(model_dir), context_length=1 << 20)
    assert mc.context_len == 1 << 20
    assert mc_mod.get_num_indexer_layers(mc.hf_config) == 3          # the c4 layers
    assert mc.hf_config.hidden_size == 4096 and mc.hf_config.num_attention_heads == 64


def series(t_first, n, step=0.1):
    return [(t_first + step * i, i + 1) for i in range(n)]


def test_decode_numbers_exclude_prefill_and_need_a_steady_window():
    # Two requests, 11 tokens each, one per 0.1 s; first tokens at 1.0 and 2.0 s (prefill).
    reqs = [{"sent": 0.0, "events": series(1.0, 11)}, {"sent": 0.0, "events": series(2.0, 11)}]
    out = bench_e2e.summarize(reqs)
    assert out["ttft_s_median"] == pytest.approx(1.5)
    assert out["per_request_tok_s_median"] == pytest.approx(10.0)      # 10 tokens after the first in 1 s
    assert out["span_tok_s"] == pytest.approx(20 / 2.0)                 # 20 decoded tokens over 1.0 .. 3.0 s
    # They decode together only at 2.0 s: no steady window, so no total and no step time.
    assert out["total_tok_s"] is None and out["step_ms_median"] is None
    # Overlapping, but only 5 tokens each inside the window: still too short to quote.
    reqs[1]["events"] = series(1.5, 11)
    out = bench_e2e.summarize(reqs)
    assert out["window_steps_median"] == 5 and out["total_tok_s"] is None
    # 64 tokens each: window [1.5, 7.3] holds 58 tokens of each -> 116 tokens in 5.8 s, 100 ms a step.
    reqs = [{"sent": 0.0, "events": series(1.0, 64)}, {"sent": 0.0, "events": series(1.5, 64)}]
    out = bench_e2e.summarize(reqs)
    assert out["window_s"] == pytest.approx(5.8) and out["window_tokens"] == 116
    assert out["total_tok_s"] == pytest.approx(20.0) and out["step_ms_median"] == pytest.approx(100.0)


def test_tokens_streamed_in_bursts_do_not_shrink_the_step_time():
    # Tokens come two at a time (two events at the same instant every 0.2 s): still 100 ms a token.
    def bursty(t_first, n):
        return [(t_first + 0.2 * (i // 2), i + 1) for i in range(n)]
    reqs = [{"sent": 0.0, "events": bursty(1.0, 128)}, {"sent": 0.0, "events": bursty(1.2, 128)}]
    out = bench_e2e.summarize(reqs)
    assert out["step_ms_median"] == pytest.approx(100.0, rel=0.03)
    assert out["total_tok_s"] == pytest.approx(20.0, rel=0.03)


def test_server_rate_takes_full_batch_lines_after_the_first(tmp_path):
    lines = [[64, 900.0], [64, 1000.0], [64, 1100.0], [1, 5000.0]]
    assert bench_e2e.server_decode_rate(lines, 64) == pytest.approx(1050.0)
    assert bench_e2e.server_decode_rate(lines, 16) is None
    log = ("[t] Decode batch, #running-req: 16, #full token: 20480, cuda graph: True, "
           "gen throughput (token/s): 74.49, #queue-req: 0\n")
    path = tmp_path / "server.log"
    path.write_text(log)
    assert bench_e2e.server_throughput_lines(path, 0, len(log)) == [[16, 74.49]]


def run_bench(tmp_path: Path, mode: str, *extra: str) -> subprocess.CompletedProcess:
    server = f"{sys.executable} {FAKE} {mode} --port {{port}} --pid-file {tmp_path}/pids-{{tree}}"
    return subprocess.run([*BENCH, "--server-cmd", server, "--out", str(tmp_path / "out"),
                           "--port", str(_free_port()), *extra], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def _free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def test_both_trees_against_a_fake_server_write_results_and_stop_it(tmp_path):
    result = run_bench(tmp_path, "good", "--tree", "both", "--concurrency", "1,4", "--prompt-len", "16,64",
                       "--output-len", "48", "--max-prompt-tokens", "64")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for tree in ("pinned", "patched"):
        record = json.loads((tmp_path / "out" / f"{tree}.json").read_text())
        ran = [r for r in record["runs"] if "elapsed_s" in r]
        assert [(r["concurrency"], r["prompt_len"]) for r in ran] == [(1, 16), (4, 16), (1, 64)]
        assert [r for r in record["runs"] if r.get("skipped")] == [{"concurrency": 4, "prompt_len": 64, "skipped": True}]
        for r in ran:
            assert r["requests_with_decode"] == r["concurrency"] and not r["errors"] and not r["timed_out"]
            assert r["per_request_tok_s_median"] > 0 and r["step_ms_median"] > 0
            assert all(ev["events"][-1][1] == 48 for ev in r["raw"])
        assert record["versions"]["torch"] and record["server_command"].startswith(sys.executable)
        assert (tmp_path / "out" / f"{tree}-server.log").exists()
        pids = [int(p) for p in (tmp_path / f"pids-{tree}").read_text().split()]
        assert not [p for p in pids if _alive(p)], "a fake server was left running"
    assert "skip c=4 prompt=64: 256 prompt tokens > --max-prompt-tokens 64" in out
    assert "| concurrency | prompt | pinned tok/s | patched tok/s | patched/pinned |" in out
    assert out.count("server stopped") == 2 and "command: " in out


def test_a_server_that_dies_fails_the_tree_with_its_log(tmp_path):
    result = run_bench(tmp_path, "exit-early", "--tree", "pinned", "--tree-budget", "60")
    assert result.returncode == 1
    assert "[pinned] FAIL: server exited with code 3 before it became healthy" in result.stdout
    assert "cannot load model weights" in result.stdout
    assert json.loads((tmp_path / "out" / "pinned.json").read_text())["error"].startswith("server exited")


def test_the_tree_budget_bounds_a_server_that_never_answers(tmp_path):
    result = run_bench(tmp_path, "never-healthy", "--tree", "patched", "--tree-budget", "3")
    assert result.returncode == 1 and "[patched] FAIL: server not healthy after" in result.stdout
    pids = [int(p) for p in (tmp_path / "pids-patched").read_text().split()]
    assert len(pids) == 2 and not [p for p in pids if _alive(p)]


def test_compare_prints_the_ratio_table(tmp_path):
    def record(tree, tok_s):
        return {"tree": tree, "layers": 4, "context": 1 << 20, "tp": 1, "versions": {"gpus": ["X"]},
                "runs": [{"concurrency": 16, "prompt_len": 1024, "elapsed_s": 1.0, "total_tok_s": tok_s,
                          "per_request_tok_s_median": tok_s / 16, "step_ms_median": 16000 / tok_s}]}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(record("pinned", 100.0)))
    b.write_text(json.dumps(record("patched", 250.0)))
    out = subprocess.run([*BENCH, "--compare", str(a), str(b), "--plot", str(tmp_path / "p.png")],
                         cwd=REPO, capture_output=True, text=True, timeout=120).stdout
    assert "| 16 | 1024 | 100.0 | 250.0 | 2.50x | 6.2 | 15.6 | 160.00 | 64.00 | - / - (-x) |" in out
    assert (tmp_path / "p.png").exists() or "matplotlib is not installed" in out


def test_bad_concurrency_is_one_line():
    result = subprocess.run([*BENCH, "--concurrency", "1,x"], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "expected comma-separated integers, found '1,x'" in result.stderr


# -- without a bundle: the pinned baseline is a real pinned environment, or refused ----------------------

def env_python(tmp_path: Path, name: str, site: Path) -> str:
    """An interpreter whose sglang is the one in `site` (as a venv's python would be)."""
    py = tmp_path / f"{name}-python"
    py.write_text(f"#!/bin/sh\nPYTHONPATH='{site}' exec '{sys.executable}' \"$@\"\n")
    py.chmod(0o755)
    return str(py)


def bench_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*BENCH, *argv], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_without_a_bundle_a_pinned_run_is_refused_in_one_line():
    done = bench_cli("--print-commands")                      # E2E_TREE=both, no BUNDLE, no PINNED_PYTHON
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "the pinned baseline needs its own environment" in done.stderr
    assert "BUNDLE=build/bundle" in done.stderr and "PINNED_PYTHON=" in done.stderr
    assert bench_cli("--print-commands", "--tree", "patched", "--python", "python3").returncode == 0


def test_without_a_bundle_the_two_trees_run_two_environments(tmp_path, pristine_root, patched_root):
    pinned, patched = env_python(tmp_path, "pinned", pristine_root), env_python(tmp_path, "patched", patched_root)
    done = bench_cli("--print-commands", "--pinned-python", pinned, "--python", patched)
    assert done.returncode == 0, done.stderr
    commands = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert commands["pinned"] != commands["patched"]
    assert commands["pinned"].split(" -m sglang")[0].endswith(pinned)
    assert commands["patched"].split(" -m sglang")[0].endswith(patched)


@pytest.mark.parametrize("swap", ["pinned-is-patched", "same"])
def test_a_pinned_python_that_is_not_pinned_is_refused(tmp_path, patched_root, swap):
    patched = env_python(tmp_path, "patched", patched_root)
    pinned = patched if swap == "same" else env_python(tmp_path, "other", patched_root)
    done = bench_cli("--print-commands", "--pinned-python", pinned, "--python", patched)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "bench_e2e: pinned tree: expected the patches pristine in" in done.stderr and "found applied" in done.stderr
