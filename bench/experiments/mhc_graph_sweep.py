"""Experiment (issue 14): graph-replay time of MHC-pre variants at decode sizes, pinned fp32 in the same run.

Columns (us, median of --repeats x mean of --iters replays, the bench_mhc_pre.py method):
  fp32            pinned `hc_pre_torch_impl` (SGLang 0.5.14) replayed in a graph
  2L pP           overlay graph route, two launches, programs_per_sm=P, no PDL (P=2: the 2026-12-01 route)
  2L+pdl pP       the same with the finish kernel launched as a programmatic dependent
  ... btN / kN    token tile capped at N rows / K slice of N (default 64 / 128)
  1S pP           experiments/mhc_graph_variants.py one-launch kernel with the unrolled split add
  err             worst error of every variant over the bf16 bound (<= 1 passes)
Floors: graph replay of one no-op launch, two, two with PDL.

    PATCHKIT_CACHE=.carry python3 -m bench.experiments.mhc_graph_sweep --line 0.5.14 [--tokens ...]
"""
from __future__ import annotations

import argparse
import datetime
import statistics

import torch
import triton

from bench.kernels.bench_mhc_pre import bound_ratio, median_us
from bench.experiments import mhc_graph_variants as V
from bench.timing import capture_graph, event_ms
from harness import dsv4_indexer_cases as C
from harness.line_files import command_lock, exit_not_on_line, line_file, NotOnLine
from harness.upstream import load_kernel
from serving import REPO


def kernel_spans(graph, replays: int = 20):
    """Per-kernel mean durations, mean span of one replay's kernels and mean idle gap between replays."""
    import json
    import tempfile
    from torch.profiler import ProfilerActivity, profile

    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    kernels = sorted((e for e in trace["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    per = len(kernels) // replays
    if per == 0:
        return [], float("nan"), float("nan")
    groups = [kernels[i * per:(i + 1) * per] for i in range(replays)]
    names = [g["name"].split("_mhc_pre_")[-1][:16] for g in groups[0]]
    durs = [(names[j], statistics.mean(g[j]["dur"] for g in groups)) for j in range(per)]
    span = statistics.mean(max(k["ts"] + k["dur"] for k in g) - g[0]["ts"] for g in groups)
    gap = statistics.mean(b[0]["ts"] - max(k["ts"] + k["dur"] for k in a) for a, b in zip(groups, groups[1:]))
    return durs, span, gap


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variants", default="2L:2,2L+pdl:2,2L+pdl:1,2L+pdl:2:bt32,2L+pdl:2:k64,1S:1",
                    help="KIND:programs_per_sm[:btN][:kN], KIND one of 2L, 2L+pdl, 1S; btN caps the token tile at N,"
                         " kN sets the K slice (two-launch only)")
    ap.add_argument("--profile", default="", help="T values whose graphs are also profiled (kernel durations)")
    ap.add_argument("--profile-variants", default="2L p2,2L+pdl p2,1S p1")
    ap.add_argument("--line", default=None, help="the release line of pin.lock (default: the newest, or PATCHKIT_LINE); "
                    "a line that retired P3 is refused with its reason")
    args = ap.parse_args()
    lock = command_lock(args.line)
    try:
        kernel = line_file(lock, "mhc_pre_triton.py")
    except NotOnLine as exc:
        exit_not_on_line("mhc_graph_sweep", exc)

    pristine, patched = C.upstream_trees(line=lock.line)
    fp32 = C.hc_pre_torch_impl(pristine)
    ov = load_kernel(kernel.in_tree(patched), "mhc_overlay_sweep")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print("date:", datetime.date.today().isoformat(), "| GPU:", torch.cuda.get_device_name(), "| SMs", sms,
          "| torch", torch.__version__, "| triton", triton.__version__)

    buf = torch.zeros(1, device="cuda")
    for label, n, pdl in (("1 no-op launch", 1, False), ("2 no-op launches", 2, False), ("2 no-op, PDL", 2, True)):
        g = capture_graph(lambda n=n, pdl=pdl: V.empty_launches(buf, n, pdl))
        print(f"floor {label}: {median_us(lambda: event_ms(g.replay, args.iters), args.repeats):.2f} us")
    for label, n, pdl in (("2 no-op x264 programs", 2, False), ("2 no-op x264 programs, PDL", 2, True)):
        g = capture_graph(lambda n=n, pdl=pdl: V.empty_launches(buf, n, pdl, grid=264))
        print(f"floor {label}: {median_us(lambda: event_ms(g.replay, args.iters), args.repeats):.2f} us")
    print()

    def two_launch(pps, pdl, max_block_t, block_k):
        def run(flat, hc_fn):
            (T, K), N = flat.shape, hc_fn.shape[0]
            mixes = torch.empty((T, 1, N), dtype=torch.float32, device=flat.device)
            config = ov.launch_config(T, K, sms, pps, max_block_t, block_k)
            ov._graph_route(flat, hc_fn, C.RMS_EPS, mixes, T, K, N, *config, pdl=pdl, block_k=block_k)
            return mixes
        return run

    variants = {}
    for spec in args.variants.split(","):
        kind, p, *opts = spec.split(":")       # opts: btN (block_t cap), kN (block_k)
        p = float(p)
        if kind == "1S":
            variants[f"1S p{p:g}"] = lambda flat, hc_fn, p=p: V.mhc_pre_oneshot(flat, hc_fn, C.RMS_EPS, p)
            continue
        bt = next((int(o[2:]) for o in opts if o.startswith("bt")), 64)
        bk = next((int(o[1:]) for o in opts if o.startswith("k")), ov.BLOCK_K)
        variants[" ".join([kind, f"p{p:g}"] + opts)] = two_launch(p, kind == "2L+pdl", bt, bk)
    profile_tokens = {int(t) for t in args.profile.split(",") if t}
    profiles = []

    head = ["fp32"] + list(variants) + ["best", "best x", "err"]
    print("| T | " + " | ".join(head) + " |")
    print("|---:|" + "---:|" * len(head))
    gen = torch.Generator(device="cuda").manual_seed(0)
    hc_fn = torch.randn(C.MIX_HC, C.HC_DIM, generator=gen, device="cuda") * C.HC_DIM ** -0.5
    for tokens in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(tokens, C.HC_MULT, C.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
        flat = x.flatten(1)
        iters = max(10, min(args.iters, args.iters * 64 // tokens))
        graph = capture_graph(lambda: fp32(x, hc_fn))
        base = median_us(lambda: event_ms(graph.replay, iters), args.repeats)
        times, err = {}, 0.0
        for name, fn in variants.items():
            out = []
            graph = capture_graph(lambda fn=fn: out.append(fn(flat, hc_fn)))
            out[-1].fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            r = bound_ratio(x, hc_fn, out[-1])
            err = max(err, r if r == r else float("inf"))     # NaN: an output left unwritten
            times[name] = median_us(lambda: event_ms(graph.replay, iters), args.repeats)
            if tokens in profile_tokens and name in args.profile_variants.split(","):
                try:
                    profiles.append((tokens, name, kernel_spans(graph)))
                except Exception as exc:          # the profiler is extra: keep the table
                    print(f"profile T={tokens} {name}: {exc!r}")
        best = min(times, key=times.get)
        cells = [f"{base:.2f}"] + [f"{times[k]:.2f}" for k in variants] + [best, f"{base / times[best]:.2f}x", f"{err:.3f}"]
        print(f"| {tokens} | " + " | ".join(cells) + " |", flush=True)
    if profiles:
        print()
        print("torch.profiler (CUPTI) over 20 replays, us (mean): kernel durations in launch order; span = first kernel's")
        print("start to last kernel's end within a replay; gap = a replay's last kernel end to the next replay's first start")
        print()
        print("| T | variant | kernels | span | gap |")
        print("|---:|---|---|---:|---:|")
        for tokens, name, (durs, span, gap) in profiles:
            print(f"| {tokens} | {name} | {' / '.join(f'{n} {d:.2f}' for n, d in durs)} | {span:.2f} | {gap:.2f} |")


if __name__ == "__main__":
    main()
