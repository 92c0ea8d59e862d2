"""DSv4 MHC-pre (`hc_pre_torch_impl`) time, pinned fp32 against P3's bf16, at DSv4-Flash shapes.

x [T, 4, 4096] bf16, hc_fn [24, 16384] fp32, T = tokens in the batch. The functions are the real
nested `hc_pre_torch_impl` compiled out of the pristine and the patched deepseek_v4.py:
  fp32         pinned (the line's release)
  switch off   patched, SGLANG_SM120_MHC_PRE_TRITON=0 (the release's fp32 code, as pinned)
  before       --before-overlay FILE: the patched function with an earlier mhc_pre_triton.py (optional)
  fused        patched default on CUDA (the overlay's fused Triton kernel)
Timed eagerly (per call, launches included: host-bound at small T) and as CUDA-graph replays (the
decode setting); each time is the median over --repeats of the mean of --iters calls or replays, the
routes' repeats interleaved (fp32, before, fused, fp32, ...).
--compile-tokens: also under torch.compile inside the graph, which is what `compile_in_capture_mode`
does during SGLang's capture. --sweep: the one-launch kernel (the eager route) replayed in a graph,
i.e. its GPU time, per programs-per-SM setting. "err/bound": the worst error of the fused results
(eager and sweep) against float64 over the 2^-8 bound of tests/line_0_5_14/test_mhc_bf16.py (<= 1 passes).
--fp-fusion both: the fused kernel's two routes (graph: two launches; one-launch) with FP fusion on and off, same
inputs, as CUDA-graph replays, each with its error against float64 (err/bound and the relative error).
--kernel-only: that table alone, for the overlay kernel file (no pinned trees: with --release-tree, a folder of
bench/airgapped/release_slice.py, nothing of the wheel is needed).
--line NAME: the release line (default: the newest, or PATCHKIT_LINE); a line that retired P3 is refused with the
reason its retired.toml gives (harness/line_files.py).

    python3 -m bench.kernels.bench_mhc_pre --line 0.5.14 [--pristine-root DIR --patched-root DIR] [--before-overlay FILE] [--fp-fusion both]
    python3 -m bench.kernels.bench_mhc_pre --line 0.5.14 --kernel-only --fp-fusion both [--release-tree DIR] [--tokens 1,64]
    python3 -m bench.kernels.bench_mhc_pre --line 0.5.14 --rows v41 [--hidden 4096 --hc-mult 4] --pristine-root DIR --patched-root DIR

--rows v41: T = the rows of bench/kernels/v41_rows.py (decode, DSPARK target-verify, prefill chunks), the token counts of
the one MHC-pre call a forward reaches on 0.5.23 (patches/0.5.23/sglang/reach.toml); --hidden / --hc-mult: the
model's hidden size and hyper-connection count (DSv4-Flash's by default; another model's from its config.json).
Both hold for --fp-fusion's table and --kernel-only too.
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

from bench.kernels import v41_rows as V41
from bench.command import command_line
from bench.timing import capture_graph, event_ms
from harness import dsv4_indexer_cases as C
from harness.line_files import command_lock, exit_not_on_line, line_path, NotOnLine, overlay_file
from harness.upstream import load_kernel
from serving import REPO

KERNEL = "mhc_pre_triton.py"   # P3's fused kernel, the line's overlay file
LINE_FILES = (KERNEL,)         # what the bench reads, resolved per line (harness/line_files.py)


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


def rel_err(x, hc_fn, mixes) -> float:
    """||mixes - float64 reference|| / ||reference||."""
    x64, w64 = x.flatten(1).double(), hc_fn.double()
    ref = (x64 @ w64.t()) * torch.rsqrt(x64.square().mean(-1, keepdim=True) + C.RMS_EPS)
    return ((mixes.reshape(x.shape[0], -1).double() - ref).norm() / ref.norm()).item()


def fusion_table(overlay, tokens: list[int], iters: int, repeats: int, gen, hc: int = C.HC_MULT,
                 hidden: int = C.HIDDEN) -> None:
    """The fused kernel's two routes with enable_fp_fusion on and off (the module's ENABLE_FP_FUSION, read at
    launch), same inputs, CUDA-graph replays, x [T, hc, hidden]; errors against float64."""
    shipped = overlay.ENABLE_FP_FUSION
    print()
    print(f"FP fusion: the kernels state enable_fp_fusion={shipped}; fused kernel replayed in a CUDA graph, us;"
          " err: worst err/bound (<= 1 passes) and relative error vs float64")
    print()
    routes = ("graph", "one-launch")
    head = [f"{r} fusion {k} us" for r in routes for k in ("on", "off")]
    head += [f"{r} err/bound on / off" for r in routes] + [f"{r} rel. err on / off" for r in routes]
    print("| T | " + " | ".join(head) + " |")
    print("|---:|" + "---:|" * len(head))
    mix_hc, hc_dim = (2 + hc) * hc, hc * hidden
    hc_fn = torch.randn(mix_hc, hc_dim, generator=gen, device="cuda") * hc_dim ** -0.5
    for t in tokens:
        x = torch.randn(t, hc, hidden, generator=gen, device="cuda").to(torch.bfloat16)
        flat, n = x.flatten(1), max(10, min(iters, iters * 64 // t))
        times, bounds, rels = {}, {}, {}
        for route in routes:
            for fusion in (True, False):
                overlay.ENABLE_FP_FUSION = fusion
                try:
                    out = []
                    graph = capture_graph(lambda: out.append(overlay.mhc_pre_mixes_triton(flat, hc_fn, C.RMS_EPS, route=route)))
                    graph.replay()
                    torch.cuda.synchronize()
                finally:
                    overlay.ENABLE_FP_FUSION = shipped
                times[route, fusion] = median_us(lambda: event_ms(graph.replay, n), repeats)
                bounds[route, fusion] = bound_ratio(x, hc_fn, out[-1])
                rels[route, fusion] = rel_err(x, hc_fn, out[-1])
        cells = [f"{times[r, f]:.1f}" for r in routes for f in (True, False)]
        cells += [f"{bounds[r, True]:.3f} / {bounds[r, False]:.3f}" for r in routes]
        cells += [f"{rels[r, True]:.2e} / {rels[r, False]:.2e}" for r in routes]
        print(f"| {t} | " + " | ".join(cells) + " |", flush=True)


def print_header(args) -> None:
    print("command:", command_line())
    print("date:", datetime.date.today().isoformat(), "| GPU:", torch.cuda.get_device_name(),
          f"(sm_{''.join(map(str, torch.cuda.get_device_capability()))})",
          "| torch", torch.__version__, "| triton", triton.__version__, "| CUDA", torch.version.cuda,
          "| python", platform.python_version())
    hc, hidden = args.hc_mult, args.hidden
    print(f"x [T, {hc}, {hidden}] bf16, hc_fn [{(2 + hc) * hc}, {hc * hidden}] fp32;"
          f" median of {args.repeats} x mean of {args.iters} calls (eager) or replays (graph), us")


def tree_with_overlay(patched: Path, before: Path, lock) -> Path:
    """A copy of the patched sglang package (hc_pre_torch_impl reads its deepseek_v4.py, its environ.py and what
    that imports, and the release's register_custom_op) with another mhc_pre_triton.py, whose op is renamed (an
    op name is registered once per process; the shipped module keeps its own). An earlier file registered with
    torch.library under sglang_sm120::."""
    root = Path(tempfile.mkdtemp(prefix="mhc-before-"))
    shutil.copytree(patched / "sglang", root / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    text = before.read_text().replace('op_name="mhc_pre_mixes"', 'op_name="mhc_pre_mixes_before"')
    text = text.replace("sglang_sm120::", "sglang_sm120_before::").replace(
        "torch.ops.sglang_sm120,", "torch.ops.sglang_sm120_before,")
    (root / line_path(lock, KERNEL)).write_text(text)
    return root


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--line", help="the release line of pin.lock (default: the newest, or PATCHKIT_LINE)")
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64,128,256,1024,4096")
    ap.add_argument("--rows", choices=("v41",), help="T = bench/kernels/v41_rows.py's row counts instead of --tokens")
    ap.add_argument("--hidden", type=int, default=C.HIDDEN, help="hidden size (default: DSv4-Flash's %(default)s)")
    ap.add_argument("--hc-mult", type=int, default=C.HC_MULT, help="hyper-connections (default: %(default)s)")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compile-tokens", default="64", help="T values also timed under torch.compile ('' for none)")
    ap.add_argument("--pristine-root")
    ap.add_argument("--patched-root")
    ap.add_argument("--before-overlay")
    ap.add_argument("--sweep", default="", help="programs-per-SM values for the fused kernel's graph time")
    ap.add_argument("--fp-fusion", choices=("shipped", "both"), default="shipped",
                    help="both: also a table of the fused kernel with FP fusion on and off")
    ap.add_argument("--kernel-only", action="store_true",
                    help="only the --fp-fusion table, for the overlay kernel file (no pinned trees)")
    ap.add_argument("--overlay", type=Path, help="the kernel file --kernel-only loads (default: the line's overlay file)")
    ap.add_argument("--release-tree", type=Path,
                    help="with --kernel-only: the release's register_custom_op files (bench/airgapped/release_slice.py)")
    args = ap.parse_args()
    lock = command_lock(args.line)
    try:
        shipped = overlay_file(lock, KERNEL)
    except NotOnLine as exc:
        exit_not_on_line("bench_mhc_pre", exc)
    hc, hidden = args.hc_mult, args.hidden
    mix_hc, hc_dim = (2 + hc) * hc, hc * hidden
    tokens_list = [r for r, _, _ in V41.v41_rows()] if args.rows else [int(t) for t in args.tokens.split(",")]
    if args.kernel_only:
        overlay = load_kernel(args.overlay or shipped, "mhc_overlay_bench", tree=args.release_tree)
        print_header(args)
        fusion_table(overlay, tokens_list, args.iters, args.repeats, torch.Generator(device="cuda").manual_seed(0),
                     hc, hidden)
        return

    pristine, patched = C.upstream_trees(args.pristine_root, args.patched_root, lock.line)
    impls = {"fp32": C.hc_pre_torch_impl(pristine)}
    os.environ["SGLANG_SM120_MHC_PRE_TRITON"] = "0"        # read when the module flag is evaluated
    impls["switch off"] = C.hc_pre_torch_impl(patched)
    os.environ["SGLANG_SM120_MHC_PRE_TRITON"] = "1"
    if args.before_overlay:
        impls["before"] = C.hc_pre_torch_impl(tree_with_overlay(patched, Path(args.before_overlay), lock))
    impls["fused"] = C.hc_pre_torch_impl(patched)
    overlay = load_kernel(C.mhc_pre_file(patched), "mhc_overlay_bench")
    sweep = [float(f) for f in args.sweep.split(",") if f]

    print_header(args)
    print()
    eager_keys = [k for k in ("fp32", "before", "fused") if k in impls]
    graph_keys = list(impls)
    head = [f"{k} eager" for k in eager_keys] + ["fused/fp32 eager"] + [f"{k} graph" for k in graph_keys]
    head += ["fused/fp32 graph"] + [f"one-launch x{f} graph" for f in sweep] + ["fused err/bound"]
    print("| T | " + " | ".join(head) + " |")
    print("|---:|" + "---:|" * len(head))
    gen = torch.Generator(device="cuda").manual_seed(0)
    hc_fn = torch.randn(mix_hc, hc_dim, generator=gen, device="cuda") * hc_dim ** -0.5
    inputs = {}
    for tokens in tokens_list:
        x = torch.randn(tokens, hc, hidden, generator=gen, device="cuda").to(torch.bfloat16)
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
            x = torch.randn(tokens, hc, hidden, generator=gen, device="cuda").to(torch.bfloat16)
        a = median_us(lambda f=capture_graph(lambda f=torch.compile(impls["fp32"]): f(x, hc_fn)): event_ms(f.replay, args.iters), args.repeats)
        b = median_us(lambda f=capture_graph(lambda f=torch.compile(impls["fused"]): f(x, hc_fn)): event_ms(f.replay, args.iters), args.repeats)
        print(f"| {tokens} | {a:.1f} | {b:.1f} | {a / b:.2f}x |", flush=True)
    if args.fp_fusion == "both":
        fusion_table(overlay, tokens_list, args.iters, args.repeats, gen, hc, hidden)


if __name__ == "__main__":
    main()
