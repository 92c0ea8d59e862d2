"""DeepSeek-V4 C4 indexer logits on sm_120, with work bounded by each row's real length.

Drop-in for `fp8_paged_mqa_logits_torch_sm120` (indexer.py). Under CUDA graphs the caller passes
`max_seq_len = page_table width * 64`, i.e. the whole context (262144 c4 positions at a 1M-token
context); the torch fallback scores all of them every decode step. This kernel reads `seq_lens`
on the device and scores only the pages below each row's length, so the output keeps its static
shape `[B, max_seq_len]` (capturable: no host sync, no data-dependent shapes) while the work and the
memory traffic follow the batch's real lengths.

Output contract: `logits[b, t]` for `t < seq_len[b]` equals the fallback's
`kv_scale[t] * sum_h weight[b, h] * relu(q[b, h] . k[t])`; positions `seq_len[b] <= t` inside the
last scored 64-position page are -inf. The rest of the row is left unwritten: the consumer
(`topk_transform_512`) reads only `logits[b, :seq_len[b]]`. `fill_tail=True` writes -inf there too,
for a consumer that reads past it (indexer.py passes SGLANG_SM120_INDEXER_FILL_TAIL).

Numerics: the MMA takes fp16 operands with fp32 accumulation. FP8 e4m3 -> fp16 is exact (max 448,
smallest subnormal 2^-9) and a product of two e4m3 values fits in fp32, so only summation order
differs from an fp32 reference. fp16 rather than bf16: equally exact here, and Triton 3.6's
interpreter (TRITON_INTERPRET=1, the CPU tests) computes bf16 tl.dot wrongly.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# FP fusion (a * b + c as one FMA) is stated at every launch, not left to Triton's default, which
# Triton 3.9 warns turns off in 3.10: these kernels were tuned and checked against float64 with it
# on (the default up to 3.9), so they keep it on.
ENABLE_FP_FUSION = True

# Cache page layout of DeepSeekV4IndexerPool: per page of 64 c4 positions, 64x128 fp8 values,
# then 64 fp32 scales (8448 bytes, no padding).
PAGE_SIZE = 64
HEAD_DIM = 128
PAGE_BYTES = PAGE_SIZE * (HEAD_DIM + 4)

# name: (num_warps, num_stages, programs per SM, grid rounding). Triton's
# pipeliner stages the loads (cp.async): with num_stages=5 the K tiles of the next pages are in
# flight during a page's MMA; at 3 it waits for each page right before using it. Programs per SM:
# what fits at once on an H200 (104 registers, <= 33 KB shared memory: 4). Rounding "down" keeps
# the grid within one wave (full rows give every program the same work: one program too many costs
# a second wave); "up" is the 2026-11-29 rule.
INDEXER_CONFIGS = {
    "w4-s3-x4": (4, 3, 4, "up"),  # the 2026-11-29 kernel and grid
    "w4-s5-x4": (4, 5, 4, "down"),
}
# Measured on an H200: 16 rows and more gain from 5 stages; a single row
# (each program has only a few pages) does not, so it keeps the 2026-11-29 config. Other GPUs keep
# it at every batch: on sm_120 (100 KB shared memory per SM) the 5-stage build fits 2 programs per
# SM, not 4, and that trade was not measured.
SMALL_BATCH, SMALL_BATCH_CONFIG, DEFAULT_CONFIG = 16, "w4-s3-x4", "w4-s5-x4"


def pick_config(batch_size: int, capability_major: int) -> str:
    if capability_major == 9 and batch_size >= SMALL_BATCH:
        return DEFAULT_CONFIG
    return SMALL_BATCH_CONFIG


@triton.jit
def _paged_mqa_logits_kernel(
    q_ptr,  # [B, H, D] fp8 e4m3
    kv_ptr,  # cache bytes viewed as fp8 e4m3, PAGE_BYTES per page
    scale_ptr,  # the same bytes viewed as fp32, PAGE_BYTES // 4 per page
    w_ptr,  # [B, H] fp32
    seq_lens_ptr,  # [B] int32
    page_table_ptr,  # [B, >= cdiv(max_seq_len, PAGE)] int32
    out_ptr,  # [B, max_seq_len] fp32
    stride_qb,
    stride_qh,
    stride_wb,
    stride_pt,
    stride_out,
    max_seq_len,
    num_splits,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    FILL_TAIL: tl.constexpr,
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    seq_len = tl.minimum(tl.load(seq_lens_ptr + row), max_seq_len)
    n_pages = tl.cdiv(seq_len, PAGE)

    offs_h = tl.arange(0, H)
    offs_d = tl.arange(0, D)
    offs_t = tl.arange(0, PAGE)
    q = tl.load(q_ptr + row * stride_qb + offs_h[:, None] * stride_qh + offs_d[None, :])
    q_t = tl.trans(q.to(tl.float16))  # [D, H]
    w = tl.load(w_ptr + row * stride_wb + offs_h)  # [H]
    out_row = out_ptr + row.to(tl.int64) * stride_out

    # Pages split round-robin over `num_splits` programs; the loop bound is this row's length.
    # Triton's pipeliner stages the page-index and K loads (cp.async, num_stages deep).
    for p in tl.range(split, n_pages, num_splits):
        page = tl.load(page_table_ptr + row * stride_pt + p).to(tl.int64)
        k = tl.load(
            kv_ptr + page * (PAGE * (D + 4)) + offs_t[:, None] * D + offs_d[None, :]
        )
        scale = tl.load(
            scale_ptr + page * (PAGE * (D + 4) // 4) + (PAGE * D // 4) + offs_t
        )
        s = tl.dot(k.to(tl.float16), q_t)  # [PAGE, H] fp32
        logit = tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1) * scale
        pos = p * PAGE + offs_t
        logit = tl.where(pos < seq_len, logit, float("-inf"))
        tl.store(out_row + pos, logit, mask=pos < max_seq_len)

    if FILL_TAIL:
        for p in tl.range(n_pages + split, tl.cdiv(max_seq_len, PAGE), num_splits):
            pos = p * PAGE + offs_t
            tl.store(
                out_row + pos,
                tl.full([PAGE], float("-inf"), tl.float32),
                mask=pos < max_seq_len,
            )


_device_infos: dict[int, tuple[int, int]] = {}


def _device_info(device: torch.device) -> tuple[int, int]:
    """(SM count, compute capability major); on the CPU (TRITON_INTERPRET=1) one SM, so a few
    splits still exercise the round-robin loop."""
    if device.type != "cuda":
        return 1, 0
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _device_infos:
        props = torch.cuda.get_device_properties(index)
        _device_infos[index] = (props.multi_processor_count, props.major)
    return _device_infos[index]


def num_splits(
    batch_size: int,
    max_pages: int,
    programs_per_sm: int,
    sms: int,
    rounding: str = "down",
) -> int:
    """Programs per row: a host-side function of the static shapes only (graph-safe)."""
    total = programs_per_sm * sms
    per_row = (
        total // batch_size if rounding == "down" else triton.cdiv(total, batch_size)
    )
    return max(1, min(max_pages, per_row))


def fp8_paged_mqa_logits_triton(
    q_fp8: torch.Tensor,
    kvcache_fp8: torch.Tensor,
    weight: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    fill_tail: bool = False,
    config: str | None = None,
) -> torch.Tensor:
    """Shapes as `fp8_paged_mqa_logits_torch_sm120`; returns fp32 `[B, max_seq_len]`."""
    batch_size, _, num_heads, head_dim = q_fp8.shape
    assert head_dim == HEAD_DIM and kvcache_fp8.shape[1:] == (
        PAGE_SIZE,
        1,
        HEAD_DIM + 4,
    )
    assert triton.next_power_of_2(num_heads) == num_heads and num_heads >= 16
    if seq_lens.dim() > 1:
        seq_lens = seq_lens.squeeze(-1)
    assert seq_lens.shape == (batch_size,) and page_table.shape[0] == batch_size
    assert page_table.stride(1) == 1 and q_fp8.stride(-1) == 1

    # Flat byte views of the (contiguous) cache buffer; one as fp8 values, one as fp32 scales.
    cache = kvcache_fp8.view(torch.uint8).reshape(-1, PAGE_BYTES)
    kv_fp8 = cache.view(torch.float8_e4m3fn)
    kv_scale = cache.view(torch.float32)
    q = q_fp8[:, 0]
    weight = weight.float().contiguous()
    seq_lens = seq_lens.to(torch.int32)

    sms, major = _device_info(q_fp8.device)
    warps, stages, per_sm, rounding = INDEXER_CONFIGS[
        config or pick_config(batch_size, major)
    ]
    logits = torch.empty(
        (batch_size, max_seq_len), dtype=torch.float32, device=q_fp8.device
    )
    max_pages = triton.cdiv(max_seq_len, PAGE_SIZE)
    splits = num_splits(batch_size, max_pages, per_sm, sms, rounding)
    _paged_mqa_logits_kernel[(batch_size, splits)](
        q,
        kv_fp8,
        kv_scale,
        weight,
        seq_lens,
        page_table,
        logits,
        q.stride(0),
        q.stride(1),
        weight.stride(0),
        page_table.stride(0),
        logits.stride(0),
        max_seq_len,
        splits,
        H=num_heads,
        D=HEAD_DIM,
        PAGE=PAGE_SIZE,
        FILL_TAIL=fill_tail,
        num_warps=warps,
        enable_fp_fusion=ENABLE_FP_FUSION,
        num_stages=stages,
    )
    return logits
