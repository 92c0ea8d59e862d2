"""The mma backend's second decode kernel for DeepSeek-V4 on sm_120, in Gluon (explicit layouts).

flash_mla_sm120_mma.py runs one Triton kernel (tl.dot, heads as the MMA M dimension) for every
shape. This kernel, 16 heads per program, serves the shapes where it measured faster: up to 16
heads per rank from 16 rows (`pick_config`), and only under the Triton releases whose Gluon API
it was built against (GLUON_TRITON_RELEASES), with power-of-two page sizes; every other call keeps
the Triton kernel, decided on the host by version and shape, never by a failed compile.

It takes the Triton kernel's arguments, split rule and LSE combine (launch_sparse_decode) and its
own op, `torch.ops.sglang.sm120_mma_gluon_sparse_decode` (registered with `register_custom_op`, a
fake implementation for its shapes), so that `torch.compile(fullgraph=True)` sees one opaque node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

from sglang.kernels.ops.attention.flash_mla_sm120_mma import (
    _D,
    _LN2,
    _LOG2E,
    _NOPE_DIM,
    _TOKEN_DATA_BYTES,
    _TOKEN_SCALE_BYTES,
    ENABLE_FP_FUSION,
    _interpreted,
    _num_sms,
    _page_shift,
    _release,
    launch_sparse_decode,
    pick_triton_config,
)
from sglang.srt.utils.custom_op import register_custom_op

# Gluon's CTA-wide barrier: gl.thread_barrier up to triton 3.6, gl.barrier from 3.8 on.
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
# Gluon's cp.async into shared memory: async_copy_global_to_shared up to triton 3.6,
# async_load from 3.8 on (3.9 removed the old name).
_async_load = getattr(async_copy, "async_load", None) or (
    async_copy.async_copy_global_to_shared
)


# Per tile of BLOCK_T tokens: the raw KV bytes (7 fp8 groups, rope,
# the 8 scale bytes) land in a STAGES-deep shared-memory ring through cp.async, so the gather stays
# in flight without holding registers; both MMAs (mma.sync m16n8k16, as on sm_120) read K straight
# from that ring in their operand layouts; the UE8M0 scales multiply the [16, T] partial scores and
# P (powers of two: exact), not K. Registers 168 (sm_120), shared memory 42-63 KB, no spills
# (compiled ahead of time for sm_120): two programs per SM on sm_120.
@gluon.jit
def _g_bf16_scale(e, BITS: gl.constexpr):
    """bf16 2^(e-127+60) (BITS: with V = fp8 * 2^-120, exact for e < 195), else 2^(e-127)."""
    if BITS:
        e = e + 60
    return (e << 7).to(gl.int16).to(gl.bfloat16, bitcast=True)


@gluon.jit
def _g_pow2(e):
    return (e << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _g_fp8_bits_to_bf16(raw):
    """e4m3 bytes -> bf16 holding value * 2^-120, exact for normals and subnormals: the byte's
    exponent and mantissa bits move to bf16 bits 4..10 and its sign to bit 15 (integer pipe only,
    no conversion-pipe instructions). Callers fold 2^120 into the scale they apply anyway.
    """
    return gl.inline_asm_elementwise(
        """{
        .reg .b32 t0, t1, u0, u1, v0, v1;
        prmt.b32 t0, $2, 0, 0x4140;
        prmt.b32 t1, $2, 0, 0x4342;
        shl.b32 u0, t0, 4;
        shl.b32 u1, t1, 4;
        shl.b32 v0, t0, 8;
        shl.b32 v1, t1, 8;
        and.b32 v0, v0, 0x80008000;
        and.b32 v1, v1, 0x80008000;
        lop3.b32 $0, u0, 0x07F007F0, v0, 0xEA;
        lop3.b32 $1, u1, 0x07F007F0, v1, 0xEA;
        }""",
        "=r,=r,r",
        [raw],
        dtype=gl.bfloat16,
        is_pure=True,
        pack=4,
    )


@gluon.jit
def _g_k(raw, BITS: gl.constexpr):
    """fp8 bytes -> bf16 MMA operand: value * 2^-120 by bit placement (BITS) or the exact value by cvt."""
    if BITS:
        return _g_fp8_bits_to_bf16(raw)
    else:
        return raw.to(gl.float8e4nv, bitcast=True).to(gl.bfloat16)


@gluon.jit
def _g_kop(
    nope,
    kbf_s,
    G: gl.constexpr,
    BLOCK_T: gl.constexpr,
    B_OP: gl.constexpr,
    BITS: gl.constexpr,
    DQ: gl.constexpr,
    TRANS: gl.constexpr,
):
    """Column group G of the tile as an MMA B operand: [64, T] (TRANS, for QK) or [T, 64] (PV), from
    the bf16 copy (DQ) or straight from the fp8 bytes."""
    if DQ:
        src = kbf_s.slice(G * BLOCK_T, BLOCK_T)
        if TRANS:
            src = src.permute((1, 0))
        return src.load(B_OP)
    else:
        src = nope.slice(G * BLOCK_T, BLOCK_T)
        if TRANS:
            src = src.permute((1, 0))
        return _g_k(src.load(B_OP), BITS)


@gluon.jit
def _g_indices(
    pos,
    row,
    n_main,
    end,
    main_idx,
    main_idx_stride,
    extra_idx,
    extra_idx_stride,
    HAS_EXTRA: gl.constexpr,
):
    in_range = pos < end
    in_main = pos < n_main
    idx = gl.load(
        main_idx + row * main_idx_stride + pos, mask=in_range & in_main, other=-1
    )
    if HAS_EXTRA:
        e_idx = gl.load(
            extra_idx + row * extra_idx_stride + (pos - n_main),
            mask=in_range & (pos >= n_main),
            other=-1,
        )
        idx = gl.where(in_main, idx, e_idx)
    return idx


@gluon.jit
def _g_issue_tile(
    idx,
    pos,
    n_main,
    nope_s,
    rope_s,
    sc_s,
    main_u8,
    main_page,
    main_page_bytes,
    main_shift,
    extra_u8,
    extra_page,
    extra_page_bytes,
    extra_shift,
    HAS_EXTRA: gl.constexpr,
    POW2_PAGES: gl.constexpr,
    BLOCK_T: gl.constexpr,
    NUM_WARPS: gl.constexpr,
):
    """cp.async of one tile's bytes: nope [8, T, 64] u8 (group 7 unused), rope [T, 64] bf16, scales [T, 2] i32.
    idx / pos in the token layout of the nope copy."""
    # Per-token address in three layouts (one per copy); computed once in a 1-D layout then converted.
    valid = idx >= 0
    idx = gl.where(valid, idx, 0)
    base = main_u8
    page_size = main_page
    shift = main_shift
    page_bytes = main_page_bytes.to(gl.int64)
    if HAS_EXTRA:
        in_main = pos < n_main
        base = gl.where(in_main, main_u8, extra_u8)
        page_size = gl.where(in_main, main_page, extra_page)
        shift = gl.where(in_main, main_shift, extra_shift)
        page_bytes = gl.where(in_main, main_page_bytes, extra_page_bytes).to(gl.int64)
    if POW2_PAGES:
        page = (idx >> shift).to(gl.int64)
        off = idx & (page_size - 1)
    else:
        page = (idx // page_size).to(gl.int64)
        off = idx % page_size
    data = base + gl.multiple_of(page * page_bytes + off * _TOKEN_DATA_BYTES, 64)
    scale = base + (
        page * page_bytes + (page_size * _TOKEN_DATA_BYTES + off * _TOKEN_SCALE_BYTES)
    )
    # As in the Triton kernel's _load_tile: triton 3.8 loses the alignment through the select of two base pointers (its cp.async
    # would then copy single bytes, which it refuses); 3.6 keeps it.
    data = gl.multiple_of(data, 16)
    scale = gl.multiple_of(scale, 8)

    # One token -> thread mapping (lane // 4 + 8 * warp) in all three copy layouts, so the per-token
    # address converts between them without data movement.
    L3: gl.constexpr = gl.BlockedLayout(
        [1, 1, 16], [1, 8, 4], [1, NUM_WARPS, 1], [2, 1, 0]
    )
    LG3: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, L3))
    LC3: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, L3))
    g = gl.arange(0, 8, layout=LG3)
    c = gl.arange(0, 64, layout=LC3)
    p3 = data[None, :, None] + (g * 64)[:, None, None] + c[None, None, :]
    m3 = valid[None, :, None] & (g < 7)[:, None, None] & (c < 64)[None, None, :]
    _async_load(nope_s.reshape([8, BLOCK_T, 64]), p3, mask=m3)

    LR: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [NUM_WARPS, 1], [1, 0])
    dr = gl.convert_layout(data, gl.SliceLayout(1, LR), assert_trivial=True)
    vr = gl.convert_layout(valid, gl.SliceLayout(1, LR), assert_trivial=True)
    cr = gl.arange(0, 64, layout=gl.SliceLayout(0, LR))
    pr = (dr + _NOPE_DIM).to(gl.pointer_type(gl.bfloat16))[:, None] + cr[None, :]
    _async_load(rope_s, pr, mask=vr[:, None] & (cr < 64)[None, :])

    # The 7 UE8M0 bytes (+1 pad) of a token as one 8-byte word (the 4 lanes of a token copy it alike).
    ds = gl.convert_layout(scale, gl.SliceLayout(1, LR), assert_trivial=True)
    _async_load(sc_s, ds.to(gl.pointer_type(gl.int64)), mask=vr)


@gluon.jit
def _g_q(
    q_s,
    qa_ptrs,
    qa_mask,
    G: gl.constexpr,
    BLOCK_H: gl.constexpr,
    A_OP: gl.constexpr,
    Q_SMEM: gl.constexpr,
):
    if Q_SMEM:
        return q_s.slice(G * BLOCK_H, BLOCK_H).load(A_OP)
    else:
        return gl.load(qa_ptrs + G * 64, mask=qa_mask, other=0.0)


@gluon.jit
def _g_finish_rows(m2, l, sink_ptr, heads, head_ok, HAS_SINK: gl.constexpr):
    has_tok = l > 0.0
    safe_l = gl.where(has_tok, l, 1.0)
    lse2 = gl.where(has_tok, m2 + gl.log2(safe_l), float("-inf"))
    factor = gl.where(has_tok, 1.0 / safe_l, 0.0)
    if HAS_SINK:
        sink2 = gl.load(sink_ptr + heads, mask=head_ok, other=float("-inf")) * _LOG2E
        w = 1.0 / (1.0 + gl.exp2(sink2 - lse2))
        hi = gl.maximum(lse2, sink2)
        inf_hi = (hi == float("inf")) | (hi == float("-inf"))
        hi_safe = gl.where(inf_hi, 0.0, hi)
        lse2 = gl.where(
            inf_hi,
            hi,
            hi_safe + gl.log2(gl.exp2(lse2 - hi_safe) + gl.exp2(sink2 - hi_safe)),
        )
        factor = gl.where(has_tok, factor * w, 0.0)
    return factor, lse2


@gluon.jit
def _gluon_sparse_decode_kernel(
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
    HAS_MAIN_LEN: gl.constexpr,
    HAS_EXTRA: gl.constexpr,
    HAS_EXTRA_LEN: gl.constexpr,
    HAS_SINK: gl.constexpr,
    SPLIT: gl.constexpr,
    POW2_PAGES: gl.constexpr,
    BLOCK_T: gl.constexpr,
    STAGES: gl.constexpr,
    NUM_WARPS: gl.constexpr,
    Q_SMEM: gl.constexpr,
    BITS: gl.constexpr,
    DQ: gl.constexpr,
):
    BLOCK_H: gl.constexpr = 16
    MMA: gl.constexpr = gl.NVMMADistributedLayout(
        version=[2, 0], warps_per_cta=[1, NUM_WARPS], instr_shape=[16, 8]
    )
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    ROWS: gl.constexpr = gl.SliceLayout(1, MMA)
    COLS: gl.constexpr = gl.SliceLayout(0, MMA)
    TOK: gl.constexpr = gl.SliceLayout(
        0,
        gl.SliceLayout(
            2, gl.BlockedLayout([1, 1, 16], [1, 8, 4], [1, NUM_WARPS, 1], [2, 1, 0])
        ),
    )
    P_COLS: gl.constexpr = gl.SliceLayout(0, A_OP)

    hg = gl.program_id(0)
    split = gl.program_id(1)
    row = gl.program_id(2).to(gl.int64)

    n_main = main_topk
    if HAS_MAIN_LEN:
        n_main = gl.minimum(gl.load(main_len + row), main_topk)
    n_main = gl.maximum(n_main, 0)
    n_extra = 0
    if HAS_EXTRA:
        n_extra = extra_topk
        if HAS_EXTRA_LEN:
            n_extra = gl.minimum(gl.load(extra_len + row), extra_topk)
        n_extra = gl.maximum(n_extra, 0)
    total = n_main + n_extra
    chunk = gl.cdiv(gl.cdiv(total, num_splits), BLOCK_T) * BLOCK_T
    start = split * chunk
    end = gl.minimum(start + chunk, total)
    n_tiles = gl.cdiv(gl.maximum(end - start, 0), BLOCK_T)

    # q of the head group -> shared memory once, [8 groups, 16, 64] bf16.
    # q of the head group: once into shared memory (Q_SMEM), else read per tile straight from global
    # (L1-resident) into the MMA operand layout, which leaves 16 KB of shared memory for a second CTA.
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [NUM_WARPS, 1], [1, 0])
    qa_h = hg * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, A_OP))
    qa_c = gl.arange(0, 64, layout=gl.SliceLayout(0, A_OP))
    qa_ptrs = q_ptr + row * stride_qb + (qa_h * stride_qh)[:, None] + qa_c[None, :]
    qa_mask = (qa_h < H)[:, None] & (qa_c < 64)[None, :]
    if Q_SMEM:
        qr = gl.arange(
            0, 8 * BLOCK_H, layout=gl.SliceLayout(1, QL)
        )  # group-major rows: g * 16 + head
        qh = hg * BLOCK_H + qr % BLOCK_H
        qc = gl.arange(0, 64, layout=gl.SliceLayout(0, QL))
        q_vals = gl.load(
            q_ptr
            + row * stride_qb
            + (qh * stride_qh + (qr // BLOCK_H) * 64)[:, None]
            + qc[None, :],
            mask=(qh < H)[:, None] & (qc < 64)[None, :],
            other=0.0,
        )
        q_s = gl.allocate_shared_memory(
            gl.bfloat16,
            [8 * BLOCK_H, 64],
            gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0]),
            q_vals,
        )
    else:
        q_s = 0

    nope_s = gl.allocate_shared_memory(
        gl.uint8,
        [STAGES, 8 * BLOCK_T, 64],
        gl.SwizzledSharedLayout(vec=16, per_phase=1, max_phase=4, order=[1, 0]),
    )
    rope_s = gl.allocate_shared_memory(
        gl.bfloat16,
        [STAGES, BLOCK_T, 64],
        gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0]),
    )
    sc_s = gl.allocate_shared_memory(
        gl.int64,
        [STAGES, BLOCK_T],
        gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]),
    )
    if DQ:
        # One dequantised bf16 copy of the tile's 7 fp8 groups (slot 7 unused), read by both MMAs
        # through ldmatrix: a byte-wise gather of each operand costs ~4x the shared-memory instructions.
        kbf_s = gl.allocate_shared_memory(
            gl.bfloat16,
            [8 * BLOCK_T, 64],
            gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0]),
        )
    else:
        kbf_s = 0
    DQ_L: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [NUM_WARPS, 1], [1, 0])

    # Prologue: tiles 0 .. STAGES-2 in flight; indices of tile STAGES-1 in registers.
    tok = gl.arange(0, BLOCK_T, layout=TOK)
    for s0 in gl.static_range(STAGES - 1):
        pos = start + s0 * BLOCK_T + tok
        idx = _g_indices(
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
        _g_issue_tile(
            idx,
            pos,
            n_main,
            nope_s.index(s0),
            rope_s.index(s0),
            sc_s.index(s0),
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
            BLOCK_T,
            NUM_WARPS,
        )
        async_copy.commit_group()
    pos_n = start + (STAGES - 1) * BLOCK_T + tok
    idx_n = _g_indices(
        pos_n,
        row,
        n_main,
        end,
        main_idx,
        main_idx_stride,
        extra_idx,
        extra_idx_stride,
        HAS_EXTRA,
    )

    m_i = gl.full([BLOCK_H], -1.0e30, gl.float32, ROWS)
    l_part = gl.zeros([BLOCK_H, BLOCK_T], gl.float32, MMA)
    acc0 = gl.zeros([BLOCK_H, 64], gl.float32, MMA)
    acc1 = gl.zeros([BLOCK_H, 64], gl.float32, MMA)
    acc2 = gl.zeros([BLOCK_H, 64], gl.float32, MMA)
    acc3 = gl.zeros([BLOCK_H, 64], gl.float32, MMA)
    acc4 = gl.zeros([BLOCK_H, 64], gl.float32, MMA)
    acc5 = gl.zeros([BLOCK_H, 64], gl.float32, MMA)
    acc6 = gl.zeros([BLOCK_H, 64], gl.float32, MMA)
    acc7 = gl.zeros([BLOCK_H, 64], gl.float32, MMA)
    tcol = gl.arange(0, BLOCK_T, layout=COLS)
    for j in range(0, n_tiles):
        # Validity of this tile's tokens in the score layout (indices are L1/L2-hot).
        pos_c = start + j * BLOCK_T + tcol
        idx_c = _g_indices(
            pos_c,
            row,
            n_main,
            end,
            main_idx,
            main_idx_stride,
            extra_idx,
            extra_idx_stride,
            HAS_EXTRA,
        )
        # Tile j landed (this thread's copies), then one barrier: every thread's copies visible and
        # every warp done with tile j-1, whose stage the next issue overwrites.
        async_copy.wait_group(STAGES - 2)
        _cta_barrier()
        ns = (j + STAGES - 1) % STAGES
        _g_issue_tile(
            idx_n,
            pos_n,
            n_main,
            nope_s.index(ns),
            rope_s.index(ns),
            sc_s.index(ns),
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
            BLOCK_T,
            NUM_WARPS,
        )
        async_copy.commit_group()
        pos_n += BLOCK_T
        idx_n = _g_indices(
            pos_n,
            row,
            n_main,
            end,
            main_idx,
            main_idx_stride,
            extra_idx,
            extra_idx_stride,
            HAS_EXTRA,
        )

        st = j % STAGES
        nope = nope_s.index(st)
        sc = sc_s.index(st).load(COLS)
        sc_lo = sc.to(gl.int32)
        sc_hi = (sc >> 32).to(gl.int32)
        if DQ:
            for g in gl.static_range(7):
                kbf_s.slice(g * BLOCK_T, BLOCK_T).store(
                    _g_k(nope.slice(g * BLOCK_T, BLOCK_T).load(DQ_L), BITS)
                )
        # QK: per column group an unscaled fp8 -> bf16 MMA, the UE8M0 scale applied to the [16, T] scores.
        s = gl.zeros([BLOCK_H, BLOCK_T], gl.float32, MMA)
        for g in gl.static_range(7):
            kt = _g_kop(nope, kbf_s, g, BLOCK_T, B_OP, BITS, DQ, True)
            s_g = mma_v2(
                _g_q(q_s, qa_ptrs, qa_mask, g, BLOCK_H, A_OP, Q_SMEM),
                kt,
                gl.zeros([BLOCK_H, BLOCK_T], gl.float32, MMA),
            )
            if g < 4:
                e = (sc_lo >> (8 * g)) & 0xFF
            else:
                e = (sc_hi >> (8 * (g - 4))) & 0xFF
            if BITS:
                s_g = s_g * 1.329227995784916e36  # 2^120 from the bit placement
            s += s_g * _g_pow2(e)[None, :]
        s = mma_v2(
            _g_q(q_s, qa_ptrs, qa_mask, 7, BLOCK_H, A_OP, Q_SMEM),
            rope_s.index(st).permute((1, 0)).load(B_OP),
            s,
        )

        valid = idx_c >= 0
        s = gl.where(valid[None, :], s * qk_scale_log2, float("-inf"))
        m_tile = gl.max(s, 1)
        if gl.max(m_tile - m_i, 0) > 8.0:
            m_new = gl.maximum(m_i, m_tile)
            a = gl.exp2(m_i - m_new)[:, None]
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
        p = gl.exp2(s - m_i[:, None])
        l_part += p
        # P once into the A-operand layout (every warp needs all T columns), then per group
        # times that group's token scales in bf16, a power of two (exact): 2^(e-127) with V
        # the raw fp8 value, or with BITS 2^(e-127+60) with V = fp8 * 2^-120, so the nope
        # accumulators carry 2^-60 (undone at the end).
        p_a = gl.convert_layout(p.to(gl.bfloat16), A_OP)
        psc = sc_s.index(st).load(P_COLS)
        psc_lo = psc.to(gl.int32)
        psc_hi = (psc >> 32).to(gl.int32)
        rope_v = rope_s.index(st).load(B_OP)
        acc7 = mma_v2(p_a, rope_v, acc7)
        v = _g_kop(nope, kbf_s, 0, BLOCK_T, B_OP, BITS, DQ, False)
        acc0 = mma_v2(p_a * _g_bf16_scale(psc_lo & 0xFF, BITS)[None, :], v, acc0)
        v = _g_kop(nope, kbf_s, 1, BLOCK_T, B_OP, BITS, DQ, False)
        acc1 = mma_v2(p_a * _g_bf16_scale((psc_lo >> 8) & 0xFF, BITS)[None, :], v, acc1)
        v = _g_kop(nope, kbf_s, 2, BLOCK_T, B_OP, BITS, DQ, False)
        acc2 = mma_v2(
            p_a * _g_bf16_scale((psc_lo >> 16) & 0xFF, BITS)[None, :], v, acc2
        )
        v = _g_kop(nope, kbf_s, 3, BLOCK_T, B_OP, BITS, DQ, False)
        acc3 = mma_v2(
            p_a * _g_bf16_scale((psc_lo >> 24) & 0xFF, BITS)[None, :], v, acc3
        )
        v = _g_kop(nope, kbf_s, 4, BLOCK_T, B_OP, BITS, DQ, False)
        acc4 = mma_v2(p_a * _g_bf16_scale(psc_hi & 0xFF, BITS)[None, :], v, acc4)
        v = _g_kop(nope, kbf_s, 5, BLOCK_T, B_OP, BITS, DQ, False)
        acc5 = mma_v2(p_a * _g_bf16_scale((psc_hi >> 8) & 0xFF, BITS)[None, :], v, acc5)
        v = _g_kop(nope, kbf_s, 6, BLOCK_T, B_OP, BITS, DQ, False)
        acc6 = mma_v2(
            p_a * _g_bf16_scale((psc_hi >> 16) & 0xFF, BITS)[None, :], v, acc6
        )
    async_copy.wait_group(0)

    heads = hg * BLOCK_H + gl.arange(0, BLOCK_H, layout=ROWS)
    head_ok = heads < H
    l_i = gl.sum(l_part, 1)
    dim = gl.arange(0, 64, layout=COLS)
    if SPLIT:
        factor, lse2 = _g_finish_rows(m_i, l_i, sink_ptr, heads, head_ok, False)
        base = (row * num_splits + split) * H + heads
        gl.store(part_lse_ptr + base, lse2, mask=head_ok)
        o_ptrs = part_out_ptr + base[:, None] * _D + dim[None, :]
    else:
        factor, lse2 = _g_finish_rows(m_i, l_i, sink_ptr, heads, head_ok, HAS_SINK)
        gl.store(lse_ptr + row * H + heads, lse2 * _LN2, mask=head_ok)
        o_ptrs = out_ptr + (row * H + heads)[:, None] * _D + dim[None, :]
    o_mask = head_ok[:, None] & (dim < 64)[None, :]
    f = factor[:, None]
    if BITS:
        fn = f * 1.152921504606846976e18  # 2^60: the nope accumulators carry 2^-60
    else:
        fn = f
    gl.store(o_ptrs + 0, (acc0 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 64, (acc1 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 128, (acc2 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 192, (acc3 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 256, (acc4 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 320, (acc5 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 384, (acc6 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + _NOPE_DIM, (acc7 * f).to(o_ptrs.dtype.element_ty), mask=o_mask)


# ----------------------------------------------------------------------------- configs
# launch = (BLOCK_T, STAGES, num_warps, Q_SMEM, BITS, DQ). Q_SMEM keeps q in shared memory (else it
# is re-read from L1 per tile); BITS converts fp8 by bit placement on the integer pipe instead of
# cvt; DQ dequantises each tile once into a bf16 copy for both MMAs. per_sm / min_split: the split
# rule, as in MMA_CONFIGS (two programs on sm_120 with <= 49 KB of shared memory, else one). Every
# entry compiles ahead of time for sm_120 and sm_90 without register spills.
GLUON_CONFIGS = {
    # 42 KB
    "g32s2": dict(launch=(32, 2, 4, False, False, False), per_sm=2, min_split=64),
    # 59 KB
    "g32s2q": dict(launch=(32, 2, 4, True, False, False), per_sm=1, min_split=64),
    # 92 KB
    "g32dqq": dict(launch=(32, 2, 4, True, True, True), per_sm=1, min_split=64),
}
GLUON_CONFIG = "g32dqq"
# The split rule of a config given as a launch tuple (tests, benchmarks).
_TUPLE_CONFIG_SPLIT_RULE = dict(per_sm=1, min_split=64)


@dataclass(frozen=True)
class GluonShapeRule:
    """Where the Gluon kernel serves, for one SM count (rows = batch)."""

    max_heads: int  # up to this many heads ...
    min_batch: int  # ... from this many rows


# By the SM count of the card they were measured on. 132 (H200): up to 16 heads (TP >= 4) from 16
# rows, where it measured 3-17% faster than the Triton configs with one program per SM, which is
# what its 92 KB of shared memory gets on sm_120 too. A card with another SM count takes the nearest
# measured row until its own is measured.
GLUON_SHAPE_RULES = {132: GluonShapeRule(16, 16)}


def gluon_shape_rule(sms: Optional[int] = None) -> GluonShapeRule:
    """The measured row for this SM count: its own, else the nearest (the smaller on a tie); None: 132."""
    if sms is None:
        return GLUON_SHAPE_RULES[132]
    return GLUON_SHAPE_RULES[min(GLUON_SHAPE_RULES, key=lambda n: (abs(n - sms), n))]


# Triton releases (major.minor) whose Gluon API builds the Gluon kernel for sm_120 and sm_90 ahead of
# time: 3.6, 3.8 and 3.9. Gluon is experimental and its API moves between releases (3.8 renamed
# thread_barrier: _cta_barrier; 3.9 removed async_copy_global_to_shared: _async_load), so on any
# other release every shape takes the Triton kernel: decided here by version, never by catching a
# failed compile inside a running server (or a CUDA-graph capture).
GLUON_TRITON_RELEASES = ("3.6", "3.8", "3.9")


def gluon_builds(triton_version: str = triton.__version__) -> bool:
    """Whether the Gluon kernel is used under this Triton release."""
    return _release(triton_version) in GLUON_TRITON_RELEASES


def pick_config(
    num_heads: int,
    batch: int,
    triton_version: str = triton.__version__,
    sms: Optional[int] = None,
) -> str:
    """The mma backend's config for a shape: the Gluon kernel's for few heads and many rows on a
    Triton release it builds on, else pick_triton_config's."""
    rule = gluon_shape_rule(sms)
    if (
        gluon_builds(triton_version)
        and num_heads <= rule.max_heads
        and batch >= rule.min_batch
    ):
        return GLUON_CONFIG
    return pick_triton_config(num_heads, batch, triton_version, sms)


def gluon_serves(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    extra_k_cache: Optional[torch.Tensor] = None,
) -> bool:
    """Whether flash_mla_sparse_decode_mma_gluon takes this call: a Gluon config by pick_config, a
    GPU (Gluon has no CPU interpreter) and power-of-two page sizes (every DeepSeek-V4 pool; the only
    ones the kernel was measured and tested with)."""
    B, _, H, _ = q.shape
    sms = _num_sms(q.device.index) if q.is_cuda else None
    return (
        q.is_cuda
        and not _interpreted()
        and pick_config(H, B, sms=sms) in GLUON_CONFIGS
        and _page_shift(k_cache.shape[1]) is not None
        and (extra_k_cache is None or _page_shift(extra_k_cache.shape[1]) is not None)
    )


def gluon_sparse_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    topk_length: Optional[torch.Tensor],
    attn_sink: Optional[torch.Tensor],
    softmax_scale: float,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    config=GLUON_CONFIG,
    num_splits: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Launch the Gluon kernel (and the split combine); returns (out [B,1,H,512] bf16, lse [B,H,1]
    f32). `config` (a GLUON_CONFIGS name or a launch tuple) and `num_splits` override the defaults
    (benchmarks and tests use them)."""
    block_t, stages, warps, q_smem, bits, dq = (
        GLUON_CONFIGS[config]["launch"] if isinstance(config, str) else config
    )
    rule = (
        GLUON_CONFIGS[config] if isinstance(config, str) else _TUPLE_CONFIG_SPLIT_RULE
    )

    def launch(grid, args, flags):
        _gluon_sparse_decode_kernel[grid](
            *args,
            **flags,
            BLOCK_T=block_t,
            STAGES=stages,
            NUM_WARPS=warps,
            Q_SMEM=q_smem,
            BITS=bits,
            DQ=dq,
            num_warps=warps,
            enable_fp_fusion=ENABLE_FP_FUSION,
        )

    return launch_sparse_decode(
        launch,
        16,
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


# ----------------------------------------------------------------------------- custom op
def _gluon_sparse_decode_fake(
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
    op_name="sm120_mma_gluon_sparse_decode",
    mutates_args=[],
    fake_impl=_gluon_sparse_decode_fake,
)
def _gluon_sparse_decode_op(
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
    return gluon_sparse_decode(
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


def flash_mla_sparse_decode_mma_gluon(
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
    """flash_mla_sparse_decode_mma's contract, through the Gluon kernel (for the calls gluon_serves)."""
    assert head_dim_v == _D.value, f"head_dim_v must be {_D.value}"
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** (-0.5)
    if extra_k_cache is None or extra_indices is None:
        extra_k_cache = extra_indices = extra_topk_length = None
    return _gluon_sparse_decode_op(
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
