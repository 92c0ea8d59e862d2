"""DSv4 C4 indexer step time against the requests' real length, at a fixed 1M-token context.

Under CUDA graphs the indexer's page table spans the whole context (1M tokens -> 4096 pages ->
262144 c4 positions per row), whatever the requests' lengths. Compares, per batch and real length:
  fp32 fallback  pinned `fp8_paged_mqa_logits_torch_sm120` (SGLang 0.5.14 on sm_120)
  bf16 fallback  the same after P2 (patched tree, SGLANG_SM120_INDEXER_TRITON=0)
  ours           patched function's default route: the length-bounded Triton kernel (P4)
Each is captured once per batch in a CUDA graph (as SGLang's decode does) and replayed with the
real lengths written into the captured seq_lens buffer. Prints a markdown table.

    python3 bench/bench_indexer.py [--pristine-root DIR --patched-root DIR]
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


def graph_time_ms(fn, iters: int) -> tuple[torch.cuda.CUDAGraph, callable]:
    graph = capture_graph(fn)
    return graph, lambda: event_ms(graph.replay, iters, warmup=2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context-tokens", type=int, default=1 << 20)
    ap.add_argument("--lengths", default="4096,8192,32768,131072,1048576", help="real lengths, tokens")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--pristine-root")
    ap.add_argument("--patched-root")
    args = ap.parse_args()

    pristine, patched = C.upstream_trees(args.pristine_root, args.patched_root)
    fp32_fallback = C.indexer_function(pristine)
    patched_fn = C.indexer_function(patched)

    width = triton.cdiv(args.context_tokens, 256)          # page-table width (256-token pages)
    max_seq_len = width * C.PAGE                           # c4 positions the caller passes
    lengths = [int(x) for x in args.lengths.split(",")]
    batches = [int(x) for x in args.batches.split(",")]

    print("command:", " ".join([sys.executable] + sys.argv))
    print("date:", datetime.date.today().isoformat(), "| GPU:", torch.cuda.get_device_name(),
          f"(sm_{''.join(map(str, torch.cuda.get_device_capability()))})",
          "| torch", torch.__version__, "| triton", triton.__version__, "| CUDA", torch.version.cuda,
          "| python", platform.python_version())
    print(f"context {args.context_tokens} tokens -> page table width {width}, max_seq_len {max_seq_len} c4 positions;"
          f" CUDA-graph replay, mean of {args.iters}")
    print()
    print("| batch | real length (tokens) | c4 positions | fp32 fallback ms | bf16 fallback (P2) ms | ours (P4) ms "
          "| vs fp32 | vs bf16 | ours KV GB/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    gen = torch.Generator(device="cuda").manual_seed(0)
    cache = C.make_indexer_cache(max(batches) * width, gen, device="cuda")
    for batch in batches:
        q_fp8, weight = C.make_indexer_query(batch, gen, device="cuda")
        page_table = torch.randperm(cache.shape[0], generator=gen, device="cuda")[: batch * width]
        page_table = page_table.view(batch, width).int()
        seq_lens = torch.ones(batch, 1, dtype=torch.int32, device="cuda")

        def run(fn, route):
            os.environ["SGLANG_SM120_INDEXER_TRITON"] = route    # read at call (capture) time
            return lambda: fn(q_fp8, cache, weight, seq_lens, page_table, None, max_seq_len, False)

        timers = {}
        for key, fn, route in (("fp32", fp32_fallback, "0"), ("bf16", patched_fn, "0"), ("ours", patched_fn, "1")):
            timers[key] = graph_time_ms(run(fn, route), args.iters)
        for tokens in lengths:
            c4 = min(tokens // 4, max_seq_len)
            seq_lens.fill_(c4)
            t = {key: measure() for key, (_, measure) in timers.items()}
            gbps = batch * triton.cdiv(c4, C.PAGE) * C.PAGE_BYTES / (t["ours"] * 1e-3) / 1e9
            print(f"| {batch} | {tokens} | {c4} | {t['fp32']:.3f} | {t['bf16']:.3f} | {t['ours']:.4f} "
                  f"| {t['fp32'] / t['ours']:.1f}x | {t['bf16'] / t['ours']:.1f}x | {gbps:.0f} |", flush=True)
        del timers
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
