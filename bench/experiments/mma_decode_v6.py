"""v6 probe: v5 (measured 2026-11-29) plus knobs for one H200 probe run: QK_CHAINS (4 score
accumulators), maxnreg (occupancy), skip_combine (time the split decode alone).

The v5 notes below still describe the loop.

Same contract and entry points as the shipped kernel
(overlay/sglang/srt/layers/attention/flash_mla_sm120_mma.py, "v4"): `mma_sparse_decode(...)`
and `flash_mla_sparse_decode_mma(...)`. Changes inside the main loop, each cutting SASS
instructions or barriers per tile (docs/mma_decode_notes.md, "v5 candidate"):

* POW2_PAGES: page / offset of a cache index by shift and mask (every DSv4 pool has a
  power-of-two page size) instead of a 32-bit integer division per token.
* The UE8M0 bytes of a token load as two int32 words in the layout of the fp8 tile they scale
  (v4's [T, 8] byte tile went through shared memory once per column group).
* Row sums of p accumulate per element and are reduced once after the loop.
* LAZY_RESCALE: the running max and the accumulators move only when a row max grows by more
  than 2^8 (one CTA-wide max per tile decides; p <= 2^8 otherwise).
* Two score accumulators (even / odd groups): half as long a chain of dependent MMAs.
* F16_REL (32-head config): fp16 MMA operands. Each fp8 group is `cvt e4m3x2 -> f16x2` times one
  packed fp16 multiply by 2^(e[t,g] - e_run), e_run the largest UE8M0 exponent the program has
  seen (K <= 448; exact while a token's scale is within 2^15 of it). v4 converted every value
  f16 -> bf16 (F2F, a slow conversion-pipe op) before a bf16 multiply. 2^(e_run-127) multiplies the
  [BLOCK_H, T] scores and stays on the accumulators, which move with the softmax rescale. q is
  scaled per head by a power of two putting its largest value in [2^7, 2^8) (exact, fp16-safe;
  the inverse goes into the score scale); P is fp16; the bf16 rope columns become fp16.

Shared pieces (index loads, sink, split combine, split rule, launch helpers) are imported from
the shipped module by file path, not copied.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

# V6_BASE: load the helpers from another copy of the shipped module (a probe run against a fixed base).
_SHIPPED_PATH = Path(os.environ.get("V6_BASE") or Path(__file__).resolve().parents[2] / "overlay/sglang/srt/layers/attention/flash_mla_sm120_mma.py")


def _load_shipped():
    name = "flash_mla_sm120_mma_for_v6"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _SHIPPED_PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


v4 = _load_shipped()
_load_indices = v4._load_indices
_sink_weight = v4._sink_weight
_combine_splits_kernel = v4._combine_splits_kernel
_D = v4._D
_LOG2E = v4._LOG2E


@triton.jit
def _pow2(e):
    """2^(e-127) as float32 for an int32 biased exponent e in [1, 254] (exact)."""
    return (e << 23).to(tl.float32, bitcast=True)


@triton.jit
def _k_rel(raw, e, e_new, MMA16: tl.constexpr):
    """fp8 [T, 2, 32] times w = 2^(e - e_new) <= 1 -> [T, 64] fp16 (cvt e4m3x2 -> f16x2, then one
    packed fp16 multiply per two values). e: the group's [T] exponents, in the tile's layout."""
    w = _pow2(tl.minimum(tl.maximum(e - e_new + 127, 1), 127)).to(tl.float16).to(MMA16)
    k = raw.to(tl.float8e4nv, bitcast=True).to(tl.float16).to(MMA16) * w[:, None, None]
    return tl.reshape(k, [raw.shape[0], 64])


@triton.jit
def _k_scaled(raw, e, MMA_DTYPE: tl.constexpr):
    """v4's dequant (F16_REL=False): fp8 [T, 2, 32] times 2^(e-127) -> [T, 64] bf16."""
    k = raw.to(tl.float8e4nv, bitcast=True).to(MMA_DTYPE) * _pow2(e).to(MMA_DTYPE)[:, None, None]
    return tl.reshape(k, [raw.shape[0], 64])


@triton.jit
def _q16(q_ptrs, q_mask, qscale, G: tl.constexpr, MMA16: tl.constexpr):
    # Power-of-two prescale: exact, keeps the fp16 operand in range. Loop-invariant, so Triton
    # hoists it with the load and keeps the result in shared memory as in v4.
    q = tl.load(q_ptrs + G * 64, mask=q_mask, other=0.0).to(tl.float32) * qscale[:, None]
    return q.to(tl.float16).to(MMA16)


@triton.jit
def _q_chunk(q_ptrs, q_mask, G: tl.constexpr, MMA_DTYPE: tl.constexpr):
    return tl.load(q_ptrs + G * 64, mask=q_mask, other=0.0).to(MMA_DTYPE)


@triton.jit
def _load_tile(
    idx, pos, n_main,
    main_u8, main_page, main_page_bytes, main_shift, extra_u8, extra_page, extra_page_bytes, extra_shift,
    HAS_EXTRA: tl.constexpr, POW2_PAGES: tl.constexpr,
):
    """v4's tile load (7 fp8 groups [T, 2, 32], bf16 rope [T, 64]) with the UE8M0 exponent bytes
    as two [T] int32 words (bytes 0x01 for invalid tokens), and shift/mask page addressing when
    every page size is a power of two."""
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
        page = (idx >> shift).to(tl.int64)
        off = idx & (page_size - 1)
    else:
        page = (idx // page_size).to(tl.int64)
        off = idx % page_size
    data = base + tl.multiple_of(page * page_bytes + off * 576, 64)
    scale = base + (page * page_bytes + (page_size * 576 + off * 8))
    dim = tl.arange(0, 64)
    m = valid[:, None]
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
    rope = tl.load((data + 448).to(tl.pointer_type(tl.bfloat16))[:, None] + dim[None, :], mask=m, other=0.0)
    # The 7 UE8M0 bytes of each token as two int32 words, in the [T] layout the group multiplies
    # use (v4's [T, 8] byte tile was sliced and moved through shared memory once per group).
    s32 = scale.to(tl.pointer_type(tl.int32))
    sc_lo = tl.load(s32, mask=valid, other=0x01010101)
    sc_hi = tl.load(s32 + 1, mask=valid, other=0x01010101)
    return r0, r1, r2, r3, r4, r5, r6, rope, sc_lo, sc_hi, valid


@triton.jit
def _exp_byte(sc_lo, sc_hi, G: tl.constexpr):
    """UE8M0 exponent of column group G (1 for invalid tokens) as int32 [T]."""
    if G < 4:
        e = (sc_lo >> (8 * G)) & 0xFF
    else:
        e = (sc_hi >> (8 * (G - 4))) & 0xFF
    return e



@triton.jit
def _store_chunk(ptrs, acc, factor, mask, G: tl.constexpr):
    o = acc * factor[:, None]
    tl.store(ptrs + G * 64, o.to(ptrs.dtype.element_ty), mask=mask)


@triton.jit
def _mma_sparse_decode_v6_kernel(
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
    main_shift,
    extra_u8,
    extra_idx,
    extra_idx_stride,
    extra_len,
    extra_topk,
    extra_page,
    extra_page_bytes,
    extra_shift,
    sink_ptr,
    out_ptr,
    lse_ptr,
    part_out_ptr,
    part_lse_ptr,
    H,
    num_splits,
    qk_scale_log2,
    HAS_MAIN_LEN: tl.constexpr,
    HAS_EXTRA: tl.constexpr,
    HAS_EXTRA_LEN: tl.constexpr,
    HAS_SINK: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    F16_REL: tl.constexpr,  # fp16 operands, K scaled relative to the running exponent (else v4's bf16)
    LAZY_RESCALE: tl.constexpr,  # rescale only when a row max grows by > 2^8 (or e_run moves)
    POW2_PAGES: tl.constexpr,
    QK_CHAINS: tl.constexpr,  # 2 or 4 independent score accumulators
    MMA_DTYPE: tl.constexpr,  # bf16 (F16_REL=False); fp32 of bf16-rounded values interpreted
    MMA16: tl.constexpr,  # fp16 (F16_REL=True); fp32 of fp16-rounded values interpreted
):
    hg = tl.program_id(0)
    split = tl.program_id(1)
    row = tl.program_id(2).to(tl.int64)

    heads = hg * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < H
    dim = tl.arange(0, 64)
    q_ptrs = q_ptr + row * stride_qb + heads[:, None] * stride_qh + dim[None, :]
    q_mask = head_ok[:, None]

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

    # Per-head power of two putting the largest |q| in [2^7, 2^8): exact, and inside fp16's range.
    qscale = tl.full([BLOCK_H], 1.0, tl.float32)
    score_scale = tl.full([BLOCK_H], 1.0, tl.float32) * qk_scale_log2
    if F16_REL:
        amax = tl.zeros([BLOCK_H], tl.float32)
        for g in tl.static_range(8):
            qg = tl.load(q_ptrs + g * 64, mask=q_mask, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(qg), 1))
        q_exp = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF  # biased exponent of amax
        q_exp = tl.minimum(tl.maximum(q_exp, 8), 253)
        qscale = _pow2(261 - q_exp)  # 2^(7 - (q_exp - 127))
        score_scale = qk_scale_log2 * _pow2(q_exp - 7)

    m_i = tl.full([BLOCK_H], -1.0e30, tl.float32)
    # Row sums kept per element and reduced once after the loop: no cross-warp sum per tile.
    l_part = tl.zeros([BLOCK_H, BLOCK_T], tl.float32)
    # F16_REL: the nope accumulators are in units of 2^(e_run-127), e_run = the largest UE8M0
    # exponent seen so far by this program.
    e_run = tl.full([], 1, tl.int32)
    acc0 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc1 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc2 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc3 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc4 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc5 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc6 = tl.zeros([BLOCK_H, 64], tl.float32)
    acc7 = tl.zeros([BLOCK_H, 64], tl.float32)
    pos = start + tl.arange(0, BLOCK_T)
    idx = _load_indices(pos, row, n_main, end, main_idx, main_idx_stride, extra_idx, extra_idx_stride, HAS_EXTRA)
    r0, r1, r2, r3, r4, r5, r6, rope, sc_lo, sc_hi, valid = _load_tile(
        idx, pos, n_main, main_u8, main_page, main_page_bytes, main_shift,
        extra_u8, extra_page, extra_page_bytes, extra_shift, HAS_EXTRA, POW2_PAGES)
    pos += BLOCK_T
    idx = _load_indices(pos, row, n_main, end, main_idx, main_idx_stride, extra_idx, extra_idx_stride, HAS_EXTRA)
    for t0 in range(start, end, BLOCK_T):
        n0, n1, n2, n3, n4, n5, n6, nrope, nsc_lo, nsc_hi, nvalid = _load_tile(
            idx, pos, n_main, main_u8, main_page, main_page_bytes, main_shift,
            extra_u8, extra_page, extra_page_bytes, extra_shift, HAS_EXTRA, POW2_PAGES)
        pos += BLOCK_T
        idx = _load_indices(pos, row, n_main, end, main_idx, main_idx_stride, extra_idx, extra_idx_stride, HAS_EXTRA)

        if F16_REL:
            # K = fp8 * 2^(e - e_new) in fp16, e_new = max(e_run, this tile's largest exponent):
            # <= 448, and exact while e_new - e <= 15 (e4m3's smallest step 2^-9 -> fp16's 2^-24).
            e0 = _exp_byte(sc_lo, sc_hi, 0)
            e1 = _exp_byte(sc_lo, sc_hi, 1)
            e2 = _exp_byte(sc_lo, sc_hi, 2)
            e3 = _exp_byte(sc_lo, sc_hi, 3)
            e4 = _exp_byte(sc_lo, sc_hi, 4)
            e5 = _exp_byte(sc_lo, sc_hi, 5)
            e6 = _exp_byte(sc_lo, sc_hi, 6)
            e_max = tl.maximum(tl.maximum(tl.maximum(e0, e1), tl.maximum(e2, e3)),
                               tl.maximum(tl.maximum(e4, e5), e6))
            e_new = tl.maximum(e_run, tl.max(e_max, 0))
            k0 = _k_rel(r0, e0, e_new, MMA16)
            s = tl.dot(_q16(q_ptrs, q_mask, qscale, 0, MMA16), tl.trans(k0))
            k1 = _k_rel(r1, e1, e_new, MMA16)
            s = tl.dot(_q16(q_ptrs, q_mask, qscale, 1, MMA16), tl.trans(k1), s)
            k2 = _k_rel(r2, e2, e_new, MMA16)
            s = tl.dot(_q16(q_ptrs, q_mask, qscale, 2, MMA16), tl.trans(k2), s)
            k3 = _k_rel(r3, e3, e_new, MMA16)
            s = tl.dot(_q16(q_ptrs, q_mask, qscale, 3, MMA16), tl.trans(k3), s)
            k4 = _k_rel(r4, e4, e_new, MMA16)
            s = tl.dot(_q16(q_ptrs, q_mask, qscale, 4, MMA16), tl.trans(k4), s)
            k5 = _k_rel(r5, e5, e_new, MMA16)
            s = tl.dot(_q16(q_ptrs, q_mask, qscale, 5, MMA16), tl.trans(k5), s)
            k6 = _k_rel(r6, e6, e_new, MMA16)
            s = tl.dot(_q16(q_ptrs, q_mask, qscale, 6, MMA16), tl.trans(k6), s)
            # rope: bf16 -> fp16 (exact for |x| in [2^-14, 65504]; below, an absolute 2^-25), unscaled,
            # so it joins the scores after the nope part is brought to units of 1.
            k7 = rope.to(tl.float32).to(tl.float16).to(MMA16)
            s = tl.dot(_q16(q_ptrs, q_mask, qscale, 7, MMA16), tl.trans(k7), s * _pow2(e_new))
        else:
            # Two score accumulators (even / odd groups): two 16-long chains of dependent MMAs per
            # warp instead of one 32-long chain (at 32 heads each warp owns one 16x8 score tile).
            k0 = _k_scaled(r0, _exp_byte(sc_lo, sc_hi, 0), MMA_DTYPE)
            s = tl.dot(_q_chunk(q_ptrs, q_mask, 0, MMA_DTYPE), tl.trans(k0))
            k1 = _k_scaled(r1, _exp_byte(sc_lo, sc_hi, 1), MMA_DTYPE)
            s_odd = tl.dot(_q_chunk(q_ptrs, q_mask, 1, MMA_DTYPE), tl.trans(k1))
            k2 = _k_scaled(r2, _exp_byte(sc_lo, sc_hi, 2), MMA_DTYPE)
            k3 = _k_scaled(r3, _exp_byte(sc_lo, sc_hi, 3), MMA_DTYPE)
            if QK_CHAINS == 4:
                s_c = tl.dot(_q_chunk(q_ptrs, q_mask, 2, MMA_DTYPE), tl.trans(k2))
                s_d = tl.dot(_q_chunk(q_ptrs, q_mask, 3, MMA_DTYPE), tl.trans(k3))
            else:
                s = tl.dot(_q_chunk(q_ptrs, q_mask, 2, MMA_DTYPE), tl.trans(k2), s)
                s_odd = tl.dot(_q_chunk(q_ptrs, q_mask, 3, MMA_DTYPE), tl.trans(k3), s_odd)
            k4 = _k_scaled(r4, _exp_byte(sc_lo, sc_hi, 4), MMA_DTYPE)
            s = tl.dot(_q_chunk(q_ptrs, q_mask, 4, MMA_DTYPE), tl.trans(k4), s)
            k5 = _k_scaled(r5, _exp_byte(sc_lo, sc_hi, 5), MMA_DTYPE)
            s_odd = tl.dot(_q_chunk(q_ptrs, q_mask, 5, MMA_DTYPE), tl.trans(k5), s_odd)
            k6 = _k_scaled(r6, _exp_byte(sc_lo, sc_hi, 6), MMA_DTYPE)
            k7 = rope.to(MMA_DTYPE)
            if QK_CHAINS == 4:
                s_c = tl.dot(_q_chunk(q_ptrs, q_mask, 6, MMA_DTYPE), tl.trans(k6), s_c)
                s_d = tl.dot(_q_chunk(q_ptrs, q_mask, 7, MMA_DTYPE), tl.trans(k7), s_d)
                s = (s + s_c) + (s_odd + s_d)
            else:
                s = tl.dot(_q_chunk(q_ptrs, q_mask, 6, MMA_DTYPE), tl.trans(k6), s)
                s_odd = tl.dot(_q_chunk(q_ptrs, q_mask, 7, MMA_DTYPE), tl.trans(k7), s_odd)
                s += s_odd

        s = tl.where(valid[None, :], s * score_scale[:, None], float("-inf"))
        m_tile = tl.max(s, 1)
        if LAZY_RESCALE:
            # Move the running max (and rescale the accumulators, 64 values per thread at 32
            # heads) only when some row's max grew by more than 2^8, or (F16_REL) the K scale
            # reference e_run moved; otherwise p <= 2^8, which the bf16 / fp16 P and the fp32
            # sums and accumulators hold without loss.
            move = tl.max(m_tile - m_i, 0) > 8.0
            if F16_REL:
                move = move | (e_new > e_run)
            if move:
                m_new = tl.maximum(m_i, m_tile)
                alpha = tl.math.exp2(m_i - m_new)
                a = alpha[:, None]
                a_nope = a
                if F16_REL:
                    a_nope = (alpha * _pow2(tl.maximum(e_run - e_new + 127, 1)))[:, None]
                    e_run = e_new
                acc0 = acc0 * a_nope
                acc1 = acc1 * a_nope
                acc2 = acc2 * a_nope
                acc3 = acc3 * a_nope
                acc4 = acc4 * a_nope
                acc5 = acc5 * a_nope
                acc6 = acc6 * a_nope
                acc7 = acc7 * a
                l_part = l_part * a
                m_i = m_new
            p = tl.math.exp2(s - m_i[:, None])
            l_part += p
            a = tl.full([BLOCK_H, 1], 1.0, tl.float32)
            a_nope = a
        else:
            m_new = tl.maximum(m_i, m_tile)
            alpha = tl.math.exp2(m_i - m_new)
            p = tl.math.exp2(s - m_new[:, None])
            a = alpha[:, None]
            l_part = l_part * a + p
            m_i = m_new
            a_nope = a
            if F16_REL:
                # The nope accumulators move to units of 2^(e_new-127) inside the softmax
                # rescale (a [BLOCK_H] multiply, no extra pass).
                a_nope = (alpha * _pow2(tl.maximum(e_run - e_new + 127, 1)))[:, None]
                e_run = e_new
        if F16_REL:
            p16 = p.to(tl.float16).to(MMA16)  # one fp16 P (<= 2^8) for all groups
        else:
            p16 = p.to(tl.bfloat16).to(MMA_DTYPE)
        acc7 = tl.dot(p16, k7, acc7 * a)
        acc0 = tl.dot(p16, k0, acc0 * a_nope)
        acc1 = tl.dot(p16, k1, acc1 * a_nope)
        acc2 = tl.dot(p16, k2, acc2 * a_nope)
        acc3 = tl.dot(p16, k3, acc3 * a_nope)
        acc4 = tl.dot(p16, k4, acc4 * a_nope)
        acc5 = tl.dot(p16, k5, acc5 * a_nope)
        acc6 = tl.dot(p16, k6, acc6 * a_nope)
        r0, r1, r2, r3, r4, r5, r6, rope, sc_lo, sc_hi, valid = n0, n1, n2, n3, n4, n5, n6, nrope, nsc_lo, nsc_hi, nvalid

    l_i = tl.sum(l_part, 1)
    has_tok = l_i > 0.0
    inv_l = 1.0 / tl.where(has_tok, l_i, 1.0)
    lse2 = tl.where(has_tok, m_i + tl.math.log2(tl.where(has_tok, l_i, 1.0)), float("-inf"))
    if SPLIT:
        base = (row * num_splits + split) * H + heads
        tl.store(part_lse_ptr + base, lse2, mask=head_ok)
        o_ptrs = part_out_ptr + base[:, None] * 512 + dim[None, :]
        factor = inv_l
    else:
        factor = tl.where(has_tok, inv_l, 0.0)
        lse_out = lse2
        if HAS_SINK:
            sink2 = tl.load(sink_ptr + heads, mask=head_ok, other=float("-inf")) * 1.4426950408889634
            wsink, lse_out = _sink_weight(lse2, sink2)
            factor = tl.where(has_tok, factor * wsink, 0.0)
        tl.store(lse_ptr + row * H + heads, lse_out * 0.6931471805599453, mask=head_ok)
        o_ptrs = out_ptr + (row * H + heads)[:, None] * 512 + dim[None, :]
    o_mask = head_ok[:, None]
    nope_factor = factor
    if F16_REL:
        nope_factor = factor * tl.math.exp2((e_run - 127).to(tl.float32))
    _store_chunk(o_ptrs, acc0, nope_factor, o_mask, 0)
    _store_chunk(o_ptrs, acc1, nope_factor, o_mask, 1)
    _store_chunk(o_ptrs, acc2, nope_factor, o_mask, 2)
    _store_chunk(o_ptrs, acc3, nope_factor, o_mask, 3)
    _store_chunk(o_ptrs, acc4, nope_factor, o_mask, 4)
    _store_chunk(o_ptrs, acc5, nope_factor, o_mask, 5)
    _store_chunk(o_ptrs, acc6, nope_factor, o_mask, 6)
    _store_chunk(o_ptrs, acc7, factor, o_mask, 7)



@triton.jit
def _combine_splits_wide_kernel(
    part_out_ptr, part_lse_ptr, sink_ptr, out_ptr, lse_ptr, H, num_splits,
    HAS_SINK: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, SPLITS_AT_ONCE: tl.constexpr,
):
    """Merge the splits of one (row, BLOCK_H heads, BLOCK_D columns) by LSE, add the sink, write
    bf16. SPLITS_AT_ONCE partials load per step (online max, as in the decode loop): few rows want
    every split in one load and many small programs (latency), many rows want v4's 16 x 512
    programs stepping one split at a time (throughput); the launch picks."""
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
        m2 = (sp < num_splits)[:, None] & head_ok[None, :]
        base = (row * num_splits + sp)[:, None] * H + heads[None, :]  # [S, BH]
        lse_s = tl.load(part_lse_ptr + base, mask=m2, other=float("-inf"))
        o_s = tl.load(part_out_ptr + base[:, :, None] * 512 + cols[None, None, :], mask=m2[:, :, None], other=0.0)
        new_hi = tl.maximum(hi, tl.max(lse_s, 0))
        new_safe = tl.where(new_hi == float("-inf"), 0.0, new_hi)
        alpha = tl.math.exp2(hi - new_safe)
        w = tl.math.exp2(lse_s - new_safe[None, :])
        acc = acc * alpha[:, None] + tl.sum(w[:, :, None] * o_s, 0)
        tok_w = tok_w * alpha + tl.sum(w, 0)
        hi = new_hi
    has_tok = tok_w > 0.0
    safe_w = tl.where(has_tok, tok_w, 1.0)
    o = acc / safe_w[:, None]
    lse2 = tl.where(has_tok, tl.where(hi == float("-inf"), 0.0, hi) + tl.math.log2(safe_w), float("-inf"))
    if HAS_SINK:
        sink2 = tl.load(sink_ptr + heads, mask=head_ok, other=float("-inf")) * 1.4426950408889634
        ws, lse2 = _sink_weight(lse2, sink2)
        o = o * ws[:, None]
    o = tl.where(has_tok[:, None], o, 0.0)
    tl.store(out_ptr + (row * H + heads)[:, None] * 512 + cols[None, :], o.to(tl.bfloat16), mask=head_ok[:, None])
    if d0 == 0:
        tl.store(lse_ptr + row * H + heads, lse2 * 0.6931471805599453, mask=head_ok)


def combine_launch(batch: int, num_heads: int, num_splits: int):
    """(grid, BLOCK_H, BLOCK_D, SPLITS_AT_ONCE, warps) for the split combine, from the H200 probe
    (bench/results/probe_combine.txt): all splits at once in (row, head, 128 columns) programs while
    rows x heads <= 512, else v4's (row, 16 heads) programs stepping one split at a time."""
    if batch * num_heads <= 512:
        bh, bd, sa = 1, 128, max(2, triton.next_power_of_2(num_splits))
    else:
        bh, bd, sa = 16, 512, 1
    return (batch, triton.cdiv(num_heads, bh), 512 // bd), bh, bd, sa, 4


# (BLOCK_H, BLOCK_T, num_warps, num_stages, F16_REL, LAZY_RESCALE). Compiled for sm_120 and sm_90 by
# tests/test_mma_aot_v5.py (shared memory, spills); instruction mix in count_instructions.py.
V6_CONFIGS = {
    "h16_t64_w8": (16, 64, 8, 1, False, True),  # fp16 K spills here (44-88 bytes)
    "h32_t32_w8": (32, 32, 8, 1, True, True),
}
EXPERIMENT_VARIANTS = {
    "bf16_h32t32_c4": (32, 32, 8, 1, False, True, 4, 0),
    "bf16_h32t32_r128": (32, 32, 8, 1, False, True, 2, 128),
    "bf16_h16t16_w4": (16, 16, 4, 1, False, True, 2, 0),
}
pick_num_splits = v4.pick_num_splits
pick_config = v4.pick_config  # same shape rule as v4 (same config names)


def _interpreted() -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_mma_sparse_decode_v6_kernel, InterpretedFunction)


def _page_shift(page_size: int) -> Optional[int]:
    return page_size.bit_length() - 1 if page_size > 0 and page_size & (page_size - 1) == 0 else None


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
    skip_combine: bool = False,
    wide_combine: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """As v4's `mma_sparse_decode`; `config` is a V5_CONFIGS name or a
    (BLOCK_H, BLOCK_T, warps, stages, F16_REL, LAZY_RESCALE) tuple."""
    B, s_q, H, D = q.shape
    assert s_q == 1 and D == _D, f"expected q [B, 1, H, 512], got {tuple(q.shape)}"
    assert k_cache.element_size() == 1 and k_cache.shape[-1] == 584
    has_extra = extra_k_cache is not None and extra_indices is not None
    q3 = q.reshape(B, H, D)
    if q3.stride(-1) != 1:
        q3 = q3.contiguous()

    main_idx = v4._int32_rows(indices, B)
    main_u8 = v4._flat_u8(k_cache)
    main_page = k_cache.shape[1]
    if has_extra:
        assert extra_k_cache.element_size() == 1 and extra_k_cache.shape[-1] == 584
        extra_idx = v4._int32_rows(extra_indices, B)
        extra_u8 = v4._flat_u8(extra_k_cache)
        extra_page, extra_page_bytes = extra_k_cache.shape[1], extra_k_cache.stride(0)
    else:
        extra_idx, extra_u8 = main_idx, main_u8
        extra_page, extra_page_bytes = 1, 0
    width = main_idx.shape[1] + (extra_idx.shape[1] if has_extra else 0)
    main_shift, extra_shift = _page_shift(main_page), _page_shift(extra_page)
    pow2 = main_shift is not None and extra_shift is not None

    if config is None:
        config = pick_config(H, B)
    cfg = V6_CONFIGS[config] if isinstance(config, str) else tuple(config)
    cfg = cfg + (2, 0)[len(cfg) - 6:] if len(cfg) < 8 else cfg
    block_h, block_t, warps, stages, f16_rel, lazy, qk_chains, maxnreg = cfg
    extra_opts = {"maxnreg": maxnreg} if maxnreg else {}
    head_groups = triton.cdiv(H, block_h)
    if num_splits is None:
        sms = v4._num_sms(q.device.index) if q.is_cuda else 8
        num_splits = pick_num_splits(B, head_groups, width, sms)
    split = num_splits > 1

    out = torch.empty(B, H, D, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(B, H, dtype=torch.float32, device=q.device)
    if split:
        part_out = torch.empty(B, num_splits, H, D, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(B, num_splits, H, dtype=torch.float32, device=q.device)
    else:
        part_out, part_lse = out, lse  # unused
    dummy_len = main_idx
    sink = attn_sink if attn_sink is not None else lse
    if attn_sink is not None and attn_sink.dtype != torch.float32:
        sink = attn_sink.float()
    interp = _interpreted()

    _mma_sparse_decode_v6_kernel[(head_groups, num_splits, B)](
        q3, q3.stride(0), q3.stride(1),
        main_u8, main_idx, main_idx.stride(0),
        topk_length if topk_length is not None else dummy_len,
        main_idx.shape[1], main_page, k_cache.stride(0), main_shift or 0,
        extra_u8, extra_idx, extra_idx.stride(0),
        extra_topk_length if (has_extra and extra_topk_length is not None) else dummy_len,
        extra_idx.shape[1] if has_extra else 0, extra_page, extra_page_bytes, extra_shift or 0,
        sink, out, lse, part_out, part_lse,
        H, num_splits, softmax_scale * _LOG2E,
        HAS_MAIN_LEN=topk_length is not None,
        HAS_EXTRA=has_extra,
        HAS_EXTRA_LEN=has_extra and extra_topk_length is not None,
        HAS_SINK=attn_sink is not None,
        SPLIT=split,
        BLOCK_H=block_h,
        BLOCK_T=block_t,
        F16_REL=f16_rel,
        LAZY_RESCALE=lazy,
        POW2_PAGES=pow2,
        QK_CHAINS=qk_chains,
        MMA_DTYPE=tl.float32 if interp else tl.bfloat16,
        MMA16=tl.float32 if interp else tl.float16,
        num_warps=warps,
        num_stages=stages,
        **extra_opts,
    )
    if split and not skip_combine and not wide_combine:
        cbh, cwarps = v4.COMBINE_CONFIG
        _combine_splits_kernel[(B, triton.cdiv(H, cbh))](
            part_out, part_lse, sink, out, lse, H, num_splits,
            HAS_SINK=attn_sink is not None, BLOCK_H=cbh, num_warps=cwarps,
        )
    elif split and not skip_combine:
        grid, cbh, cbd, csa, cw = combine_launch(B, H, num_splits)
        _combine_splits_wide_kernel[grid](
            part_out, part_lse, sink, out, lse, H, num_splits,
            HAS_SINK=attn_sink is not None, BLOCK_H=cbh, BLOCK_D=cbd, SPLITS_AT_ONCE=csa, num_warps=cw,
        )
    return out.unsqueeze(1), lse.unsqueeze(-1)


@torch.library.custom_op("sglang_sm120_exp::mma_sparse_decode_v6", mutates_args=())
def _mma_sparse_decode_v6_op(
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
        q, k_cache, indices, topk_length, attn_sink, softmax_scale,
        extra_k_cache, extra_indices, extra_topk_length,
    )


@_mma_sparse_decode_v6_op.register_fake
def _(q, k_cache, indices, topk_length, attn_sink, softmax_scale, extra_k_cache, extra_indices, extra_topk_length):
    B, _, H, D = q.shape
    return q.new_empty(B, 1, H, D), q.new_empty(B, H, 1, dtype=torch.float32)


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
    """Same contract as the shipped `flash_mla_sparse_decode_mma`."""
    assert head_dim_v == _D, f"head_dim_v must be {_D}"
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** (-0.5)
    if extra_k_cache is None or extra_indices is None:
        extra_k_cache = extra_indices = extra_topk_length = None
    return _mma_sparse_decode_v6_op(
        q, k_cache, indices, topk_length, attn_sink, float(softmax_scale),
        extra_k_cache, extra_indices, extra_topk_length,
    )
