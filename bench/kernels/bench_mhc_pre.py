"""DSv4 MHC-pre (`hc_pre_torch_impl`) time, pinned fp32 against P3's bf16, at DSv4-Flash shapes.

x [T, 4, 4096] bf16, hc_fn [24, 16384] fp32, T = tokens in the batch. The functions are the real
nested `hc_pre_torch_impl` compiled out of the pristine and the patched deepseek_v4.py:
  fp32         pinned (SGLang 0.5.14)
  switch off   patched, SGLANG_SM120_MHC_PRE_TRITON=0 (the release's fp32 code, as pinned)
  before       --before-overlay FILE: the patched function with an earlier mhc_pre_triton.py (optional)
  fused        patched default on CUDA (the overlay's fused Triton kernel)
Timed eagerly (per call, launches included: host-bound at small T) and as CUDA-graph replays (the
decode setting); each time is the median over --repeats of the mean of --iters calls or replays, the
routes' repeats interleaved (fp32, before, fused, fp32, ...).
--compile-tokens: also under torch.compile inside the graph, which is what `compile_in_capture_mode`
does during SGLang's capture. --sweep: the one-launch kernel (the eager route) replayed in a graph,
i.e. its GPU time, per programs-per-SM setting. "err/bound": the worst error of the fused results
(eager and sweep) against float64 over the 2^-8 bound of tests/kernels/test_mhc_bf16.py (<= 1 passes).

    python3 -m bench.kernels.bench_mhc_pre [--pristine-root DIR --patched-root DIR] [--before-overlay FILE]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import tempfile
from pathlib import Path

import torch
import triton

from bench.command import command_line
from bench.timing import capture_graph, event_ms
from harness import dsv4_indexer_cases as C
from harness.upstream import load_kernel


def median_us(measure, repeats):
    return statistics.median(measure() for _ in range(repeats)) * 1e3


def interleaved_median_us(measures: dict, repeats: int) -> dict:
    """Median per key over `repeats` rounds, each round measuring every key once in turn: a slow phase of
    the host (eager calls are bound by host time, which drifts 10-30 us over seconds) hits every route."""
    samples = {k: [] for k in measures}
    for _ in range(repeats):
        for k, measure in measures.items():
            samples[k].append(measure())
    return {k: statistics.median(v) * 1e3 for k, v in samples.items()}


def bound_ratio(x, hc_fn, mixes) -> float:
    """Worst |mix - float64 reference| over the bf16 bound 2^-8 * rsqrt * sum_i |x_i w_i| (<= 1 passes)."""
    x64, w64 = x.flatten(1).double(), hc_fn.double()
    rsqrt = torch.rsqrt(x64.square().mean(-1, keepdim=True) + C.RMS_EPS)
    bound = 2.0 ** -8 * rsqrt * (x64.abs() @ w64.abs().t())
    return ((mixes.reshape(x.shape[0], -1).double() - (x64 @ w64.t()) * rsqrt).abs() / bound).max().item()


def tree_with_overlay(patched: Path, overlay_file: Path) -> Path:
    """A copy of the patched sglang package (hc_pre_torch_impl reads its deepseek_v4.py, its environ.py and what
    that imports, and the release's register_custom_op) with another mhc_pre_triton.py, whose op is renamed (an
    op name is registered once per process; the shipped module keeps its own). An earlier file registered with
    torch.library under sglang_sm120::."""
    root = Path(tempfile.mkdtemp(prefix="mhc-before-"))
    shutil.copytree(patched / "sglang", root / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    text = overlay_file.read_text().replace('op_name="mhc_pre_mixes"', 'op_name="mhc_pre_mixes_before"')
    text = text.replace("sglang_sm120::", "sglang_sm120_before::").replace(
        "torch.ops.sglang_sm120,", "torch.ops.sglang_sm120_before,")
    (root / C.MHC_PRE_TRITON).write_text(text)
    return root


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64,128,256,1024,4096")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compile-tokens", default="64", help="T values also timed under torch.compile ('' for none)")
    ap.add_argument("--pristine-root")
    ap.add_argument("--patched-root")
    ap.add_argument("--before-overlay")
    ap.add_argument("--sweep", default="", help="programs-per-SM values for the fused kernel's graph time")
    args = ap.parse_args()

    pristine, patched = C.upstream_trees(args.pristine_root, args.patched_root)
    impls = {"fp32": C.hc_pre_torch_impl(pristine)}
    os.environ["SGLANG_SM120_MHC_PRE_TRITON"] = "0"        # read when the module flag is evaluated
    impls["switch off"] = C.hc_pre_torch_impl(patched)
    os.environ["SGLANG_SM120_MHC_PRE_TRITON"] = "1"
    if args.before_overlay:
        impls["before"] = C.hc_pre_torch_impl(tree_with_overlay(patched, Path(args.before_overlay)))
    impls["fused"] = C.hc_pre_torch_impl(patched)
    overlay = load_kernel(patched / C.MHC_PRE_TRITON, "mhc_overlay_bench")
    sweep = [float(f) for f in args.sweep.split(",") if f]

    print("command:", command_line())
    print("date:", datetime.date.today().isoformat(), "| GPU:", torch.cuda.get_device_name(),
          f"(sm_{''.join(map(str, torch.cuda.get_device_capability()))})",
          "| torch", torch.__version__, "| triton", triton.__version__, "| CUDA", torch.version.cuda,
          "| python", platform.python_version())
    print(f"x [T, {C.HC_MULT}, {C.HIDDEN}] bf16, hc_fn [{C.MIX_HC}, {C.HC_DIM}] fp32;"
          f" median of {args.repeats} x mean of {args.iters} calls (eager) or replays (graph), us")
    print()
    eager_keys = [k for k in ("fp32", "before", "fused") if k in impls]
    graph_keys = list(impls)
    head = [f"{k} eager" for k in eager_keys] + ["fused/fp32 eager"] + [f"{k} graph" for k in graph_keys]
    head += ["fused/fp32 graph"] + [f"one-launch x{f} graph" for f in sweep] + ["fused err/bound"]
    print("| T | " + " | ".join(head) + " |")
    print("|---:|" + "---:|" * len(head))
    gen = torch.Generator(device="cuda").manual_seed(0)
    hc_fn = torch.randn(C.MIX_HC, C.HC_DIM, generator=gen, device="cuda") * C.HC_DIM ** -0.5
    inputs = {}
    for tokens in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(tokens, C.HC_MULT, C.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
        inputs[tokens] = x
        iters = max(10, min(args.iters, args.iters * 64 // tokens))
        e = interleaved_median_us({k: lambda k=k: event_ms(lambda: impls[k](x, hc_fn), iters) for k in eager_keys},
                                  args.repeats)
        graphs = {k: capture_graph(lambda k=k: impls[k](x, hc_fn)) for k in graph_keys}
        g = interleaved_median_us({k: lambda k=k: event_ms(graphs[k].replay, iters) for k in graph_keys}, args.repeats)
        s = []
        err = bound_ratio(x, hc_fn, impls["fused"](x, hc_fn)[1])
        for f in sweep:
            flat = x.flatten(1)
            out = []
            graph = capture_graph(lambda: out.append(overlay.mhc_pre_mixes_triton(flat, hc_fn, C.RMS_EPS, route="one-launch", programs_per_sm=f)))
            s.append(median_us(lambda: event_ms(graph.replay, iters), args.repeats))
            err = max(err, bound_ratio(x, hc_fn, out[-1]))
        cells = [f"{e[k]:.1f}" for k in eager_keys] + [f"{e['fp32'] / e['fused']:.2f}x"]
        cells += [f"{g[k]:.1f}" for k in graph_keys] + [f"{g['fp32'] / g['fused']:.2f}x"] + [f"{v:.1f}" for v in s] + [f"{err:.3f}"]
        print(f"| {tokens} | " + " | ".join(cells) + " |", flush=True)

    compile_tokens = [int(t) for t in args.compile_tokens.split(",") if t]
    if compile_tokens:
        print()
        print("torch.compile inside the CUDA graph (as under SGLang's capture):")
        print()
        print("| T | fp32 compiled graph us | fused compiled graph us | speedup |")
        print("|---:|---:|---:|---:|")
    for tokens in compile_tokens:
        x = inputs.get(tokens)
        if x is None:
            x = torch.randn(tokens, C.HC_MULT, C.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
        a = median_us(lambda f=capture_graph(lambda f=torch.compile(impls["fp32"]): f(x, hc_fn)): event_ms(f.replay, args.iters), args.repeats)
        b = median_us(lambda f=capture_graph(lambda f=torch.compile(impls["fused"]): f(x, hc_fn)): event_ms(f.replay, args.iters), args.repeats)
        print(f"| {tokens} | {a:.1f} | {b:.1f} | {a / b:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
