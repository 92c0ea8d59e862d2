"""P1's own share of end-to-end decode: the patched tree with SGLANG_SM120_SPARSE_DECODE=triton (the pinned
per-head kernel) vs mma (P1), on DeepSeek-V4-Flash-shaped layers, CUDA graphs on, at two context ceilings.

    OVERLAY_EMULATE_SM120=1 python3 -m bench.server.decode_share --bundle build/bundle --out DIR
                               [--backends triton,mma] [--contexts 1048576,131072] [--concurrency 1,16,64]
                               [--prompt-len 4096] [--output-len 256] [--layers 4] [--profile-steps 8]
                               [--no-ablation] [--start-timeout 480]
    python3 -m bench.server.decode_share --report DIR      # the table again from DIR's JSON files (writes nothing)

Model and weights: bench/server/bench_e2e.py's Flash-shaped config (--layers layers, the real per-layer geometry),
OVERLAY_DUMMY_INIT=scaled (serving/test_hooks/dummy_init.py: routed experts spread the way real weights spread them).
The prompt of 4096 tokens fills the c4 layers' top-512 and the 128-token window, so each decode token's
attention work is at the ceiling it keeps at any longer context. Each server runs alone on the GPU
(bench/server/server_pool.py, each_alone: idle neighbours slowed the fast server's steps). Per concurrency: the
steady-window decode tok/s and step time of bench_e2e.measure, and sglang's own gen-throughput lines. Requests
sample at temperature 1 (TEMPERATURE says why), so runs before 2026-12-03's run 3 (greedy) do not compare to
later ones.

Attention share of decode GPU time, two stated methods:
  profile   while every request is decoding (sglang logs a batch line with all of them running), POST
            /start_profile for --profile-steps steps (GPU activity only); share = time of the sparse-decode
            kernels (ATTENTION_KERNELS, by name) / time of all kernels in the trace. Kernels replayed from CUDA
            graphs are in the trace as kernels. For `triton` the torch ops that merge its two caches and
            apply the sink are not matched by name: its profiled share is a lower bound.
  ablation  one more server, at the first --contexts ceiling, with OVERLAY_TEST_BREAK_DECODE=skip-attn (TEST
            ONLY: the dispatcher returns zeros, no attention kernel runs): attention ms per step = step ms
            (backend) - step ms (skip), share = that / step ms (backend). Every op of the attention call
            counts, by any name. (The decode attention's work follows each request's real length, which
            the ceiling does not change; P4 makes the indexer's work follow it too.)

Writes DIR/<variant>.json, DIR/<variant>-server.log, DIR/profile/<variant>-c<N>/*.trace.json.gz,
DIR/share.json; prints the table. Exit 1 when a server failed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import threading
import time
import urllib.error
from pathlib import Path

from bench.server import bench_e2e, server_pool, trace_summary
from bench.command import command_line
from serving import smoke
from serving.test_hooks import emulate_sm120

SPARSE = "SGLANG_SM120_SPARSE_DECODE"
SKIP = "skip"
ATTENTION_KERNELS = ("_mma_sparse_decode_kernel", "_gluon_sparse_decode_kernel", "_combine_splits_kernel",
                     "_tiled_sparse_decode_kernel")


def say(msg: str) -> None:
    print(f"[p1 {datetime.datetime.now(datetime.timezone.utc):%H:%M:%S}] {msg}", flush=True)


def context_label(context: int) -> str:
    return f"{context // 1024}K" if context < 1 << 20 else f"{context // (1 << 20)}M"


def variants(args, model_dir: Path) -> list[server_pool.Variant]:
    max_c = max(args.concurrency)
    kv = max_c * (max(args.prompt_len) + args.output_len) + 4096
    # The sliding-window pool holds a request's tokens too: at sglang's default ratio (0.1 of the full pool)
    # only 6 of 16 requests of 4096 + 256 tokens fit, and no step decodes the whole batch (2026-12-03 run).
    extra = ["--load-format", "dummy", "--cuda-graph-max-bs-decode", str(max_c), "--max-running-requests",
             str(max_c), "--max-total-tokens", str(kv), "--swa-full-tokens-ratio", "1.0", "--random-seed", "0",
             "--decode-log-interval", "8", "--served-model-name", bench_e2e.SERVED_NAME]
    out = []
    for i, context in enumerate(args.contexts):
        # the ablation server at the first ceiling only: attention work follows the real length, not the ceiling
        names = list(args.backends) + ([] if args.no_ablation or i else [SKIP])
        for backend in names:
            env = {emulate_sm120.DUMMY_INIT_ENV: "scaled",
                   SPARSE: "mma" if backend == SKIP else backend}
            if backend == SKIP:
                env[emulate_sm120.BREAK_ENV] = "skip-attn"
            out.append(server_pool.Variant(f"{backend}-{context_label(context)}", "patched", env,
                                           model=str(model_dir), context=context, extra_args=extra))
    return out


# -- the profile ---------------------------------------------------------------------------------

def kernel_times(trace: dict) -> tuple[float, float, dict]:
    """(all kernels us, attention kernels us, {attention kernel name: us}) of one chrome trace."""
    total = attn = 0.0
    names: dict = {}
    for name, dur in trace_summary.kernel_events(trace):
        total += dur
        if any(k in name for k in ATTENTION_KERNELS):
            attn += dur
            key = next(k for k in ATTENTION_KERNELS if k in name)
            names[key] = names.get(key, 0.0) + dur
    return total, attn, names


def read_traces(folder: Path) -> dict | None:
    files = sorted(folder.glob("*.trace.json.gz")) + sorted(folder.glob("*.trace.json"))
    if not files:
        return None
    total = attn = 0.0
    names: dict = {}
    for f in files:
        try:
            t, a, n = kernel_times(trace_summary.load_trace(f))
        except (OSError, EOFError, ValueError) as exc:   # a trace cut short: said, not guessed around
            return {"files": [x.name for x in files], "error": f"{f.name}: {type(exc).__name__}: {exc}"[:300]}
        total, attn = total + t, attn + a
        for k, v in n.items():
            names[k] = names.get(k, 0.0) + v
    out = {"files": [f.name for f in files], "kernel_us": total, "attention_us": attn, "by_kernel_us": names,
           "share": attn / total if total and attn else None}
    if not attn:   # said, never reported as a 0 % share
        out["error"] = (f"no sparse-decode kernel ({', '.join(ATTENTION_KERNELS)}) among {total:.0f} us of kernels"
                        " in the trace")
    return out


class Profiler(threading.Thread):
    """Waits for a server log line with `concurrency` requests running, then asks for a profile."""

    def __init__(self, server, concurrency: int, steps: int, folder: Path, log_start: int, timeout: float):
        super().__init__(daemon=True)
        self.server, self.c, self.steps, self.folder = server, concurrency, steps, folder
        self.log_start, self.deadline = log_start, time.monotonic() + timeout
        self.started = None
        self.error = None

    def run(self):
        while time.monotonic() < self.deadline:
            end = self.server.log_path.stat().st_size
            lines = bench_e2e.server_throughput_lines(self.server.log_path, self.log_start, end)
            if any(running == self.c for running, _ in lines):
                break
            time.sleep(0.05)
        else:
            self.error = f"no decode line with {self.c} requests running"
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        body = {"output_dir": str(self.folder.resolve()), "num_steps": self.steps, "activities": ["GPU"],
                "with_stack": False, "record_shapes": False, "profile_prefix": self.folder.name}
        try:
            self.started = time.monotonic()
            # sglang answers "Start profiling." as plain text, not JSON
            with smoke._request(f"{self.server.base}/start_profile", body, timeout=60) as resp:
                resp.read()
        except (urllib.error.URLError, OSError) as exc:
            self.error = f"POST /start_profile: {exc}"[:300]


PROFILED_OUTPUT = 64    # tokens per request of the profiled run: the log line comes at step 8, then the profile
# Requests sample (temperature 1), so every server decodes as varied tokens as the other. Greedy decoding without
# attention collapses: the tiny model's 16 greedy sequences used 8 distinct tokens from step 64 on, against 405
# with attention (live run 10), and a batch of few distinct tokens routes to few experts, which makes the MoE of the
# skip server cheaper than the others' and inflates the ablation share (run 2).
TEMPERATURE = 1.0


def profiled_run(server, c: int, prompt_len: int, args, out_dir: Path, deadline: float, rng) -> tuple:
    """(read_traces result or None, error or None) of one run with a profile of --profile-steps decode steps."""
    folder = out_dir / "profile" / f"{server.variant.name}-c{c}-p{prompt_len}"
    prof = Profiler(server, c, args.profile_steps, folder, server.log_path.stat().st_size, timeout=120)
    prof.start()
    bench_e2e.measure(server.base, c, prompt_len, PROFILED_OUTPUT, deadline, rng, server.log_path, TEMPERATURE)
    prof.join(timeout=60)
    waited = time.monotonic() + 30      # the scheduler writes the trace after its last profiled step
    while prof.error is None and time.monotonic() < waited and not list(folder.glob("*.trace.json*")):
        time.sleep(0.5)
    time.sleep(1.0)                     # a file that just appeared may still be written
    return (read_traces(folder) if folder.exists() else None), prof.error


def measure_server(server, args, out_dir: Path) -> dict:
    record = {"variant": server.variant.name, "server_command": server.launch.shell(),
              "bench_command": command_line(), "startup_s": server.startup_s, "context": server.variant.context,
              "layers": args.layers, "runs": []}
    rng = random.Random(0)
    deadline = time.monotonic() + args.server_budget
    warm = bench_e2e.measure(server.base, 1, 64, 8, deadline, rng, server.log_path, TEMPERATURE)
    say(f"[{server.variant.name}] warm-up: {warm.get('requests_with_decode', 0)}/1 decoded")
    for c in args.concurrency:
        for prompt_len in args.prompt_len:
            run = bench_e2e.measure(server.base, c, prompt_len, args.output_len, deadline, rng, server.log_path,
                                    TEMPERATURE)
            run.pop("raw", None)
            if args.profile_steps:   # a second, profiled run: the tok/s above is measured without the profiler
                run["profile"], run["profile_error"] = profiled_run(server, c, prompt_len, args, out_dir, deadline, rng)
            record["runs"].append(run)
            share = (run.get("profile") or {}).get("share")
            say(f"[{server.variant.name}] c={c} prompt={prompt_len}: {bench_e2e.fmt(run.get('total_tok_s'))} tok/s, "
                f"step {bench_e2e.fmt(run.get('step_ms_median'), 2)} ms, server {bench_e2e.fmt(run.get('server_decode_tok_s'))}"
                f" tok/s, profiled attention share {bench_e2e.fmt(share * 100 if share is not None else None)} %"
                + (f" (profile: {run['profile_error']})" if run.get("profile_error") else "")
                + (f" (profile: {run['profile']['error']})" if (run.get("profile") or {}).get("error") else ""))
    return record


# -- the table -----------------------------------------------------------------------------------

def share_rows(records: dict) -> list[dict]:
    rows = []
    for name, rec in sorted(records.items()):
        backend, ctx = name.rsplit("-", 1)
        if backend == SKIP:
            continue
        skip = records.get(f"{SKIP}-{ctx}") or next((r for n, r in sorted(records.items())
                                                     if n.startswith(f"{SKIP}-")), {})
        skip_runs = {(r["concurrency"], r["prompt_len"]): r for r in skip.get("runs", [])}
        for r in rec.get("runs", []):
            step, base = r.get("step_ms_median"), skip_runs.get((r["concurrency"], r["prompt_len"]), {})
            base_step = base.get("step_ms_median")
            attn_ms = step - base_step if step and base_step else None
            rows.append({"context": ctx, "backend": backend, "concurrency": r["concurrency"],
                         "prompt_len": r["prompt_len"], "tok_s": r.get("total_tok_s"), "step_ms": step,
                         "server_tok_s": r.get("server_decode_tok_s"),
                         "profile_share": (r.get("profile") or {}).get("share"),
                         "skip_step_ms": base_step, "attention_ms": attn_ms,
                         "ablation_share": attn_ms / step if attn_ms is not None else None})
    return rows


def table(rows: list[dict]) -> str:
    f = bench_e2e.fmt
    out = ["| context | backend | concurrency | prompt | decode tok/s | step ms | server tok/s | attention share, "
           "profiled | step ms, no attention | attention ms/step | attention share, ablation |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        pct = lambda x: f(x * 100 if x is not None else None) + ("" if x is None else " %")  # noqa: E731
        out.append(f"| {r['context']} | {r['backend']} | {r['concurrency']} | {r['prompt_len']} | {f(r['tok_s'])} | "
                   f"{f(r['step_ms'], 2)} | {f(r['server_tok_s'])} | {pct(r['profile_share'])} | "
                   f"{f(r['skip_step_ms'], 2)} | {f(r['attention_ms'], 2)} | {pct(r['ablation_share'])} |")
    by = {(r["context"], r["backend"], r["concurrency"], r["prompt_len"]): r for r in rows}
    for (ctx, backend, c, p), r in sorted(by.items()):
        if backend == "mma" and (ctx, "triton", c, p) in by:
            t = by[(ctx, "triton", c, p)]
            if r["tok_s"] and t["tok_s"]:
                out.append(f"mma/triton at {ctx}, c={c}, prompt {p}: {r['tok_s'] / t['tok_s']:.2f}x decode tok/s")
    return "\n".join(out)


def report(out_dir: Path, write: bool = True) -> int:
    """The table from out_dir's server JSONs; write=True (a run) also saves share.json. `--report` passes False:
    re-reading a results folder, committed ones included, must not rewrite it."""
    records = {p.stem: json.loads(p.read_text()) for p in sorted(out_dir.glob("*.json"))
               if p.stem not in ("share", "servers")}
    rows = share_rows(records)
    if write:
        (out_dir / "share.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    return 0


# -- command line --------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python3 -m bench.server.decode_share", description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", type=Path, help="offline bundle dir or installed SITE_ROOT (required to run)")
    ap.add_argument("--out", type=Path, help="results dir (required)")
    ap.add_argument("--backends", type=lambda t: [x for x in t.split(",") if x], default=["triton", "mma"])
    ap.add_argument("--contexts", type=bench_e2e.int_list, default=[1 << 20, 1 << 17])
    ap.add_argument("--concurrency", type=bench_e2e.int_list, default=[1, 16, 64])
    ap.add_argument("--prompt-len", type=bench_e2e.int_list, default=[4096])
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--profile-steps", type=int, default=8, help="decode steps profiled per run (0: no profile)")
    ap.add_argument("--no-ablation", action="store_true", help="no skip-attn server (no ablation share)")
    ap.add_argument("--start-timeout", type=float, default=480.0, help="seconds for each server to come up")
    ap.add_argument("--server-budget", type=float, default=120.0, help="seconds of measuring per server")
    ap.add_argument("--report", type=Path, metavar="DIR", help="print the table from DIR's JSON files; writes nothing")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        return report(args.report, write=False)
    bad = [b for b in args.backends if b not in ("triton", "mma", "torch")]
    if not args.bundle or not args.out or bad:
        print("p1_share: expected --bundle DIR, --out DIR and --backends from triton,mma,torch, found "
              + (f"backends {bad}" if bad else "no --bundle" if not args.bundle else "no --out"), file=sys.stderr)
        return 2
    rc, site = server_pool.gate_trees(args.bundle, ["patched"], args.out, say)
    if rc:
        return rc
    model_dir = bench_e2e.generate_model(args.layers)
    servers = server_pool.build(variants(args, model_dir), site, sys.executable, args.out)
    with server_pool.sigterm_as_exit():
        return _run(servers, args)


def _run(servers, args) -> int:
    def measure(s) -> None:
        try:
            records[s.variant.name] = measure_server(s, args, args.out)
        except (smoke.SmokeFailure, OSError, urllib.error.URLError) as exc:
            s.error = str(exc)[:300]
            say(f"[{s.variant.name}] FAIL: {s.error}")
            return
        (args.out / f"{s.variant.name}.json").write_text(json.dumps(records[s.variant.name], indent=1) + "\n")

    records = {}
    try:
        server_pool.each_alone(servers, args.start_timeout, say, measure)
    finally:
        server_pool.stop_all(servers, say)
        server_pool.say_key_lines(servers, say, args.out)
    report(args.out)
    failed = [s.variant.name for s in servers if s.error]
    if failed:
        say(f"servers that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
