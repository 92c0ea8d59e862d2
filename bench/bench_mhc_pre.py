"""DSv4 MHC-pre (`hc_pre_torch_impl`) time, pinned fp32 against P3's bf16, at DSv4-Flash shapes.

x [T, 4, 4096] bf16, hc_fn [24, 16384] fp32, T = tokens in the batch. The functions are the real
nested `hc_pre_torch_impl` compiled out of the pristine and the patched deepseek_v4.py. Timed
eagerly (per call, launches included) and as a CUDA-graph replay (the decode setting). Prints a
markdown table.

    python3 bench/bench_mhc_pre.py [--pristine-root DIR --patched-root DIR]
"""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import dsv4_indexer_cases as C  # noqa: E402


def eager_ms(fn, iters):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def graph_ms(fn, iters):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return eager_ms(graph.replay, iters)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--pristine-root")
    ap.add_argument("--patched-root")
    args = ap.parse_args()

    pristine, patched = C.upstream_trees(args.pristine_root, args.patched_root)
    fp32_impl, bf16_impl = C.hc_pre_torch_impl(pristine), C.hc_pre_torch_impl(patched)

    print("command:", " ".join([sys.executable] + sys.argv))
    print("date:", datetime.date.today().isoformat(), "| GPU:", torch.cuda.get_device_name(),
          f"(sm_{''.join(map(str, torch.cuda.get_device_capability()))})",
          "| torch", torch.__version__, "| triton", triton.__version__, "| CUDA", torch.version.cuda,
          "| python", platform.python_version())
    print(f"x [T, {C.HC_MULT}, {C.HIDDEN}] bf16, hc_fn [{C.MIX_HC}, {C.HC_DIM}] fp32; mean of {args.iters}")
    print()
    print("| T | fp32 eager us | bf16 eager us | eager speedup | fp32 graph us | bf16 graph us | graph speedup |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    hc_fn = torch.randn(C.MIX_HC, C.HC_DIM, generator=gen, device="cuda") * C.HC_DIM ** -0.5
    for tokens in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(tokens, C.HC_MULT, C.HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
        row = []
        for mode in (eager_ms, graph_ms):
            a = mode(lambda: fp32_impl(x, hc_fn), args.iters) * 1e3
            b = mode(lambda: bf16_impl(x, hc_fn), args.iters) * 1e3
            row += [f"{a:.1f}", f"{b:.1f}", f"{a / b:.2f}x"]
        print(f"| {tokens} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
