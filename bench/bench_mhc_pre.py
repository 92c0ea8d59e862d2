"""DSv4 MHC-pre (`hc_pre_torch_impl`) time, pinned fp32 against P3's bf16, at DSv4-Flash shapes.

x [T, 4, 4096] bf16, hc_fn [24, 16384] fp32, T = tokens in the batch. The functions are the real
nested `hc_pre_torch_impl` compiled out of the pristine and the patched deepseek_v4.py:
  fp32         pinned (SGLang 0.5.14)
  bf16 torch   patched, SGLANG_SM120_MHC_PRE_TRITON=0 (bf16 F.linear, fp32 statistics)
  bf16 fused   patched default on CUDA (the overlay's fused Triton kernel)
Timed eagerly (per call, launches included) and as CUDA-graph replays (the decode setting); for
--compile-tokens also under torch.compile inside the graph, which is what `compile_in_capture_mode`
does during SGLang's capture. Prints markdown tables.

    python3 bench/bench_mhc_pre.py [--pristine-root DIR --patched-root DIR]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import dsv4_indexer_cases as C  # noqa: E402
from timing import capture_graph, event_ms  # noqa: E402


def eager_ms(fn, iters):
    return event_ms(fn, iters)


def graph_ms(fn, iters):
    return event_ms(capture_graph(fn).replay, iters)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--compile-tokens", default="64", help="T values also timed under torch.compile ('' for none)")
    ap.add_argument("--pristine-root")
    ap.add_argument("--patched-root")
    args = ap.parse_args()

    pristine, patched = C.upstream_trees(args.pristine_root, args.patched_root)
    impls = {"fp32": C.hc_pre_torch_impl(pristine)}
    os.environ["SGLANG_SM120_MHC_PRE_TRITON"] = "0"        # read when the module flag is evaluated
    impls["bf16 torch"] = C.hc_pre_torch_impl(patched)
    os.environ["SGLANG_SM120_MHC_PRE_TRITON"] = "1"
    impls["bf16 fused"] = C.hc_pre_torch_impl(patched)

    print("command:", " ".join([sys.executable] + sys.argv))
    print("date:", datetime.date.today().isoformat(), "| GPU:", torch.cuda.get_device_name(),
          f"(sm_{''.join(map(str, torch.cuda.get_device_capability()))})",
          "| torch", torch.__version__, "| triton", triton.__version__, "| CUDA", torch.version.cuda,
          "| python", platform.python_version())
    print(f"x [T, {C.HC_MULT}, {C.HIDDEN}] bf16, hc_fn [{C.MIX_HC}, {C.HC_DIM}] fp32; mean of {args.iters}")
    print()
    print("| T | fp32 eager us | bf16 fused eager us | eager speedup | fp32 graph us | bf16 torch graph us "
          "| bf16 fused graph us | graph speedup (fused) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    hc_fn = torch.randn(C.MIX_HC, C.HC_DIM, generator=gen, device="cuda") * C.HC_DIM ** -0.5
    inputs = {}
    for tokens in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(tokens, C.HC_MULT, C.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
        inputs[tokens] = x
        t = {}
        for key in ("fp32", "bf16 fused"):
            t[key, "eager"] = eager_ms(lambda: impls[key](x, hc_fn), args.iters) * 1e3
        for key in impls:
            t[key, "graph"] = graph_ms(lambda: impls[key](x, hc_fn), args.iters) * 1e3
        print(f"| {tokens} | {t['fp32', 'eager']:.1f} | {t['bf16 fused', 'eager']:.1f} "
              f"| {t['fp32', 'eager'] / t['bf16 fused', 'eager']:.2f}x | {t['fp32', 'graph']:.1f} "
              f"| {t['bf16 torch', 'graph']:.1f} | {t['bf16 fused', 'graph']:.1f} "
              f"| {t['fp32', 'graph'] / t['bf16 fused', 'graph']:.2f}x |", flush=True)

    compile_tokens = [int(t) for t in args.compile_tokens.split(",") if t]
    if compile_tokens:
        print()
        print("torch.compile inside the CUDA graph (as under SGLang's capture):")
        print()
        print("| T | fp32 compiled graph us | bf16 fused compiled graph us | speedup |")
        print("|---:|---:|---:|---:|")
    for tokens in compile_tokens:
        x = inputs.get(tokens)
        if x is None:
            x = torch.randn(tokens, C.HC_MULT, C.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
        a = graph_ms(lambda f=torch.compile(impls["fp32"]): f(x, hc_fn), args.iters) * 1e3
        b = graph_ms(lambda f=torch.compile(impls["bf16 fused"]): f(x, hc_fn), args.iters) * 1e3
        print(f"| {tokens} | {a:.1f} | {b:.1f} | {a / b:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
