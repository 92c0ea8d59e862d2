"""What every decode bench shares: the pools and input sets, CUDA-graph timing, the copy-bandwidth floor, the
float64 reference and the header line. bench/kernels/bench_mma_decode.py, bench/kernels/bench_unpadded_heads.py and the experiments
time their kernels through it; the page layout and the float64 attention are serving/mma_decode_cases.py's, the
ones the tests check the kernels against.
"""
from __future__ import annotations

import platform

import torch
import triton

from bench.command import command_line
from serving.mma_decode_cases import attention_f64, kernel_view, page_bytes, tokens_f64

ROTATE = 8                  # input sets per graph: each call reads its own KV, so KV comes from HBM, not L2
BYTES_PER_TOKEN = 584       # what a call must read per token: the HBM floor's numerator
SCALE = 512 ** -0.5


def make_pool(num_pages: int, p: int, gen) -> torch.Tensor:
    """Random FP8 pool in the DSv4 layout (finite fp8 codes, 2^-7 scales, bf16 rope), on gen's device."""
    pool = torch.randint(0, 256, (num_pages, page_bytes(p)), dtype=torch.uint8, device=gen.device, generator=gen)
    pool[(pool & 0x7F) == 0x7F] = 0  # e4m3fn NaN codes
    body = pool[:, : p * 576].view(num_pages, p, 576)
    rope = torch.randn(num_pages, p, 64, device=gen.device, generator=gen).to(torch.bfloat16)
    body[..., 448:] = rope.view(torch.uint8)
    pool[:, p * 576 : p * 584] = 120
    return pool


class Shape:
    """B query rows (one per token: a decode batch, a verify batch's tokens or a prefill chunk) of H heads."""

    def __init__(self, B, H, topk, extra_topk, page=256, extra_page=64, label=None, kind="decode"):
        self.B, self.H, self.topk, self.extra_topk = B, H, topk, extra_topk
        self.page, self.extra_page = page, extra_page
        self.label, self.kind = label or f"B{B}", kind

    @property
    def name(self):
        kind = f"win{self.topk}+ex{self.extra_topk}" if self.extra_topk else f"topk{self.topk}"
        return f"H{self.H}/{self.label}/{kind}"

    def kv_bytes(self):
        return self.B * (self.topk + self.extra_topk) * BYTES_PER_TOKEN


class Inputs:
    """ROTATE input sets over shared pools; every index valid and every length full."""

    def __init__(self, shape: Shape, pools, gen):
        s = shape
        self.shape = shape
        (self.pool, self.extra_pool) = pools
        self.k_cache = kernel_view(self.pool, s.page)
        self.extra_k_cache = kernel_view(self.extra_pool, s.extra_page) if s.extra_topk else None
        n_main = self.pool.shape[0] * s.page
        n_extra = self.extra_pool.shape[0] * s.extra_page
        dev = self.pool.device
        self.sets = []
        for _ in range(ROTATE):
            d = {
                "q": torch.randn(s.B, 1, s.H, 512, device=dev, generator=gen).to(torch.bfloat16),
                "indices": torch.randint(0, n_main, (s.B, 1, s.topk), device=dev, generator=gen, dtype=torch.int32),
                "topk_length": torch.full((s.B,), s.topk, device=dev, dtype=torch.int32),
                "extra_indices": None, "extra_topk_length": None,
            }
            if s.extra_topk:
                d["extra_indices"] = torch.randint(0, n_extra, (s.B, 1, s.extra_topk), device=dev, generator=gen, dtype=torch.int32)
                d["extra_topk_length"] = torch.full((s.B,), s.extra_topk, device=dev, dtype=torch.int32)
            self.sets.append(d)
        self.sink = torch.randn(s.H, device=dev, generator=gen)

    def args(self, i):
        d = self.sets[i]
        return (d["q"], self.k_cache, d["indices"], d["topk_length"], self.sink, 512, SCALE,
                self.extra_k_cache, d["extra_indices"], d["extra_topk_length"])


# Tokens gathered per float64 slice of the reference: a 8192-row prefill chunk of 1152 tokens each would be
# 38 GB of float64 KV at once; a slice of rows keeps it near 1 GB.
REF_TOKENS_PER_SLICE = 1 << 18


def reference_f64(inp: "Inputs", i: int) -> torch.Tensor:
    """float64 output [B, 1, H, 512] of input set i, from the pool bytes (every index valid, full
    lengths): the error columns are measured against it, sink included. Rows are independent, so they are
    computed in slices of at most REF_TOKENS_PER_SLICE gathered tokens."""
    q, _, idx, _, sink, _, scale, _, eidx, _ = inp.args(i)
    s = inp.shape
    step = max(1, REF_TOKENS_PER_SLICE // (s.topk + s.extra_topk))
    return torch.cat([reference_rows(inp, q[r:r + step], idx[r:r + step], sink, scale,
                                     None if eidx is None else eidx[r:r + step])
                      for r in range(0, s.B, step)])


def reference_rows(inp: "Inputs", q, idx, sink, scale, eidx) -> torch.Tensor:
    """reference_f64 of the rows q holds (idx, eidx: their indices)."""
    s, rows = inp.shape, q.shape[0]
    kv = tokens_f64(inp.pool, s.page, idx.reshape(rows, -1))
    if s.extra_topk:
        kv = torch.cat([kv, tokens_f64(inp.extra_pool, s.extra_page, eidx.reshape(rows, -1))], 1)
    valid = torch.ones(kv.shape[:2], dtype=torch.bool, device=kv.device)
    return attention_f64(q[:, 0].double(), kv, valid, scale, sink)[0][:, None]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| over the whole output."""
    return ((out.double() - ref).norm() / ref.norm().clamp(min=1e-30)).item()


def graph_time_us(calls, replays=20) -> float:
    """Per-call time of `calls` (one per input set) captured in one graph and replayed."""
    for c in calls:
        c()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (replays * len(calls)))
    del g
    return sorted(times)[1]


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (4 GiB buffers)."""
    n = 1 << 32
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    end.synchronize()
    sec = start.elapsed_time(end) / 1e3 / 10
    del a, b
    return 2 * n / sec


def print_header() -> None:
    """The command, GPU and versions every decode bench prints first."""
    print("command:", command_line())
    print(f"gpu: {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).multi_processor_count} SMs), "
          f"torch {torch.__version__}, triton {triton.__version__}, python {platform.python_version()}")
