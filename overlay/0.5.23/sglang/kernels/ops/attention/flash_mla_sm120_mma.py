"""Sparse MLA decode for DeepSeek-V4 on sm_120, with heads as the MMA M dimension.

Drop-in for `flash_mla_sparse_decode_triton` (flash_mla_sm120_triton.py): same arguments,
same `(out [B,1,H,512] bf16, lse [B,H,1] f32)` result. That kernel runs one program
per (row, head), so each KV token is gathered and dequantised once per head and scored with
CUDA-core FMAs; the two caches then take two launches plus ~20 torch ops to merge and sink.

Here one program owns (head group, split, row):
  * each KV tile is gathered and dequantised once and shared by the BLOCK_H heads of the
    program through `tl.dot` (scores = q[BLOCK_H,512] . k^T, out += p . k: MLA has K = V);
  * the main (sliding-window) and extra (compressed) caches are one concatenated token list,
    bounded per row by `topk_length` / `extra_topk_length`;
  * rows are split along that list when rows x head groups would leave SMs idle, and a
    second kernel merges the splits by log-sum-exp; the attention sink and the bf16 cast
    are fused into whichever kernel finishes the row.
Configs come from a fixed table (no autotuning), so a first call inside a CUDA-graph
capture works. The public function calls the op `torch.ops.sglang.sm120_mma_sparse_decode`
(registered with `register_custom_op`, a fake implementation for its shapes), so that
`torch.compile(fullgraph=True)` sees one opaque node.

Main loop, per tile: page / offset by shift and mask when every page size is a power of two
(chosen on the host); each token's UE8M0 bytes load as two int32 words in the fp8 tile's
layout; row sums are reduced once after the loop; the running max and the accumulators move
only when a row max grows by more than 2^8; even / odd column groups accumulate into two
score tiles (two short chains of dependent MMAs instead of one long one).

KV layout (DeepSeekV4SingleKVPool, 584 bytes per token, page of P tokens, page stride
ceil(P*584/576)*576 bytes): token t's 448 fp8-e4m3 "nope" values at t*576, its 64 bf16
rope values at t*576+448, its 7 UE8M0 scale bytes (2^(e-127) per 64 values) at
P*576 + t*8. Index = page*P + offset; -1 is invalid.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from sglang.srt.utils.custom_op import register_custom_op

# FP fusion (a * b + c as one FMA) is stated at every launch, not left to Triton's default, which
# Triton 3.9 warns turns off in 3.10: these kernels were tuned and checked against float64 with it
# on (the default up to 3.9), so they keep it on.
ENABLE_FP_FUSION = True

# Sizes of the KV layout above and of a head. tl.constexpr so the kernels can read them (Triton
# kernels see only constexpr globals); host code reads `.value`.
# fp8 "nope" values of a token (7 groups of 64, one byte each); rope follows
_NOPE_DIM = tl.constexpr(448)
# a token's 448 nope bytes + its 64 bf16 rope values
_TOKEN_DATA_BYTES = tl.constexpr(576)
# its 7 UE8M0 scale bytes + 1 pad, in the page footer
_TOKEN_SCALE_BYTES = tl.constexpr(8)
# data + scale bytes: the last dim of a [pages, P, 1, 584] cache view
_TOKEN_BYTES = tl.constexpr(584)
_D = tl.constexpr(512)  # q / output head dim: 448 nope + 64 rope
# natural log -> log2 domain (the kernels use exp2 / log2)
_LOG2E = tl.constexpr(1.4426950408889634)
_LN2 = tl.constexpr(0.6931471805599453)  # log2 -> natural log (the LSE the caller gets)


@triton.jit
def _pow2(e):
    """2^(e-127) as float32 for an int32 biased exponent e in [1, 254] (exact)."""
    return (e << 23).to(tl.float32, bitcast=True)


@triton.jit
def _exp_byte(sc_lo, sc_hi, G: tl.constexpr):
    """UE8M0 exponent of column group G (1 for invalid tokens) as int32 [T]."""
    if G < 4:
        e = (sc_lo >> (8 * G)) & 0xFF
    else:
        e = (sc_hi >> (8 * (G - 4))) & 0xFF
    return e


@triton.jit
def _dequant(raw, sc_lo, sc_hi, G: tl.constexpr, MMA_DTYPE: tl.constexpr):
    """fp8 [T, 2, 32] of column group G times 2^(e-127), e its UE8M0 byte -> [T, 64]."""
    # Op order matters at ~254 registers: building the scale before converting the fp8 tile
    # made ptxas spill (sm_90, 16-head x 64-token config, split).
    e = _exp_byte(sc_lo, sc_hi, G)
    k = (
        raw.to(tl.float8e4nv, bitcast=True).to(MMA_DTYPE)
        * _pow2(e).to(MMA_DTYPE)[:, None, None]
    )
    return tl.reshape(k, [raw.shape[0], 64])


@triton.jit
def _q_chunk(q_ptrs, q_mask, G: tl.constexpr, MMA_DTYPE: tl.constexpr):
    # Loaded at each use inside the loop: Triton then keeps q in shared memory, where a
    # [BLOCK_H, 512] MMA operand held in registers would cost 128 registers per warp.
    return tl.load(q_ptrs + G * 64, mask=q_mask, other=0.0).to(MMA_DTYPE)


@triton.jit
def _store_chunk(ptrs, acc, factor, mask, G: tl.constexpr):
    o = acc * factor[:, None]
    tl.store(ptrs + G * 64, o.to(ptrs.dtype.element_ty), mask=mask)


@triton.jit
def _load_indices(
    pos,
    row,
    n_main,
    end,
    main_idx,
    main_idx_stride,
    extra_idx,
    extra_idx_stride,
    HAS_EXTRA: tl.constexpr,
):
    """Cache index of each list position: int32, -1 when invalid or past the split's end."""
    in_range = pos < end
    in_main = pos < n_main
    idx = tl.load(
        main_idx + row * main_idx_stride + pos, mask=in_range & in_main, other=-1
    )
    if HAS_EXTRA:
        e_idx = tl.load(
            extra_idx + row * extra_idx_stride + (pos - n_main),
            mask=in_range & (pos >= n_main),
            other=-1,
        )
        idx = tl.where(in_main, idx, e_idx)
    return idx


@triton.jit
def _load_tile(
    idx,
    pos,
    n_main,
    main_u8,
    main_page,
    main_page_bytes,
    main_shift,
    extra_u8,
    extra_page,
    extra_page_bytes,
    extra_shift,
    HAS_EXTRA: tl.constexpr,
    POW2_PAGES: tl.constexpr,
):
    """Issue every load of one tile at once (so their latencies overlap): 7 fp8 column groups
    [T, 2, 32], the bf16 rope [T, 64] and each token's UE8M0 bytes as two int32 words [T].
    """
    valid = idx >= 0
    idx = tl.where(valid, idx, 0)
    base = main_u8
    page_size = main_page
    shift = main_shift
    page_bytes = main_page_bytes.to(tl.int64)
    if HAS_EXTRA:
        in_main = pos < n_main
        base = tl.where(in_main, main_u8, extra_u8)
        page_size = tl.where(in_main, main_page, extra_page)
        shift = tl.where(in_main, main_shift, extra_shift)
        page_bytes = tl.where(in_main, main_page_bytes, extra_page_bytes).to(tl.int64)
    if POW2_PAGES:
        # Every DSv4 pool has a power-of-two page: no 32-bit integer division per token.
        page = (idx >> shift).to(tl.int64)
        off = idx & (page_size - 1)
    else:
        page = (idx // page_size).to(tl.int64)
        off = idx % page_size
    data = base + tl.multiple_of(page * page_bytes + off * _TOKEN_DATA_BYTES, 64)
    # Triton 3.8 loses the pools' 16-byte alignment through the select of two base pointers above and
    # then loads the fp8 tile byte by byte (8x the loads, register spills); 3.6 keeps it. Same code on 3.6.
    data = tl.multiple_of(data, 16)
    scale = base + (
        page * page_bytes + (page_size * _TOKEN_DATA_BYTES + off * _TOKEN_SCALE_BYTES)
    )
    dim = tl.arange(0, 64)
    m = valid[:, None]
    # [T, 2, 32] so that the reshape to [T, 64] after dequantising keeps Triton from moving the
    # MMA-operand layout conversion in front of the dequant (int8 moves byte by byte).
    d3 = (tl.arange(0, 2)[:, None] * 32 + tl.arange(0, 32)[None, :])[None, :, :]
    p3 = data[:, None, None] + d3
    m3 = valid[:, None, None]
    r0 = tl.load(p3, mask=m3, other=0)
    r1 = tl.load(p3 + 64, mask=m3, other=0)
    r2 = tl.load(p3 + 128, mask=m3, other=0)
    r3 = tl.load(p3 + 192, mask=m3, other=0)
    r4 = tl.load(p3 + 256, mask=m3, other=0)
    r5 = tl.load(p3 + 320, mask=m3, other=0)
    r6 = tl.load(p3 + 384, mask=m3, other=0)
    rope = tl.load(
        (data + _NOPE_DIM).to(tl.pointer_type(tl.bfloat16))[:, None] + dim[None, :],
        mask=m,
        other=0.0,
    )
    # Two int32 words in the [T] layout the group multiplies use: a [T, 8] byte tile sliced per
    # group went through shared memory once per group.
    s32 = scale.to(tl.pointer_type(tl.int32))
    sc_lo = tl.load(s32, mask=valid, other=0x01010101)
    sc_hi = tl.load(s32 + 1, mask=valid, other=0x01010101)
    return r0, r1, r2, r3, r4, r5, r6, rope, sc_lo, sc_hi, valid


@triton.jit
def _sink_weight(lse2, sink2):
    """Sink in the softmax denominator (log2 domain): output scale 2^lse2 / (2^lse2 + 2^sink2)
    and the combined LSE. sink2 = +inf gives weight 0, -inf weight 1; rows without tokens
    (lse2 = -inf) are zeroed by the caller."""
    w = 1.0 / (1.0 + tl.math.exp2(sink2 - lse2))
    hi = tl.maximum(lse2, sink2)
    inf_hi = (hi == float("inf")) | (hi == float("-inf"))
    hi_safe = tl.where(inf_hi, 0.0, hi)
    lse_out = tl.where(
        inf_hi,
        hi,
        hi_safe
        + tl.math.log2(tl.math.exp2(lse2 - hi_safe) + tl.math.exp2(sink2 - hi_safe)),
    )
    return w, lse_out


@triton.jit
def _finish_rows(m2, l, sink_ptr, heads, head_ok, HAS_SINK: tl.constexpr):
    """Softmax epilogue shared by the decode and combine kernels. m2: log2-domain reference,
    l: sum of 2^(score - m2) over the row's tokens. Returns the factor for the unnormalised
    output (1 / l, times the sink weight; 0 for rows without a token) and the log2 LSE (sink
    included when HAS_SINK)."""
    has_tok = l > 0.0
    safe_l = tl.where(has_tok, l, 1.0)
    lse2 = tl.where(has_tok, m2 + tl.math.log2(safe_l), float("-inf"))
    factor = tl.where(has_tok, 1.0 / safe_l, 0.0)
    if HAS_SINK:
        sink2 = tl.load(sink_ptr + heads, mask=head_ok, other=float("-inf")) * _LOG2E
        w, lse2 = _sink_weight(lse2, sink2)
        factor = tl.where(has_tok, factor * w, 0.0)  # w is NaN for lse2 = sink2 = -inf
    return factor, lse2


@triton.jit
def _mma_sparse_decode_kernel(
    q_ptr,
    stride_qb,
    stride_qh,
    main_u8,
    main_idx,
    main_idx_stride,
    main_len,
    main_topk,
    main_page,
    main_page_bytes,
    main_shift,  # log2(main_page) when POW2_PAGES
    extra_u8,
    extra_idx,
    extra_idx_stride,
    extra_len,
    extra_topk,
    extra_page,
    extra_page_bytes,
    extra_shift,
    sink_ptr,
    out_ptr,  # [B, H, 512] bf16 (final; used when not SPLIT)
    lse_ptr,  # [B, H] f32 natural log, sink included (final; used when not SPLIT)
    part_out_ptr,  # [B, S, H, 512] f32 normalised partial outputs (SPLIT)
    part_lse_ptr,  # [B, S, H] f32 log2-domain partial LSE (SPLIT)
    H,
    num_splits,
    qk_scale_log2,  # softmax_scale * log2(e)
    HAS_MAIN_LEN: tl.constexpr,
    HAS_EXTRA: tl.constexpr,
    HAS_EXTRA_LEN: tl.constexpr,
    HAS_SINK: tl.constexpr,
    SPLIT: tl.constexpr,
    POW2_PAGES: tl.constexpr,  # every page size a power of two (host decides)
    BLOCK_H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    MMA_DTYPE: tl.constexpr,  # bf16; fp32 (of bf16-rounded values) under the CPU interpreter
):
    hg = tl.program_id(0)  # fastest: programs sharing a KV tile run together (L2 reuse)
    split = tl.program_id(1)
    row = tl.program_id(2).to(tl.int64)

    heads = hg * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < H
    dim = tl.arange(0, 64)
    q_ptrs = q_ptr + row * stride_qb + heads[:, None] * stride_qh + dim[None, :]
    q_mask = head_ok[:, None]

    # Work list = first n_main main-cache entries, then first n_extra extra-cache entries.
    n_main = main_topk
    if HAS_MAIN_LEN:
        n_main = tl.minimum(tl.load(main_len + row), main_topk)
    n_main = tl.maximum(n_main, 0)
    n_extra = 0
    if HAS_EXTRA:
        n_extra = extra_topk
        if HAS_EXTRA_LEN:
            n_extra = tl.minimum(tl.load(extra_len + row), extra_topk)
        n_extra = tl.maximum(n_extra, 0)
    total = n_main + n_extra
    chunk = tl.cdiv(tl.cdiv(total, num_splits), BLOCK_T) * BLOCK_T
    start = split * chunk
    end = tl.minimum(start + chunk, total)

    m_i = tl.full([BLOCK_H], -1.0e30, tl.float32)
    # Row sums kept per element and reduced once after the loop: no cross-warp sum per tile.
    l_part = tl.zeros([BLOCK_H, BLOCK_T], tl.float32)
    # The 512 output columns as 8 accumulators of 64: one per dequant group (7 nope + rope).
    acc0 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc1 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc2 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc3 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc4 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc5 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc6 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc7 = tl.zeros([BLOCK_H, 64], tl.float32)
    # Software pipeline: the tile being computed was loaded one iteration earlier and the
    # indices of the tile after next two iterations earlier, so neither the index nor the
    # KV latency is exposed (one CTA per SM leaves little other work to hide it behind).
    pos = start + tl.arange(0, BLOCK_T)
    idx = _load_indices(
        pos,
        row,
        n_main,
        end,
        main_idx,
        main_idx_stride,
        extra_idx,
        extra_idx_stride,
        HAS_EXTRA,
    )
    r0, r1, r2, r3, r4, r5, r6, rope, sc_lo, sc_hi, valid = _load_tile(
        idx,
        pos,
        n_main,
        main_u8,
        main_page,
        main_page_bytes,
        main_shift,
        extra_u8,
        extra_page,
        extra_page_bytes,
        extra_shift,
        HAS_EXTRA,
        POW2_PAGES,
    )
    pos += BLOCK_T
    idx = _load_indices(
        pos,
        row,
        n_main,
        end,
        main_idx,
        main_idx_stride,
        extra_idx,
        extra_idx_stride,
        HAS_EXTRA,
    )
    for t0 in range(start, end, BLOCK_T):
        n0, n1, n2, n3, n4, n5, n6, nrope, nsc_lo, nsc_hi, nvalid = _load_tile(
            idx,
            pos,
            n_main,
            main_u8,
            main_page,
            main_page_bytes,
            main_shift,
            extra_u8,
            extra_page,
            extra_page_bytes,
            extra_shift,
            HAS_EXTRA,
            POW2_PAGES,
        )
        pos += BLOCK_T
        idx = _load_indices(
            pos,
            row,
            n_main,
            end,
            main_idx,
            main_idx_stride,
            extra_idx,
            extra_idx_stride,
            HAS_EXTRA,
        )

        # Each KV column group is dequantised once, then shared by all BLOCK_H heads. Even and
        # odd groups go to two score accumulators: at 32 heads each warp owns one 16x8 score
        # tile, so this halves its chain of dependent MMAs.
        k0 = _dequant(r0, sc_lo, sc_hi, 0, MMA_DTYPE)
        s = tl.dot(_q_chunk(q_ptrs, q_mask, 0, MMA_DTYPE), tl.trans(k0))
        k1 = _dequant(r1, sc_lo, sc_hi, 1, MMA_DTYPE)
        s_odd = tl.dot(_q_chunk(q_ptrs, q_mask, 1, MMA_DTYPE), tl.trans(k1))
        k2 = _dequant(r2, sc_lo, sc_hi, 2, MMA_DTYPE)
        s = tl.dot(_q_chunk(q_ptrs, q_mask, 2, MMA_DTYPE), tl.trans(k2), s)
        k3 = _dequant(r3, sc_lo, sc_hi, 3, MMA_DTYPE)
        s_odd = tl.dot(_q_chunk(q_ptrs, q_mask, 3, MMA_DTYPE), tl.trans(k3), s_odd)
        k4 = _dequant(r4, sc_lo, sc_hi, 4, MMA_DTYPE)
        s = tl.dot(_q_chunk(q_ptrs, q_mask, 4, MMA_DTYPE), tl.trans(k4), s)
        k5 = _dequant(r5, sc_lo, sc_hi, 5, MMA_DTYPE)
        s_odd = tl.dot(_q_chunk(q_ptrs, q_mask, 5, MMA_DTYPE), tl.trans(k5), s_odd)
        k6 = _dequant(r6, sc_lo, sc_hi, 6, MMA_DTYPE)
        s = tl.dot(_q_chunk(q_ptrs, q_mask, 6, MMA_DTYPE), tl.trans(k6), s)
        k7 = rope.to(MMA_DTYPE)
        s_odd = tl.dot(_q_chunk(q_ptrs, q_mask, 7, MMA_DTYPE), tl.trans(k7), s_odd)

        s = tl.where(valid[None, :], (s + s_odd) * qk_scale_log2, float("-inf"))
        m_tile = tl.max(s, 1)
        # Lazy rescale: move the running max (and the accumulators, 64 values per thread at 32
        # heads) only when some row's max grew by more than 2^8; otherwise p <= 2^8, which the
        # bf16 P and the fp32 sums and accumulators hold without loss. One CTA-wide max decides.
        if tl.max(m_tile - m_i, 0) > 8.0:
            m_new = tl.maximum(m_i, m_tile)
            a = tl.math.exp2(m_i - m_new)[:, None]
            acc0 = acc0 * a
            acc1 = acc1 * a
            acc2 = acc2 * a
            acc3 = acc3 * a
            acc4 = acc4 * a
            acc5 = acc5 * a
            acc6 = acc6 * a
            acc7 = acc7 * a
            l_part = l_part * a
            m_i = m_new
        p = tl.math.exp2(s - m_i[:, None])
        l_part += p
        p = p.to(tl.bfloat16).to(MMA_DTYPE)
        acc7 = tl.dot(p, k7, acc7)
        acc0 = tl.dot(p, k0, acc0)
        acc1 = tl.dot(p, k1, acc1)
        acc2 = tl.dot(p, k2, acc2)
        acc3 = tl.dot(p, k3, acc3)
        acc4 = tl.dot(p, k4, acc4)
        acc5 = tl.dot(p, k5, acc5)
        acc6 = tl.dot(p, k6, acc6)
        r0, r1, r2, r3, r4, r5, r6, rope, sc_lo, sc_hi, valid = (
            n0,
            n1,
            n2,
            n3,
            n4,
            n5,
            n6,
            nrope,
            nsc_lo,
            nsc_hi,
            nvalid,
        )

    l_i = tl.sum(l_part, 1)
    if SPLIT:
        # Normalised partial output + log2 LSE; the combine kernel merges and adds the sink.
        factor, lse2 = _finish_rows(m_i, l_i, sink_ptr, heads, head_ok, False)
        base = (row * num_splits + split) * H + heads
        tl.store(part_lse_ptr + base, lse2, mask=head_ok)
        o_ptrs = part_out_ptr + base[:, None] * _D + dim[None, :]
    else:
        factor, lse2 = _finish_rows(m_i, l_i, sink_ptr, heads, head_ok, HAS_SINK)
        tl.store(lse_ptr + row * H + heads, lse2 * _LN2, mask=head_ok)
        o_ptrs = out_ptr + (row * H + heads)[:, None] * _D + dim[None, :]
    o_mask = head_ok[:, None]
    _store_chunk(o_ptrs, acc0, factor, o_mask, 0)
    _store_chunk(o_ptrs, acc1, factor, o_mask, 1)
    _store_chunk(o_ptrs, acc2, factor, o_mask, 2)
    _store_chunk(o_ptrs, acc3, factor, o_mask, 3)
    _store_chunk(o_ptrs, acc4, factor, o_mask, 4)
    _store_chunk(o_ptrs, acc5, factor, o_mask, 5)
    _store_chunk(o_ptrs, acc6, factor, o_mask, 6)
    _store_chunk(o_ptrs, acc7, factor, o_mask, 7)


@triton.jit
def _combine_splits_kernel(
    part_out_ptr,
    part_lse_ptr,
    sink_ptr,
    out_ptr,
    lse_ptr,
    H,
    num_splits,
    HAS_SINK: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SPLITS_AT_ONCE: tl.constexpr,
):
    """Merge the splits of one (row, BLOCK_H heads, BLOCK_D columns) by LSE, add the sink, write
    bf16. SPLITS_AT_ONCE partials load per step, merged with a running max as in the decode
    loop; `combine_launch` picks the shape."""
    row = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < H
    d0 = tl.program_id(2) * BLOCK_D
    cols = d0 + tl.arange(0, BLOCK_D)
    hi = tl.full([BLOCK_H], float("-inf"), tl.float32)
    tok_w = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    for s0 in range(0, num_splits, SPLITS_AT_ONCE):
        sp = s0 + tl.arange(0, SPLITS_AT_ONCE)
        ok = (sp < num_splits)[:, None] & head_ok[None, :]
        base = (row * num_splits + sp)[:, None] * H + heads[None, :]  # [splits, heads]
        # Splits without a token hold lse = -inf and a zero partial, so no load waits on a weight.
        lse_s = tl.load(part_lse_ptr + base, mask=ok, other=float("-inf"))
        o_s = tl.load(
            part_out_ptr + base[:, :, None] * _D + cols[None, None, :],
            mask=ok[:, :, None],
            other=0.0,
        )
        new_hi = tl.maximum(hi, tl.max(lse_s, 0))
        new_safe = tl.where(new_hi == float("-inf"), 0.0, new_hi)
        alpha = tl.math.exp2(hi - new_safe)
        w = tl.math.exp2(lse_s - new_safe[None, :])
        acc = acc * alpha[:, None] + tl.sum(w[:, :, None] * o_s, 0)
        tok_w = tok_w * alpha + tl.sum(w, 0)
        hi = new_hi
    hi_safe = tl.where(hi == float("-inf"), 0.0, hi)
    factor, lse2 = _finish_rows(hi_safe, tok_w, sink_ptr, heads, head_ok, HAS_SINK)
    o = acc * factor[:, None]
    tl.store(
        out_ptr + (row * H + heads)[:, None] * _D + cols[None, :],
        o.to(tl.bfloat16),
        mask=head_ok[:, None],
    )
    if d0 == 0:
        tl.store(lse_ptr + row * H + heads, lse2 * _LN2, mask=head_ok)


# ----------------------------------------------------------------------------- configs
# One entry per config, everything about it in one place: `launch`, the kernel's compile-time shape, and the
# split rule pick_num_splits applies to it: `per_sm` programs resident per SM (sm_120; by shared memory and
# registers) and `min_split`, the smallest slice of a row's token list worth a split of its own. Every entry
# compiles ahead of time for sm_120 and sm_90 (shared memory <= 101376 bytes on sm_120, no register
# spills).
# Triton kernel: launch = (BLOCK_H, BLOCK_T, num_warps, num_stages).
MMA_CONFIGS = {
    # 33 KB shared, ~232 registers: two CTAs per SM on sm_120 and sm_90
    "h16_t16_w4": dict(launch=(16, 16, 4, 1), per_sm=2, min_split=32),
    "h16_t64_w8": dict(launch=(16, 64, 8, 1), per_sm=1, min_split=64),
    "h32_t32_w8": dict(launch=(32, 32, 8, 1), per_sm=1, min_split=64),
    # 50 KB shared, ~210 registers: h16_t64_w8's stand-in under triton 3.8 (TUNED_TRITON_RELEASES)
    "h16_t32_w8": dict(launch=(16, 32, 8, 1), per_sm=1, min_split=64),
    # 33 KB shared, ~165 registers: what a Triton release off TUNED_TRITON_RELEASES takes for every shape
    "h16_t16_w8": dict(launch=(16, 16, 8, 1), per_sm=1, min_split=32),
}
# The split rule of a config given as a launch tuple (tests, benchmarks).
_TUPLE_CONFIG_SPLIT_RULE = dict(per_sm=1, min_split=64)
# Rows x heads up to which the combine loads every split at once (see combine_launch).
_WIDE_COMBINE_MAX_ROW_HEADS = 512


@functools.lru_cache(maxsize=None)
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@dataclass(frozen=True)
class ShapeRule:
    """Where pick_triton_config's choices change, for one SM count (rows = batch)."""

    small_tiles_max_row_heads: int  # 4-warp 16 x 16 tiles up to this many rows x heads
    wide_heads_min_row_heads: int  # > 16 heads take 32-head programs from this many


# The shape thresholds by the SM count of the card they were measured on. 132 (H200): the split grid
# of every split count for the Triton configs. A card with another SM count takes the nearest
# measured row until its own is measured (every config and split count timed on that card) and
# added here. The split rule (pick_num_splits) already scales with SMs.
SHAPE_RULES = {132: ShapeRule(512, 1024)}


def shape_rule(sms: Optional[int] = None) -> ShapeRule:
    """The measured row for this SM count: its own, else the nearest (the smaller on a tie); None: 132."""
    if sms is None:
        return SHAPE_RULES[132]
    return SHAPE_RULES[min(SHAPE_RULES, key=lambda n: (abs(n - sms), n))]


# Triton releases (major.minor) whose ahead-of-time sm_120 / sm_90 builds were checked (3.6, 3.8, 3.9),
# each with the configs it replaces there because they spill there. The shape table was measured under 3.6. Under
# 3.8 h16_t64_w8 keeps an 8-byte spill on sm_90 (sm_120 is clean), so 16 x 32 serves its shapes; under 3.9 every
# config builds without spills, and on an sm_90 GPU the same table under 3.9 picked the same configs
# as under 3.6, no slower and with the same error. On any other
# release every shape takes UNTUNED_RELEASE_CONFIG, the config with the most register headroom (the only one that
# built clean under 3.8 before the alignment hint in _load_tile).
# Decided by version: never by a failed compile or a spill found at run time.
TUNED_TRITON_RELEASES = {"3.6": {}, "3.8": {"h16_t64_w8": "h16_t32_w8"}, "3.9": {}}
UNTUNED_RELEASE_CONFIG = "h16_t16_w8"


def tuned_for(triton_version: str = triton.__version__) -> bool:
    """Whether the shape table's Triton configs are used under this Triton release."""
    return _release(triton_version) in TUNED_TRITON_RELEASES


def _release(triton_version: str) -> str:
    return ".".join(triton_version.split(".")[:2])


def pick_triton_config(
    num_heads: int,
    batch: int,
    triton_version: str = triton.__version__,
    sms: Optional[int] = None,
) -> str:
    """Static choice by shape, from a grid of every config and split count timed on an H200:
    small 4-warp 16 x 16 tiles split finely while rows x heads are few
    (latency: many short programs, two per SM), 32-head programs (each KV tile dequantised for
    twice the heads) once rows x heads fill the GPU, 16 x 64 in between and for <= 16 heads; with the
    release's substitutes (TUNED_TRITON_RELEASES), or UNTUNED_RELEASE_CONFIG off them.
    """
    if not tuned_for(triton_version):
        return UNTUNED_RELEASE_CONFIG
    rule = shape_rule(sms)
    if batch * num_heads <= rule.small_tiles_max_row_heads:
        name = "h16_t16_w4"
    elif num_heads > 16 and batch * num_heads >= rule.wide_heads_min_row_heads:
        name = "h32_t32_w8"
    else:
        name = "h16_t64_w8"
    return TUNED_TRITON_RELEASES[_release(triton_version)].get(name, name)


def pick_num_splits(
    batch: int, head_groups: int, list_width: int, sms: int, config=None
) -> int:
    """Split each row's token list until rows x head groups x splits fills the resident CTA slots
    once (a second wave of splits cost more in partial-output traffic than it gained), keeping
    at least the config's smallest slice per split."""
    # A named config must exist (KeyError otherwise); launch tuples get the default rule.
    rule = MMA_CONFIGS[config] if isinstance(config, str) else _TUPLE_CONFIG_SPLIT_RULE
    return split_count(rule, batch, head_groups, list_width, sms)


def split_count(
    rule: dict, batch: int, head_groups: int, list_width: int, sms: int
) -> int:
    """pick_num_splits for a split rule ({per_sm, min_split}, a config table's entry)."""
    want = max(1, rule["per_sm"] * sms // (batch * head_groups))
    most = max(1, list_width // rule["min_split"])
    return min(want, most)


def combine_launch(batch: int, num_heads: int, num_splits: int):
    """(grid, BLOCK_H, BLOCK_D, SPLITS_AT_ONCE, warps) of the split combine, from the H200
    (each combine shape timed): with few rows, programs of one head x 128
    columns that load every split at once (latency: 9.5 against 23.6 us for the whole call at
    batch 1, 64 heads, 20 splits); with many rows, 16 heads x 512 columns stepping one split at a
    time (31.0 us at batch 16 against 38.7 for 16 x 128 programs loading 4 splits at once, whose
    cross-split reduction goes through shared memory, and 39.4 for the one-head programs).
    """
    if batch * num_heads <= _WIDE_COMBINE_MAX_ROW_HEADS:
        bh, bd, at_once = 1, 128, max(2, triton.next_power_of_2(num_splits))
    else:
        bh, bd, at_once = 16, 512, 1
    return (batch, triton.cdiv(num_heads, bh), _D.value // bd), bh, bd, at_once, 4


def _interpreted() -> bool:
    # Triton 3.6's CPU interpreter does bf16 arithmetic (dot, mul) on the raw uint16 bits.
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_mma_sparse_decode_kernel, InterpretedFunction)


def _page_shift(page_size: int) -> Optional[int]:
    """log2 of a power-of-two page size, else None."""
    return (
        page_size.bit_length() - 1
        if page_size > 0 and page_size & (page_size - 1) == 0
        else None
    )


def _flat_u8(cache: torch.Tensor) -> torch.Tensor:
    """The whole paged buffer behind a [pages, P, 1, 584] view, as flat bytes."""
    page_bytes = cache.stride(0)
    flat = cache.as_strided((cache.shape[0] * page_bytes,), (1,))
    return flat.view(torch.uint8)


def _int32_rows(indices: torch.Tensor, batch: int) -> torch.Tensor:
    flat = indices.reshape(batch, -1)
    if flat.dtype != torch.int32:
        flat = flat.to(torch.int32)
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    return flat


def mma_sparse_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    topk_length: Optional[torch.Tensor],
    attn_sink: Optional[torch.Tensor],
    softmax_scale: float,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    config=None,
    num_splits: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Launch the kernels; returns (out [B,1,H,512] bf16, lse [B,H,1] f32).

    `config` (a MMA_CONFIGS name or a launch tuple) and
    `num_splits` override the shape table (benchmarks and tests use them).
    """
    sms = _num_sms(q.device.index) if q.is_cuda else None
    if config is None:
        config = pick_triton_config(q.shape[2], q.shape[0], sms=sms)
    block_h, block_t, warps, stages = (
        MMA_CONFIGS[config]["launch"] if isinstance(config, str) else config
    )
    rule = MMA_CONFIGS[config] if isinstance(config, str) else _TUPLE_CONFIG_SPLIT_RULE

    def launch(grid, args, flags):
        _mma_sparse_decode_kernel[grid](
            *args,
            **flags,
            BLOCK_H=block_h,
            BLOCK_T=block_t,
            MMA_DTYPE=tl.float32 if _interpreted() else tl.bfloat16,
            num_warps=warps,
            enable_fp_fusion=ENABLE_FP_FUSION,
            num_stages=stages,
        )

    return launch_sparse_decode(
        launch,
        block_h,
        rule,
        q,
        k_cache,
        indices,
        topk_length,
        attn_sink,
        softmax_scale,
        extra_k_cache,
        extra_indices,
        extra_topk_length,
        num_splits,
    )


def launch_sparse_decode(
    launch,
    block_h: int,
    split_rule: dict,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    topk_length: Optional[torch.Tensor],
    attn_sink: Optional[torch.Tensor],
    softmax_scale: float,
    extra_k_cache: Optional[torch.Tensor],
    extra_indices: Optional[torch.Tensor],
    extra_topk_length: Optional[torch.Tensor],
    num_splits: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The host side of a decode kernel with _mma_sparse_decode_kernel's arguments: the caches as
    flat bytes, the int32 index rows, the outputs; `launch(grid, args, flags)` runs the kernel over
    (head groups of block_h, splits, rows), then the combine merges the splits (num_splits, else
    split_count by `split_rule`). Returns (out [B,1,H,512] bf16, lse [B,H,1] f32)."""
    B, s_q, H, D = q.shape
    wanted = f"expected q [B, 1, H, {_D.value}], got {tuple(q.shape)}"
    assert s_q == 1 and D == _D.value, wanted
    assert k_cache.element_size() == 1 and k_cache.shape[-1] == _TOKEN_BYTES.value
    has_extra = extra_k_cache is not None and extra_indices is not None
    q3 = q.reshape(B, H, D)
    if q3.stride(-1) != 1:
        q3 = q3.contiguous()

    main_idx = _int32_rows(indices, B)
    main_u8 = _flat_u8(k_cache)
    main_page = k_cache.shape[1]
    if has_extra:
        assert (
            extra_k_cache.element_size() == 1
            and extra_k_cache.shape[-1] == _TOKEN_BYTES.value
        )
        extra_idx = _int32_rows(extra_indices, B)
        extra_u8 = _flat_u8(extra_k_cache)
        extra_page, extra_page_bytes = extra_k_cache.shape[1], extra_k_cache.stride(0)
    else:
        extra_idx, extra_u8 = main_idx, main_u8
        extra_page, extra_page_bytes = 1, 0
    width = main_idx.shape[1] + (extra_idx.shape[1] if has_extra else 0)
    main_shift, extra_shift = _page_shift(main_page), _page_shift(extra_page)

    head_groups = triton.cdiv(H, block_h)
    if num_splits is None:
        sms = _num_sms(q.device.index) if q.is_cuda else 8
        num_splits = split_count(split_rule, B, head_groups, width, sms)
    split = num_splits > 1

    out = torch.empty(B, H, D, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(B, H, dtype=torch.float32, device=q.device)
    if split:
        part_out = torch.empty(
            B, num_splits, H, D, dtype=torch.float32, device=q.device
        )
        part_lse = torch.empty(B, num_splits, H, dtype=torch.float32, device=q.device)
    else:
        part_out, part_lse = out, lse  # unused
    dummy_len = main_idx
    sink = attn_sink if attn_sink is not None else lse
    if attn_sink is not None and attn_sink.dtype != torch.float32:
        sink = attn_sink.float()

    args = (
        q3,
        q3.stride(0),
        q3.stride(1),
        main_u8,
        main_idx,
        main_idx.stride(0),
        topk_length if topk_length is not None else dummy_len,
        main_idx.shape[1],
        main_page,
        k_cache.stride(0),
        main_shift or 0,
        extra_u8,
        extra_idx,
        extra_idx.stride(0),
        (
            extra_topk_length
            if (has_extra and extra_topk_length is not None)
            else dummy_len
        ),
        extra_idx.shape[1] if has_extra else 0,
        extra_page,
        extra_page_bytes,
        extra_shift or 0,
        sink,
        out,
        lse,
        part_out,
        part_lse,
        H,
        num_splits,
        softmax_scale * _LOG2E.value,
    )
    flags = dict(
        HAS_MAIN_LEN=topk_length is not None,
        HAS_EXTRA=has_extra,
        HAS_EXTRA_LEN=has_extra and extra_topk_length is not None,
        HAS_SINK=attn_sink is not None,
        SPLIT=split,
        POW2_PAGES=main_shift is not None and extra_shift is not None,
    )
    launch((head_groups, num_splits, B), args, flags)
    if split:
        grid, cbh, cbd, at_once, cwarps = combine_launch(B, H, num_splits)
        _combine_splits_kernel[grid](
            part_out,
            part_lse,
            sink,
            out,
            lse,
            H,
            num_splits,
            HAS_SINK=attn_sink is not None,
            BLOCK_H=cbh,
            BLOCK_D=cbd,
            SPLITS_AT_ONCE=at_once,
            num_warps=cwarps,
            enable_fp_fusion=ENABLE_FP_FUSION,
        )
    return out.unsqueeze(1), lse.unsqueeze(-1)


# ----------------------------------------------------------------------------- custom op
def _mma_sparse_decode_fake(
    q,
    k_cache,
    indices,
    topk_length,
    attn_sink,
    softmax_scale,
    extra_k_cache,
    extra_indices,
    extra_topk_length,
):
    B, _, H, D = q.shape
    return (
        q.new_empty(B, 1, H, D, dtype=torch.bfloat16),
        q.new_empty(B, H, 1, dtype=torch.float32),
    )


@register_custom_op(
    op_name="sm120_mma_sparse_decode",
    mutates_args=[],
    fake_impl=_mma_sparse_decode_fake,
)
def _mma_sparse_decode_op(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    topk_length: Optional[torch.Tensor],
    attn_sink: Optional[torch.Tensor],
    softmax_scale: float,
    extra_k_cache: Optional[torch.Tensor],
    extra_indices: Optional[torch.Tensor],
    extra_topk_length: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor]:
    return mma_sparse_decode(
        q,
        k_cache,
        indices,
        topk_length,
        attn_sink,
        softmax_scale,
        extra_k_cache,
        extra_indices,
        extra_topk_length,
    )


def flash_mla_sparse_decode_mma(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    topk_length: Optional[torch.Tensor],
    attn_sink: Optional[torch.Tensor],
    head_dim_v: int,
    softmax_scale: Optional[float],
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Same contract as `flash_mla_sparse_decode_triton`: (out [B,1,H,512] bf16, lse [B,H,1]).

    lse is the natural-log LSE over the valid tokens of both caches and the sink.
    """
    assert head_dim_v == _D.value, f"head_dim_v must be {_D.value}"
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** (-0.5)
    if extra_k_cache is None or extra_indices is None:
        extra_k_cache = extra_indices = extra_topk_length = None
    return _mma_sparse_decode_op(
        q,
        k_cache,
        indices,
        topk_length,
        attn_sink,
        float(softmax_scale),
        extra_k_cache,
        extra_indices,
        extra_topk_length,
    )
