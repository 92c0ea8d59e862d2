"""DSv4 C4 indexer step time against the requests' real length, at a fixed 1M-token context.

Under CUDA graphs the indexer's page table spans the whole context (1M tokens -> 4096 pages ->
262144 c4 positions per row), whatever the requests' lengths. Compares, per batch and real length:
  fp32 fallback  pinned `fp8_paged_mqa_logits_torch_sm120` (the line's release on sm_120)
  bf16 fallback  the same after P2 (patched tree, SGLANG_SM120_INDEXER_TRITON=0)
  before         --before-overlay FILE: an earlier version of the P4 overlay kernel (optional)
  ours           patched function's default route: the length-bounded Triton kernel (P4)
Each is captured once per batch in a CUDA graph (as SGLang's decode does) and replayed with the
real lengths written into the captured seq_lens buffer; a time is the median over --repeats of the
mean of --iters replays. "% of copy" = (KV pages read + logits written) / time over the device-to-
device copy bandwidth measured in the same run (bytes read + written). --configs times named
INDEXER_CONFIGS of the overlay as well (the sweep that picked the default). Prints markdown tables.

    python3 -m bench.kernels.bench_indexer --line 0.5.14 [--pristine-root DIR --patched-root DIR] [--before-overlay FILE]

--line NAME: the release line (default: the newest, or PATCHKIT_LINE); a line that retired P2 / P4 is refused with
the reason its retired.toml gives (harness/line_files.py).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
from pathlib import Path

import torch
import triton

from bench.command import command_line
from bench.timing import capture_graph, event_ms
from harness import dsv4_indexer_cases as C
from harness.line_files import command_lock, exit_not_on_line, line_file, NotOnLine
from harness.upstream import load_module
from serving import REPO

KERNEL = "paged_mqa_logits_triton.py"   # P4's length-bounded kernel, the line's overlay file
LINE_FILES = (KERNEL,)                  # what the bench reads, resolved per line (harness/line_files.py)


def copy_bandwidth_gbps(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy of nbytes, counted as bytes read + bytes written, median of 5."""
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = [event_ms(lambda: dst.copy_(src), 10) for _ in range(5)]
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--line", help="the release line of pin.lock (default: the newest, or PATCHKIT_LINE)")
    ap.add_argument("--context-tokens", type=int, default=1 << 20)
    ap.add_argument("--lengths", default="4096,8192,32768,131072,1048576", help="real lengths, tokens")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pristine-root")
    ap.add_argument("--patched-root")
    ap.add_argument("--before-overlay", help="an earlier paged_mqa_logits_triton.py, timed as 'before'")
    ap.add_argument("--configs", default="", help="comma-separated INDEXER_CONFIGS names to time too")
    ap.add_argument("--fallbacks", default="fp32,bf16", help="torch fallbacks to time: fp32 (pinned), bf16 (P2); '' for none")
    args = ap.parse_args()
    lock = command_lock(args.line)
    try:
        kernel = line_file(lock, KERNEL)
    except NotOnLine as exc:
        exit_not_on_line("bench_indexer", exc)

    pristine, patched = C.upstream_trees(args.pristine_root, args.patched_root, lock.line)
    fp32_fallback = C.indexer_function(pristine)
    patched_fn = C.indexer_function(patched)
    overlay = load_module(kernel.in_tree(patched), "indexer_overlay_bench")
    before = load_module(Path(args.before_overlay), "indexer_before") if args.before_overlay else None
    configs = [c for c in args.configs.split(",") if c]

    width = triton.cdiv(args.context_tokens, 256)          # page-table width (256-token pages)
    max_seq_len = width * C.PAGE                           # c4 positions the caller passes
    lengths = [int(x) for x in args.lengths.split(",")]
    batches = [int(x) for x in args.batches.split(",")]

    print("command:", command_line())
    print("date:", datetime.date.today().isoformat(), "| GPU:", torch.cuda.get_device_name(),
          f"(sm_{''.join(map(str, torch.cuda.get_device_capability()))},",
          f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs)",
          "| torch", torch.__version__, "| triton", triton.__version__, "| CUDA", torch.version.cuda,
          "| python", platform.python_version(), "| default config", overlay.DEFAULT_CONFIG)
    copy_gbps = copy_bandwidth_gbps()
    print(f"device-to-device copy: {copy_gbps:.0f} GB/s (read + write)")
    print(f"context {args.context_tokens} tokens -> page table width {width}, max_seq_len {max_seq_len} c4 positions;"
          f" CUDA-graph replay, median of {args.repeats} x mean of {args.iters}")
    print()

    routes = {}
    fallbacks = args.fallbacks.split(",")
    if "fp32" in fallbacks:
        routes["fp32 fallback ms"] = lambda a: (fp32_fallback, "0", a)
    if "bf16" in fallbacks:
        routes["bf16 fallback (P2) ms"] = lambda a: (patched_fn, "0", a)
    if before is not None:
        routes["before ms"] = lambda a: (before.fp8_paged_mqa_logits_triton, None, a)
    routes["ours (P4) ms"] = lambda a: (patched_fn, "1", a)
    for name in configs:
        routes[name] = lambda a, name=name: (overlay.fp8_paged_mqa_logits_triton, name, a)

    cols = list(routes)
    print("| batch | real length (tokens) | c4 positions | " + " | ".join(cols)
          + " | ours vs before (vs fp32) | ours GB/s | ours % of copy |")
    print("|---:|---:|---:|" + "---:|" * len(cols) + "---:|---:|---:|")

    gen = torch.Generator(device="cuda").manual_seed(0)
    cache = C.make_indexer_cache(max(batches) * width, gen, device="cuda")
    for batch in batches:
        q_fp8, weight = C.make_indexer_query(batch, gen, device="cuda")
        page_table = torch.randperm(cache.shape[0], generator=gen, device="cuda")[: batch * width]
        page_table = page_table.view(batch, width).int()
        seq_lens = torch.ones(batch, 1, dtype=torch.int32, device="cuda")

        def step(spec):
            fn, route, _ = spec
            if fn is patched_fn or fn is fp32_fallback:
                os.environ["SGLANG_SM120_INDEXER_TRITON"] = route    # read at call (capture) time
                return lambda: fn(q_fp8, cache, weight, seq_lens, page_table, None, max_seq_len, False)
            if route is None:
                return lambda: fn(q_fp8, cache, weight, seq_lens, page_table, max_seq_len, False)
            return lambda: fn(q_fp8, cache, weight, seq_lens, page_table, max_seq_len, False, config=route)

        graphs = {col: capture_graph(step(make(None))) for col, make in routes.items()}
        for tokens in lengths:
            c4 = min(tokens // 4, max_seq_len)
            seq_lens.fill_(c4)
            t = {col: statistics.median(event_ms(g.replay, args.iters, warmup=2) for _ in range(args.repeats))
                 for col, g in graphs.items()}
            ours = t["ours (P4) ms"]
            pages = triton.cdiv(c4, C.PAGE)
            nbytes = batch * pages * (C.PAGE_BYTES + C.PAGE * 4)
            gbps = nbytes / (ours * 1e-3) / 1e9
            vs = f"{t['before ms'] / ours:.2f}x" if "before ms" in t else "-"
            if "fp32 fallback ms" in t:
                vs += f" (fp32: {t['fp32 fallback ms'] / ours:.1f}x)"
            print(f"| {batch} | {tokens} | {c4} | " + " | ".join(f"{t[c]:.4f}" for c in cols)
                  + f" | {vs} | {gbps:.0f} | {100 * gbps / copy_gbps:.0f}% |", flush=True)
        del graphs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
