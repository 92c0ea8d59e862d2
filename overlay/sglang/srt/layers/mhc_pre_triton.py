"""DeepSeek-V4 MHC-pre mixes in one bf16 tensor-core pass: mixes = (x @ hc_fn^T) * rsqrt(mean(x^2) + eps).

Drop-in for the math of `hc_pre_torch_impl` (models/deepseek_v4.py), which sm_120 runs twice per
layer: x [T, 16384] bf16 (the flattened 4 x 4096 hyper-connection residual), hc_fn [24, 16384] fp32.
Upstream widens x to fp32 and runs an fp32 GEMM plus five elementwise/reduction kernels; at decode
sizes that is launch- and CUDA-core-bound. Here:
  1. `_mhc_pre_partials`: a (token tile, K split) grid; each program multiplies its K slice on tensor
     cores (bf16 operands: x as stored, hc_fn rounded to bf16 in registers; fp32 accumulation) and
     sums x^2 in fp32 over the same slice.
  2. `_mhc_pre_finish`: per token, adds the splits in a fixed order (deterministic), then scales by
     rsqrt(sum_sq / K + eps).
Numerics: x is exact in bf16, products of bf16 values are exact in fp32, so the only rounding that the
fp32 path lacks is hc_fn's (2^-9 relative). The RMS statistic stays fp32 end to end: a bf16 sum of
16384 squares would round the factor that scales every mix.
Exposed as the custom op `sglang_sm120::mhc_pre_mixes`, so torch.compile (which wraps the caller
during CUDA-graph capture) treats it as one opaque node; launches depend on shapes only (capturable).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_K = 128
BLOCK_N = 32          # 24 mixes padded to the MMA's N granularity

_sm_counts: dict[int, int] = {}


@triton.jit
def _mhc_pre_partials(
    x_ptr, w_ptr, part_ptr, sq_ptr,
    T, K, N, stride_x, stride_w, k_per_split,
    BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    tile = tl.program_id(0)
    split = tl.program_id(1)
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


@triton.jit
def _mhc_pre_finish(
    part_ptr, sq_ptr, out_ptr, T, N, num_splits, inv_k, eps,
    SPLITS_POW2: tl.constexpr, BLOCK_N: tl.constexpr,
):
    t = tl.program_id(0)
    offs_s = tl.arange(0, SPLITS_POW2)
    offs_n = tl.arange(0, BLOCK_N)
    valid = offs_s < num_splits
    part = tl.load(part_ptr + (offs_s[:, None] * T + t) * BLOCK_N + offs_n[None, :], mask=valid[:, None], other=0.0)
    sq = tl.load(sq_ptr + offs_s * T + t, mask=valid, other=0.0)
    rsqrt = 1.0 / tl.sqrt_rn(tl.sum(sq, axis=0) * inv_k + eps)
    tl.store(out_ptr + t * N + offs_n, tl.sum(part, axis=0) * rsqrt, mask=offs_n < N)


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1   # TRITON_INTERPRET=1 on CPU
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_counts:
        _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_counts[index]


def mhc_pre_mixes_triton(x_flat: torch.Tensor, hc_fn: torch.Tensor, eps: float) -> torch.Tensor:
    """x_flat [T, K] bf16, hc_fn [N, K] (fp32 or bf16) -> mixes [T, 1, N] fp32."""
    assert x_flat.dim() == 2 and hc_fn.dim() == 2 and hc_fn.shape[1] == x_flat.shape[1]
    assert x_flat.dtype == torch.bfloat16 and hc_fn.shape[0] <= BLOCK_N
    x_flat = x_flat.contiguous()
    hc_fn = hc_fn.contiguous()
    (T, K), N = x_flat.shape, hc_fn.shape[0]
    mixes = torch.empty((T, 1, N), dtype=torch.float32, device=x_flat.device)
    if T == 0:
        return mixes
    block_t = max(16, min(64, triton.next_power_of_2(T)))
    tiles = triton.cdiv(T, block_t)
    k_blocks = triton.cdiv(K, BLOCK_K)
    # Enough programs for about two per SM; each split takes a whole number of BLOCK_K slices.
    splits = max(1, min(k_blocks, triton.cdiv(2 * _num_sms(x_flat.device), tiles)))
    k_per_split = triton.cdiv(k_blocks, splits) * BLOCK_K
    splits = triton.cdiv(K, k_per_split)

    partials = torch.empty((splits, T, BLOCK_N), dtype=torch.float32, device=x_flat.device)
    sums_sq = torch.empty((splits, T), dtype=torch.float32, device=x_flat.device)
    _mhc_pre_partials[(tiles, splits)](
        x_flat, hc_fn, partials, sums_sq, T, K, N, x_flat.stride(0), hc_fn.stride(0), k_per_split,
        BLOCK_T=block_t, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4,
    )
    _mhc_pre_finish[(T,)](
        partials, sums_sq, mixes, T, N, splits, 1.0 / K, eps,
        SPLITS_POW2=triton.next_power_of_2(splits), BLOCK_N=BLOCK_N, num_warps=4,
    )
    return mixes


def _register_op():
    name = "sglang_sm120::mhc_pre_mixes"
    try:
        return torch.library.custom_op(name, mutates_args=())(_op_impl)
    except RuntimeError:        # already registered (module loaded twice): reuse it
        return getattr(torch.ops.sglang_sm120, "mhc_pre_mixes")


def _op_impl(x_flat: torch.Tensor, hc_fn: torch.Tensor, eps: float) -> torch.Tensor:
    return mhc_pre_mixes_triton(x_flat, hc_fn, eps)


mhc_pre_mixes = _register_op()
if hasattr(mhc_pre_mixes, "register_fake"):
    @mhc_pre_mixes.register_fake
    def _(x_flat, hc_fn, eps):
        return x_flat.new_empty((x_flat.shape[0], 1, hc_fn.shape[0]), dtype=torch.float32)
