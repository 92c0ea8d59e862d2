"""Experiment (issue 14): graph-mode MHC-pre variants that are not the overlay's routes.

`_mhc_pre_oneshot`: the overlay's one-launch kernel (partials, arrival counter, the last program of a tile
adds the splits) with the split add unrolled: the last program loads every split of RED_T tokens at once
(SPLITS_POW2 x RED_T x 32 values, no loop over split chunks), so the add is one L2 round trip per RED_T
tokens instead of one per chunk of 4096 / (BLOCK_T x 32) splits (8 round trips at T = 1 in the 2026-12-01
sweep: 14.8 us). Same numerics as the overlay: splits added in index order by the same last-program rule.

`_empty_first` / `_empty_second`: no-op kernels, to time the graph replay floor of one and two launches
(with and without programmatic dependent launch).

Measured on the H200 (2026-12-01, bench/runs/2026-12-01-mhc-pdl-run{1,2}/2026-12-01-mhc-pdl-run{1,2}-sweep.txt): the one-launch kernel
replays in 10.5-30 us (CUPTI: the kernel alone 11.4 us at T = 2), against 4.9-5.2 us for the overlay's two
launches with PDL, so not shipped; a graph of one no-op kernel replays in 4.6-4.9 us (the method's floor).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_K = 128
BLOCK_N = 32
MAX_REDUCE = 256      # SPLITS_POW2 x RED_T: 8192 fp32 values in one load (64 per thread at 4 warps)


@triton.jit
def _mhc_pre_oneshot(
    x_ptr, w_ptr, part_ptr, count_ptr, out_ptr,
    T, K, N, stride_x, stride_w, k_per_split, num_splits, inv_k, eps,
    BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, RED_T: tl.constexpr,
    SPLITS_POW2: tl.constexpr,
):
    tile = tl.program_id(0)
    split = tl.program_id(1)
    sq_ptr = part_ptr + num_splits * T * BLOCK_N
    offs_t = tile * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_T, BLOCK_N], dtype=tl.float32)
    sq = tl.zeros([BLOCK_T], dtype=tl.float32)
    k_start = split * k_per_split
    for k in range(k_start, k_start + k_per_split, BLOCK_K):
        x = tl.load(x_ptr + offs_t[:, None] * stride_x + (k + offs_k)[None, :],
                    mask=(offs_t[:, None] < T) & ((k + offs_k)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * stride_w + (k + offs_k)[:, None],
                    mask=(offs_n[None, :] < N) & ((k + offs_k)[:, None] < K), other=0.0)
        acc = tl.dot(x.to(tl.bfloat16), w.to(tl.bfloat16), acc)
        xf = x.to(tl.float32)
        sq += tl.sum(xf * xf, axis=1)
    row = split * T + offs_t
    tl.store(part_ptr + row[:, None] * BLOCK_N + offs_n[None, :], acc, mask=offs_t[:, None] < T)
    tl.store(sq_ptr + row, sq, mask=offs_t < T)
    tl.debug_barrier()
    arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    if arrived == num_splits - 1:
        tl.debug_barrier()
        offs_s = tl.arange(0, SPLITS_POW2)
        for t0 in tl.static_range(0, BLOCK_T, RED_T):
            offs_r = tile * BLOCK_T + t0 + tl.arange(0, RED_T)
            srow = offs_s[:, None] * T + offs_r[None, :]
            live = (offs_s[:, None] < num_splits) & (offs_r[None, :] < T)
            part = tl.load(part_ptr + srow[:, :, None] * BLOCK_N + offs_n[None, None, :],
                           mask=live[:, :, None], other=0.0, cache_modifier=".cg")
            total = tl.sum(part, axis=0)
            total_sq = tl.sum(tl.load(sq_ptr + srow, mask=live, other=0.0, cache_modifier=".cg"), axis=0)
            rsqrt = 1.0 / tl.sqrt_rn(total_sq * inv_k + eps)
            tl.store(out_ptr + offs_r[:, None] * N + offs_n[None, :], total * rsqrt[:, None],
                     mask=(offs_r[:, None] < T) & (offs_n[None, :] < N))
        tl.atomic_xchg(count_ptr + tile, 0)


def oneshot_config(T: int, K: int, sms: int, programs_per_sm: float):
    """(block_t, red_t, tiles, splits, k_per_split): splits capped so one load holds every split of red_t tokens."""
    block_t = max(16, min(64, triton.next_power_of_2(T)))
    red_t = min(block_t, triton.next_power_of_2(T))
    tiles = triton.cdiv(T, block_t)
    k_blocks = triton.cdiv(K, BLOCK_K)
    cap = max(1, MAX_REDUCE // red_t)
    splits = max(1, min(k_blocks, triton.cdiv(int(programs_per_sm * sms), tiles), cap))
    k_per_split = triton.cdiv(k_blocks, splits) * BLOCK_K
    splits = triton.cdiv(K, k_per_split)
    return block_t, red_t, tiles, splits, k_per_split


_counters: dict = {}


def mhc_pre_oneshot(x_flat: torch.Tensor, hc_fn: torch.Tensor, eps: float, programs_per_sm: float,
                    sms: int | None = None) -> torch.Tensor:
    (T, K), N = x_flat.shape, hc_fn.shape[0]
    device = x_flat.device
    sms = sms or torch.cuda.get_device_properties(device).multi_processor_count
    block_t, red_t, tiles, splits, k_per_split = oneshot_config(T, K, sms, programs_per_sm)
    counters = _counters.get(device)
    if counters is None:
        counters = _counters[device] = torch.zeros(4096, dtype=torch.int32, device=device)
    mixes = torch.empty((T, 1, N), dtype=torch.float32, device=device)
    partials = torch.empty((splits * T * (BLOCK_N + 1),), dtype=torch.float32, device=device)
    _mhc_pre_oneshot[(tiles, splits)](
        x_flat, hc_fn, partials, counters, mixes, T, K, N, x_flat.stride(0), hc_fn.stride(0), k_per_split,
        splits, 1.0 / K, eps, BLOCK_T=block_t, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, RED_T=red_t,
        SPLITS_POW2=triton.next_power_of_2(splits), num_warps=4,
    )
    return mixes


@triton.jit
def _empty_first(ptr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if tl.program_id(0) < 0:          # never: keeps the argument
        tl.store(ptr, 0.0)


@triton.jit
def _empty_second(ptr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_wait()
    if tl.program_id(0) < 0:
        tl.store(ptr, 0.0)


def empty_launches(buf: torch.Tensor, n: int, pdl: bool, grid: int = 1) -> None:
    """n no-op launches: the first plain, the others (with pdl) programmatic dependents of the one before."""
    _empty_first[(grid,)](buf, PDL=pdl)
    for _ in range(n - 1):
        _empty_second[(grid,)](buf, PDL=pdl, **({"launch_pdl": True} if pdl else {}))
