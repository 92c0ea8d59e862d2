"""bench/server/decode_share.py on a CPU: the servers it asks for, the attention share from a chrome trace (profile)
and from the no-attention server (ablation), and its one-line refusals."""
from __future__ import annotations

import gzip
import json
import re

import pytest

from bench.server import bench_e2e, decode_share
from serving.test_hooks import emulate_sm120


def args(*argv):
    return decode_share.parse_args(list(argv))


def test_variants_cover_backends_contexts_and_the_ablation(tmp_path):
    vs = decode_share.variants(args("--contexts", "1048576,131072"), tmp_path)
    assert [v.name for v in vs] == ["triton-1M", "mma-1M", "skip-1M", "triton-128K", "mma-128K"]
    by = {v.name: v for v in vs}
    assert all(v.tree == "patched" and v.env[emulate_sm120.DUMMY_INIT_ENV] == "scaled" for v in vs)
    assert by["triton-1M"].env["SGLANG_SM120_SPARSE_DECODE"] == "triton" and emulate_sm120.BREAK_ENV not in by["mma-1M"].env
    assert by["skip-1M"].env[emulate_sm120.BREAK_ENV] == "skip-attn" and by["skip-1M"].context == 1 << 20
    extra = by["mma-1M"].extra_args
    assert extra[extra.index("--cuda-graph-max-bs-decode") + 1] == "64"
    assert int(extra[extra.index("--max-total-tokens") + 1]) >= 64 * (4096 + 256)
    # the sliding-window pool (a fraction of the full one) must hold the whole batch too
    assert float(extra[extra.index("--swa-full-tokens-ratio") + 1]) == 1.0
    assert "--disable-cuda-graph" not in extra
    assert [v.name for v in decode_share.variants(args("--no-ablation", "--contexts", "131072"), tmp_path)] == \
        ["triton-128K", "mma-128K"]


def trace(events):
    return {"traceEvents": events}


def kernel(name, dur, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "dur": dur}


def test_profiled_share_counts_the_sparse_decode_kernels_only(tmp_path):
    events = [kernel("_mma_sparse_decode_kernel_0d1d2d", 30), kernel("_combine_splits_kernel", 10),
              kernel("_gluon_sparse_decode_kernel", 20),   # the mma backend's kernel for <= 16 heads
              kernel("fused_moe_marlin", 50), kernel("nvjet_gemm", 10),
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "dur": 500},   # not GPU time
              {"ph": "i", "cat": "kernel", "name": "_mma_sparse_decode_kernel", "dur": 99}]  # not a span
    total, attn, names = decode_share.kernel_times(trace(events))
    assert (total, attn) == (120, 60) and names == {"_mma_sparse_decode_kernel": 30, "_combine_splits_kernel": 10,
                                                    "_gluon_sparse_decode_kernel": 20}
    folder = tmp_path / "prof"
    folder.mkdir()
    with gzip.open(folder / "a-TP-0.trace.json.gz", "wt") as fh:
        json.dump(trace(events), fh)
    (folder / "b.trace.json").write_text(json.dumps(trace([kernel("_tiled_sparse_decode_kernel", 100, "Kernel")])))
    got = decode_share.read_traces(folder)
    assert got["kernel_us"] == 220 and got["attention_us"] == 160 and got["share"] == pytest.approx(160 / 220)
    (folder / "c.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:-8])
    assert "error" in decode_share.read_traces(folder)
    assert decode_share.read_traces(tmp_path) is None
    other = tmp_path / "graphs-hidden"
    other.mkdir()
    (other / "x.trace.json").write_text(json.dumps(trace([kernel("fused_moe_marlin", 50)])))
    got = decode_share.read_traces(other)
    assert got["share"] is None and got["error"].startswith("no sparse-decode kernel")


def test_ablation_share_and_the_table(tmp_path):
    def rec(step_ms, tok_s, share=None):
        return {"runs": [{"concurrency": 16, "prompt_len": 4096, "step_ms_median": step_ms, "total_tok_s": tok_s,
                          "server_decode_tok_s": tok_s, "profile": {"share": share} if share else None}]}
    records = {"triton-1M": rec(4.0, 4000, 0.5), "mma-1M": rec(2.5, 6400, 0.2), "skip-1M": rec(2.0, 8000)}
    rows = decode_share.share_rows(records)
    by = {r["backend"]: r for r in rows}
    assert set(by) == {"triton", "mma"}
    assert by["triton"]["attention_ms"] == pytest.approx(2.0) and by["triton"]["ablation_share"] == pytest.approx(0.5)
    assert by["mma"]["ablation_share"] == pytest.approx(0.2) and by["mma"]["profile_share"] == 0.2
    text = decode_share.table(rows)
    assert "| 1M | mma | 16 | 4096 | 6400.0 | 2.50 |" in text and "mma/triton at 1M, c=16, prompt 4096: 1.60x" in text
    for name, r in records.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(r))
    assert decode_share.report(tmp_path) == 0 and json.loads((tmp_path / "share.json").read_text()) == rows


def test_bad_input_is_refused_in_one_line(capsys):
    assert decode_share.main(["--out", "x"]) == 2
    assert decode_share.main(["--bundle", "b", "--out", "x", "--backends", "mma,flash"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["p1_share: expected --bundle DIR, --out DIR and --backends from triton,mma,torch, found no --bundle",
                   "p1_share: expected --bundle DIR, --out DIR and --backends from triton,mma,torch, found backends ['flash']"]
    assert bench_e2e.int_list("1,16") == [1, 16]


@pytest.mark.parametrize("profile", [0, 8])
def test_the_driver_measures_each_server_alone_and_stops_them(tmp_path, profile, monkeypatch):
    """p1_share's run against fake servers (tests/serve_fake_server.py: decode lines, /start_profile, a trace)."""
    import sys
    from pathlib import Path

    from bench.server import server_pool
    from serving import serve_cmd

    alive_while_measuring = []     # idle neighbours slow the measured server (server_pool.each_alone)
    measure_server = decode_share.measure_server

    def measure_alone(server, *rest):
        alive_while_measuring.append([s.variant.name for s in servers if s.proc is not None and s.proc.poll() is None])
        return measure_server(server, *rest)
    monkeypatch.setattr(decode_share, "measure_server", measure_alone)

    fake = Path(__file__).resolve().parents[1] / "serve_fake_server.py"
    a = args("--out", str(tmp_path), "--contexts", "131072", "--concurrency", "1,4", "--prompt-len", "16",
             "--output-len", "96", "--profile-steps", str(profile), "--start-timeout", "60")
    # a port range of its own, where the system hands out free ports: a fixed base met the same test of a second
    # suite run beside this one (two `make test` on one machine) on the same ports, and lost the race for one
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        base = 30000 + probe.getsockname()[1] % 20000   # room above it for the pool's port steps
    servers = server_pool.build(decode_share.variants(a, tmp_path), None, sys.executable, tmp_path, port_base=base)
    for s in servers:
        # 20 ms a token: the steady window needs the 4 concurrent streams to overlap by 32 of their 96 tokens; at
        # the fake's default 2 ms a request that started 130 ms late on a loaded machine left too short a window
        # (step_ms None: seen once in 20 runs beside a second `make test`); here it may start 1.3 s late
        s.launch = serve_cmd.Launch(argv=[sys.executable, str(fake), "good", "--port", str(s.port),
                                          "--event-gap-ms", "20"])
    assert decode_share._run(servers, a) == 0
    assert all(s.proc is None for s in servers)
    assert alive_while_measuring == [["triton-128K"], ["mma-128K"], ["skip-128K"]]
    rows = json.loads((tmp_path / "share.json").read_text())
    assert {(r["backend"], r["concurrency"]) for r in rows} == {("triton", 1), ("triton", 4), ("mma", 1), ("mma", 4)}
    assert all(r["step_ms"] and r["skip_step_ms"] for r in rows)
    for s in servers:     # every request samples: without attention, greedy tokens collapse (decode_share.TEMPERATURE)
        temps = set(re.findall(r"fake: /generate temperature ([-0-9.]+)", s.log_path.read_text()))
        assert temps == {"1.0"}, (s.variant.name, temps)
    if profile:      # the fake's trace: 40 of 100 us in the sparse-decode kernels
        assert all(r["profile_share"] == pytest.approx(0.4) for r in rows), rows
        for v in ("triton-128K", "mma-128K", "skip-128K"):
            runs = json.loads((tmp_path / f"{v}.json").read_text())["runs"]
            assert [r["profile_error"] for r in runs] == [None, None], runs     # sglang's plain-text answer is fine


def test_report_on_a_results_folder_prints_the_table_and_writes_nothing(tmp_path, capsys):
    """`--report` re-reads saved runs, committed ones included; it must leave the folder byte-for-byte."""
    from tests.saved_results import report_leaves_folder_as_it_was

    report_leaves_folder_as_it_was("2026-12-03-p1-share-run3/together-1M", tmp_path, "share.json", "[]\n",
                                   lambda folder: decode_share.main(["--report", str(folder)]))
    assert "| 1M | triton | 64 | 4096 | 369.4 | 173.26 |" in capsys.readouterr().out
