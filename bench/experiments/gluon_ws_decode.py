"""NOT YET RUN ON A GPU (AOT only). Warp-specialised Gluon P1 sparse decode (issue 12, "Next step" 1).

Written in a session without a GPU and without a Gluon interpreter: it compiles for sm_120 and sm_90
(tests/kernels/test_gluon_ws_aot.py), nothing more is known. Numerics and time are for the next H200 session:

    python -m pytest -q tests/gpu/test_gluon_ws_gpu.py && python -m bench.experiments.gluon_ws_decode --bench

Same inputs, outputs and semantics as the shipped `_gluon_sparse_decode_kernel` (config g32dqq) of
P1's flash_mla_sm120_mma.py (the line's overlay file: PATCHKIT_LINE, else the newest line, read once at import,
where the kernels are built from its helpers; harness/line_files.py says where the line keeps it): program = (16-head group, split, row), the
584-byte token layout (fp8 nope + bf16 rope + UE8M0 scales), the same split contract (part_out / part_lse
finished by the shipped `_combine_splits_kernel`), the same scale handling (QK on the raw fp8 value, the
UE8M0 factor on the [16, T] partial scores; PV on bf16(P) x bf16 2^(e-127+60); fp8 -> bf16 by bit
placement, x 2^-120). The helpers (indices, bit placement, scale factors, row finish, sizes) are the
overlay module's own, imported, not copied.

What changes is who does what inside a program (`gl.warp_specialize`):
  * a loader partition (LOAD_WARPS = 4 warps: the kernel is padded to whole warp groups anyway) owns the
    gather: per tile it waits until the MMA warps released the ring stage (mbarrier `empty`), cp.asyncs
    the rope and the scale word into the stage, converts this tile's fp8 bytes (already in registers) by
    bit placement and stores them as bf16 into the stage group by group, issuing the NEXT tile's LDG of
    each group right behind its store (so the gather of tile j + 1 flies while tile j is stored and
    consumed), waits for its cp.asyncs and arrives on `full`;
  * MMA_GROUPS groups of 4 MMA warps (mma.sync m16n8k16, the shipped warp layout) consume the ring: group
    g takes tiles g, g + MMA_GROUPS, ... (with 2 groups two tile chains are in flight per program); per
    tile: wait `full`, QK from q in shared memory and the bf16 stage through ldmatrix, softmax, PV, one
    named barrier of the group, arrive `empty`. They never issue a gather, an index load for the ring,
    or a conversion.
  * with 2 groups, group 1 leaves (m, l, acc) in its last ring stage (fp32, 32 KB) and group 0 merges
    them by log-sum-exp before the shipped epilogue.
Shared memory: q 16 KB + STAGES x (bf16 tile [8 x 32, 64] 32 KB + rope 4 KB + scales 256 B): STAGES = 2 is
all that fits 99 KB at 32-token tiles (3 stages = 124.75 KB), so the "3-4 deep ring" of the note holds at
16-token tiles only, which the 4-warp N split of the shipped MMA layout cannot use (8 tokens per warp).
"""
from __future__ import annotations

import argparse
import json

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mbarrier, mma_v2

from harness.line_files import overlay_file
from harness.mma_backend import load_mma_backend
from patchkit.lockfile import load_lock
from serving import REPO

# The backend as one namespace: 0.5.23 keeps the Gluon helpers in the Gluon kernel's own module
_m = load_mma_backend(overlay_file(load_lock(REPO / "pin.lock"), "flash_mla_sm120_mma.py"), "flash_mla_sm120_mma_ws")

# The shipped module's sizes and Gluon helpers (globals a Gluon kernel may read: constexprs, jit functions).
_NOPE_DIM = _m._NOPE_DIM
_TOKEN_DATA_BYTES = _m._TOKEN_DATA_BYTES
_TOKEN_SCALE_BYTES = _m._TOKEN_SCALE_BYTES
_D = _m._D
_LN2 = _m._LN2
_g_indices = _m._g_indices
_g_fp8_bits_to_bf16 = _m._g_fp8_bits_to_bf16
_g_bf16_scale = _m._g_bf16_scale
_g_pow2 = _m._g_pow2
_g_finish_rows = _m._g_finish_rows
_cta_barrier = _m._cta_barrier  # gl.thread_barrier in triton 3.6, gl.barrier in 3.8
_async_load = _m._async_load  # async_copy_global_to_shared in triton 3.6, async_load from 3.8 (3.9: only it)
# A shared-memory view as another type: ._reinterpret up to triton 3.8, .reinterpret from 3.9 (the private name is
# gone); a constexpr branch, so the build of the other releases is unchanged.
_PUBLIC_REINTERPRET = gl.constexpr(hasattr(gl.shared_memory_descriptor, "reinterpret"))

# (BLOCK_T, STAGES, MMA_GROUPS, LOAD_WARPS, LOAD_REGS, MMA_REGS): experiment configs, not shipped.
WS_CONFIGS = {
    "ws32g1": (32, 2, 1, 4, 152, 232),  # one MMA group: the loader only takes the gather off its warps
    "ws32g2": (32, 2, 2, 4, 136, 192),  # two MMA groups take alternate tiles (136 / 192: the split without spills)
}
BLOCK_H = gl.constexpr(16)  # heads per program (the MMA M)


@gluon.jit
def _ws_token_addr(idx, pos, n_main, main_u8, main_page, main_page_bytes, main_shift,
                   extra_u8, extra_page, extra_page_bytes, extra_shift,
                   HAS_EXTRA: gl.constexpr, POW2_PAGES: gl.constexpr):
    """Per token: (data byte pointer, scale byte pointer, valid); the shipped `_g_issue_tile`'s
    addressing (that helper also issues the copies, so it cannot be reused for a register gather)."""
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
    scale = base + (page * page_bytes + (page_size * _TOKEN_DATA_BYTES + off * _TOKEN_SCALE_BYTES))
    # The pools' alignment, which triton 3.8 loses through the select of the two bases (as `_g_issue_tile`).
    return gl.multiple_of(data, 16), gl.multiple_of(scale, 8), valid


@gluon.jit
def _ws_group_load(data, valid, G: gl.constexpr, LG: gl.constexpr):
    """fp8 group G of a tile, [T, 64] bytes (16 per thread; zeros for invalid tokens): LDG into registers."""
    c = gl.arange(0, 64, layout=gl.SliceLayout(0, LG))
    return gl.load(data[:, None] + (G * 64 + c)[None, :], mask=valid[:, None] & (c < 64)[None, :], other=0)


@gluon.jit
def _ws_loader(kbf_s, rope_s, sc_s, full, empty,
               row, start, end, n_main, n_tiles,
               main_u8, main_idx, main_idx_stride, main_page, main_page_bytes, main_shift,
               extra_u8, extra_idx, extra_idx_stride, extra_page, extra_page_bytes, extra_shift,
               HAS_EXTRA: gl.constexpr, POW2_PAGES: gl.constexpr,
               BLOCK_T: gl.constexpr, STAGES: gl.constexpr, LOAD_WARPS: gl.constexpr, PROBE: gl.constexpr):
    # One token -> thread mapping (lane // 4 + 8 * warp) in the nope (LG) and the rope / scale (LR) layouts,
    # so the per-token addresses convert between them without data movement (as in `_g_issue_tile`).
    LG: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [LOAD_WARPS, 1], [1, 0])
    LR: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [LOAD_WARPS, 1], [1, 0])
    TOK: gl.constexpr = gl.SliceLayout(1, LG)
    tok = gl.arange(0, BLOCK_T, layout=TOK)
    cr = gl.arange(0, 64, layout=gl.SliceLayout(0, LR))

    # The 7 fp8 groups travel as 7 [T, 64] register tensors (4 registers each at 4 warps), converted and
    # stored one group at a time: one [8, T, 64] tensor converted at once spilled at 88 registers.
    pos = start + tok
    idx = _g_indices(pos, row, n_main, end, main_idx, main_idx_stride, extra_idx, extra_idx_stride, HAS_EXTRA)
    data, scale, valid = _ws_token_addr(idx, pos, n_main, main_u8, main_page, main_page_bytes, main_shift,
                                        extra_u8, extra_page, extra_page_bytes, extra_shift, HAS_EXTRA, POW2_PAGES)
    r0 = _ws_group_load(data, valid, 0, LG)
    r1 = _ws_group_load(data, valid, 1, LG)
    r2 = _ws_group_load(data, valid, 2, LG)
    r3 = _ws_group_load(data, valid, 3, LG)
    r4 = _ws_group_load(data, valid, 4, LG)
    r5 = _ws_group_load(data, valid, 5, LG)
    r6 = _ws_group_load(data, valid, 6, LG)
    for j in range(0, n_tiles):
        s = j % STAGES
        # Stage s free: the MMA group that read tile j - STAGES is done (passes at once on the first use).
        mbarrier.wait(empty.index(s), ((j // STAGES) & 1) ^ 1)
        # PROBE 2 (MMA only): the ring is filled once with real tiles, then handed over without loads.
        if (PROBE != 2) or (j < STAGES):
            # Rope (bf16, used as is) and the 8 scale bytes of tile j: cp.async straight into the stage.
            dr = gl.convert_layout(data, gl.SliceLayout(1, LR), assert_trivial=True)
            vr = gl.convert_layout(valid, gl.SliceLayout(1, LR), assert_trivial=True)
            pr = (dr + _NOPE_DIM).to(gl.pointer_type(gl.bfloat16))[:, None] + cr[None, :]
            _async_load(rope_s.index(s), pr, mask=vr[:, None] & (cr < 64)[None, :])
            ds = gl.convert_layout(scale, gl.SliceLayout(1, LR), assert_trivial=True)
            _async_load(sc_s.index(s), ds.to(gl.pointer_type(gl.int64)), mask=vr)
            async_copy.commit_group()
            # Tile j + 1's addresses; its fp8 bytes are loaded group by group below, each LDG issued right after
            # the same group of tile j was converted and stored, so the next tile's loads fly during this store.
            pos += BLOCK_T
            idx = _g_indices(pos, row, n_main, end, main_idx, main_idx_stride, extra_idx, extra_idx_stride, HAS_EXTRA)
            data, scale, valid = _ws_token_addr(idx, pos, n_main, main_u8, main_page, main_page_bytes, main_shift,
                                                extra_u8, extra_page, extra_page_bytes, extra_shift, HAS_EXTRA,
                                                POW2_PAGES)
            kbf = kbf_s.index(s)
            kbf.slice(0 * BLOCK_T, BLOCK_T).store(_g_fp8_bits_to_bf16(r0))
            r0 = _ws_group_load(data, valid, 0, LG)
            kbf.slice(1 * BLOCK_T, BLOCK_T).store(_g_fp8_bits_to_bf16(r1))
            r1 = _ws_group_load(data, valid, 1, LG)
            kbf.slice(2 * BLOCK_T, BLOCK_T).store(_g_fp8_bits_to_bf16(r2))
            r2 = _ws_group_load(data, valid, 2, LG)
            kbf.slice(3 * BLOCK_T, BLOCK_T).store(_g_fp8_bits_to_bf16(r3))
            r3 = _ws_group_load(data, valid, 3, LG)
            kbf.slice(4 * BLOCK_T, BLOCK_T).store(_g_fp8_bits_to_bf16(r4))
            r4 = _ws_group_load(data, valid, 4, LG)
            kbf.slice(5 * BLOCK_T, BLOCK_T).store(_g_fp8_bits_to_bf16(r5))
            r5 = _ws_group_load(data, valid, 5, LG)
            kbf.slice(6 * BLOCK_T, BLOCK_T).store(_g_fp8_bits_to_bf16(r6))
            r6 = _ws_group_load(data, valid, 6, LG)
            async_copy.wait_group(0)
        # Every loader thread's stores and copies done, then one thread arrives (release at CTA scope).
        _cta_barrier()
        mbarrier.arrive(full.index(s))


@gluon.jit
def _ws_mma_tiles(q_s, kbf_s, rope_s, sc_s, full, empty,
                  row, start, end, n_main, n_tiles,
                  main_idx, main_idx_stride, extra_idx, extra_idx_stride, qk_scale_log2,
                  HAS_EXTRA: gl.constexpr, BLOCK_T: gl.constexpr, STAGES: gl.constexpr,
                  GROUP: gl.constexpr, MMA_GROUPS: gl.constexpr, PROBE: gl.constexpr):
    """The shipped g32dqq tile body (4 warps along N), on tiles GROUP, GROUP + MMA_GROUPS, ... of the ring.
    Returns (m_i, l_i, acc0..acc7) in the MMA layout; the nope accumulators carry 2^-60."""
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 4], instr_shape=[16, 8])
    A_OP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_OP: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    ROWS: gl.constexpr = gl.SliceLayout(1, MMA)
    COLS: gl.constexpr = gl.SliceLayout(0, MMA)
    P_COLS: gl.constexpr = gl.SliceLayout(0, A_OP)

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
    for j in range(GROUP, n_tiles, MMA_GROUPS):
        s = j % STAGES
        # Validity in the score layout (indices are L1/L2-hot), loaded before the wait.
        pos_c = start + j * BLOCK_T + tcol
        idx_c = _g_indices(pos_c, row, n_main, end, main_idx, main_idx_stride, extra_idx, extra_idx_stride, HAS_EXTRA)
        mbarrier.wait(full.index(s), (j // STAGES) & 1)
        if PROBE != 1:  # PROBE 1 (gather only): the MMA warps only hand the stage back
            kbf = kbf_s.index(s)
            rope = rope_s.index(s)
            sc = sc_s.index(s).load(COLS)
            sc_lo = sc.to(gl.int32)
            sc_hi = (sc >> 32).to(gl.int32)
            s_t = gl.zeros([BLOCK_H, BLOCK_T], gl.float32, MMA)
            for g in gl.static_range(7):
                kt = kbf.slice(g * BLOCK_T, BLOCK_T).permute((1, 0)).load(B_OP)
                s_g = mma_v2(q_s.slice(g * BLOCK_H, BLOCK_H).load(A_OP), kt, gl.zeros([BLOCK_H, BLOCK_T], gl.float32, MMA))
                if g < 4:
                    e = (sc_lo >> (8 * g)) & 0xFF
                else:
                    e = (sc_hi >> (8 * (g - 4))) & 0xFF
                s_t += (s_g * 1.329227995784916e36) * _g_pow2(e)[None, :]  # 2^120 from the bit placement
            s_t = mma_v2(q_s.slice(7 * BLOCK_H, BLOCK_H).load(A_OP), rope.permute((1, 0)).load(B_OP), s_t)

            valid = idx_c >= 0
            s_t = gl.where(valid[None, :], s_t * qk_scale_log2, float("-inf"))
            m_tile = gl.max(s_t, 1)
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
            p = gl.exp2(s_t - m_i[:, None])
            l_part += p
            p_a = gl.convert_layout(p.to(gl.bfloat16), A_OP)
            psc = sc_s.index(s).load(P_COLS)
            psc_lo = psc.to(gl.int32)
            psc_hi = (psc >> 32).to(gl.int32)
            acc7 = mma_v2(p_a, rope.load(B_OP), acc7)
            acc0 = mma_v2(p_a * _g_bf16_scale(psc_lo & 0xFF, True)[None, :], kbf.slice(0 * BLOCK_T, BLOCK_T).load(B_OP), acc0)
            acc1 = mma_v2(p_a * _g_bf16_scale((psc_lo >> 8) & 0xFF, True)[None, :], kbf.slice(1 * BLOCK_T, BLOCK_T).load(B_OP), acc1)
            acc2 = mma_v2(p_a * _g_bf16_scale((psc_lo >> 16) & 0xFF, True)[None, :], kbf.slice(2 * BLOCK_T, BLOCK_T).load(B_OP), acc2)
            acc3 = mma_v2(p_a * _g_bf16_scale((psc_lo >> 24) & 0xFF, True)[None, :], kbf.slice(3 * BLOCK_T, BLOCK_T).load(B_OP), acc3)
            acc4 = mma_v2(p_a * _g_bf16_scale(psc_hi & 0xFF, True)[None, :], kbf.slice(4 * BLOCK_T, BLOCK_T).load(B_OP), acc4)
            acc5 = mma_v2(p_a * _g_bf16_scale((psc_hi >> 8) & 0xFF, True)[None, :], kbf.slice(5 * BLOCK_T, BLOCK_T).load(B_OP), acc5)
            acc6 = mma_v2(p_a * _g_bf16_scale((psc_hi >> 16) & 0xFF, True)[None, :], kbf.slice(6 * BLOCK_T, BLOCK_T).load(B_OP), acc6)
        # The group's 4 warps are done reading stage s (named barrier of this partition), then release it.
        _cta_barrier()
        mbarrier.arrive(empty.index(s))
    return m_i, gl.sum(l_part, 1), acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7


@gluon.jit
def _ws_mma_default(q_s, kbf_s, rope_s, sc_s, full, empty, done, row, start, end, n_main, n_tiles,
                    main_idx, main_idx_stride, extra_idx, extra_idx_stride, qk_scale_log2,
                    HAS_EXTRA: gl.constexpr, BLOCK_T: gl.constexpr, STAGES: gl.constexpr,
                    MMA_GROUPS: gl.constexpr, PROBE: gl.constexpr):
    """Group 0 (the default partition); with 2 groups it merges group 1's state from the ring."""
    m_i, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = _ws_mma_tiles(
        q_s, kbf_s, rope_s, sc_s, full, empty, row, start, end, n_main, n_tiles,
        main_idx, main_idx_stride, extra_idx, extra_idx_stride, qk_scale_log2, HAS_EXTRA, BLOCK_T, STAGES,
        0, MMA_GROUPS, PROBE)
    if MMA_GROUPS == 2:
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 4], instr_shape=[16, 8])
        ROWS: gl.constexpr = gl.SliceLayout(1, MMA)
        mbarrier.wait(done.index(0), 0)
        if _PUBLIC_REINTERPRET:
            x = kbf_s.index(1).reinterpret(gl.float32, [8 * BLOCK_H, 64], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
            y = rope_s.index(1).reinterpret(gl.float32, [BLOCK_T * 32], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        else:
            x = kbf_s.index(1)._reinterpret(gl.float32, [8 * BLOCK_H, 64], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
            y = rope_s.index(1)._reinterpret(gl.float32, [BLOCK_T * 32], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        m_o = y.slice(0, BLOCK_H).load(ROWS)
        l_o = y.slice(BLOCK_H, BLOCK_H).load(ROWS)
        m_n = gl.maximum(m_i, m_o)
        a = gl.exp2(m_i - m_n)
        b = gl.exp2(m_o - m_n)
        l_i = l_i * a + l_o * b
        m_i = m_n
        a = a[:, None]
        b = b[:, None]
        acc0 = acc0 * a + x.slice(0 * BLOCK_H, BLOCK_H).load(MMA) * b
        acc1 = acc1 * a + x.slice(1 * BLOCK_H, BLOCK_H).load(MMA) * b
        acc2 = acc2 * a + x.slice(2 * BLOCK_H, BLOCK_H).load(MMA) * b
        acc3 = acc3 * a + x.slice(3 * BLOCK_H, BLOCK_H).load(MMA) * b
        acc4 = acc4 * a + x.slice(4 * BLOCK_H, BLOCK_H).load(MMA) * b
        acc5 = acc5 * a + x.slice(5 * BLOCK_H, BLOCK_H).load(MMA) * b
        acc6 = acc6 * a + x.slice(6 * BLOCK_H, BLOCK_H).load(MMA) * b
        acc7 = acc7 * a + x.slice(7 * BLOCK_H, BLOCK_H).load(MMA) * b
    return m_i, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7


@gluon.jit
def _ws_mma_worker(q_s, kbf_s, rope_s, sc_s, full, empty, done, row, start, end, n_main, n_tiles,
                   main_idx, main_idx_stride, extra_idx, extra_idx_stride, qk_scale_log2,
                   HAS_EXTRA: gl.constexpr, BLOCK_T: gl.constexpr, STAGES: gl.constexpr,
                   MMA_GROUPS: gl.constexpr, PROBE: gl.constexpr):
    """Group 1: odd tiles; leaves acc (fp32, 32 KB: the bf16 tile of stage 1) and m, l (in stage 1's rope
    buffer) in ring stage 1, which no later tile uses (STAGES = 2: the odd tiles are its), then arrives on
    `done`."""
    m_i, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = _ws_mma_tiles(
        q_s, kbf_s, rope_s, sc_s, full, empty, row, start, end, n_main, n_tiles,
        main_idx, main_idx_stride, extra_idx, extra_idx_stride, qk_scale_log2, HAS_EXTRA, BLOCK_T, STAGES,
        1, MMA_GROUPS, PROBE)
    if _PUBLIC_REINTERPRET:
        x = kbf_s.index(1).reinterpret(gl.float32, [8 * BLOCK_H, 64], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        y = rope_s.index(1).reinterpret(gl.float32, [BLOCK_T * 32], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    else:
        x = kbf_s.index(1)._reinterpret(gl.float32, [8 * BLOCK_H, 64], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        y = rope_s.index(1)._reinterpret(gl.float32, [BLOCK_T * 32], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    x.slice(0 * BLOCK_H, BLOCK_H).store(acc0)
    x.slice(1 * BLOCK_H, BLOCK_H).store(acc1)
    x.slice(2 * BLOCK_H, BLOCK_H).store(acc2)
    x.slice(3 * BLOCK_H, BLOCK_H).store(acc3)
    x.slice(4 * BLOCK_H, BLOCK_H).store(acc4)
    x.slice(5 * BLOCK_H, BLOCK_H).store(acc5)
    x.slice(6 * BLOCK_H, BLOCK_H).store(acc6)
    x.slice(7 * BLOCK_H, BLOCK_H).store(acc7)
    # Each row's m / l are replicated over the 4 warps (and 4 lanes): the copies store the same value.
    y.slice(0, BLOCK_H).store(m_i)
    y.slice(BLOCK_H, BLOCK_H).store(l_i)
    _cta_barrier()
    mbarrier.arrive(done.index(0))


@gluon.jit
def _gluon_ws_decode_kernel(
    q_ptr, stride_qb, stride_qh,
    main_u8, main_idx, main_idx_stride, main_len, main_topk, main_page, main_page_bytes, main_shift,
    extra_u8, extra_idx, extra_idx_stride, extra_len, extra_topk, extra_page, extra_page_bytes, extra_shift,
    sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr,
    H, num_splits, qk_scale_log2,
    HAS_MAIN_LEN: gl.constexpr, HAS_EXTRA: gl.constexpr, HAS_EXTRA_LEN: gl.constexpr, HAS_SINK: gl.constexpr,
    SPLIT: gl.constexpr, POW2_PAGES: gl.constexpr,
    BLOCK_T: gl.constexpr, STAGES: gl.constexpr, MMA_GROUPS: gl.constexpr, LOAD_WARPS: gl.constexpr,
    LOAD_REGS: gl.constexpr, MMA_REGS: gl.constexpr, PROBE: gl.constexpr,
):
    """Launch with num_warps=4 (the default partition, MMA group 0); the partitions add the rest."""
    gl.static_assert(STAGES % MMA_GROUPS == 0)
    gl.static_assert(MMA_GROUPS == 1 or STAGES == 2)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 4], instr_shape=[16, 8])
    ROWS: gl.constexpr = gl.SliceLayout(1, MMA)
    COLS: gl.constexpr = gl.SliceLayout(0, MMA)

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

    # q of the head group -> shared memory once, [8 groups x 16 heads, 64] bf16 (as the shipped Q_SMEM).
    QL: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    qr = gl.arange(0, 8 * BLOCK_H, layout=gl.SliceLayout(1, QL))
    qh = hg * BLOCK_H + qr % BLOCK_H
    qc = gl.arange(0, 64, layout=gl.SliceLayout(0, QL))
    q_vals = gl.load(q_ptr + row * stride_qb + (qh * stride_qh + (qr // BLOCK_H) * 64)[:, None] + qc[None, :],
                     mask=(qh < H)[:, None] & (qc < 64)[None, :], other=0.0)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [8 * BLOCK_H, 64],
                                    gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0]), q_vals)
    kbf_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 8 * BLOCK_T, 64],
                                      gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0]))
    rope_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_T, 64],
                                       gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0]))
    sc_s = gl.allocate_shared_memory(gl.int64, [STAGES, BLOCK_T],
                                     gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    done = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    mbarrier.init(done.index(0), count=1)
    # q stored and barriers initialised before any partition starts.
    _cta_barrier()

    # Argument tuples written inline: a constexpr parameter of this kernel inside a tuple held in a
    # variable reaches the partition as a tensor (triton 3.6), inline it stays a constexpr.
    if MMA_GROUPS == 2:
        m_i, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = gl.warp_specialize([
            (_ws_mma_default, (q_s, kbf_s, rope_s, sc_s, full, empty, done, row, start, end, n_main, n_tiles,
              main_idx, main_idx_stride, extra_idx, extra_idx_stride, qk_scale_log2,
              HAS_EXTRA, BLOCK_T, STAGES, MMA_GROUPS, PROBE)),
            (_ws_mma_worker, (q_s, kbf_s, rope_s, sc_s, full, empty, done, row, start, end, n_main, n_tiles,
              main_idx, main_idx_stride, extra_idx, extra_idx_stride, qk_scale_log2,
              HAS_EXTRA, BLOCK_T, STAGES, MMA_GROUPS, PROBE)),
            (_ws_loader, (kbf_s, rope_s, sc_s, full, empty, row, start, end, n_main, n_tiles,
              main_u8, main_idx, main_idx_stride, main_page, main_page_bytes, main_shift,
              extra_u8, extra_idx, extra_idx_stride, extra_page, extra_page_bytes, extra_shift,
              HAS_EXTRA, POW2_PAGES, BLOCK_T, STAGES, LOAD_WARPS, PROBE)),
        ], [4, LOAD_WARPS], [MMA_REGS, LOAD_REGS])
    else:
        m_i, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = gl.warp_specialize([
            (_ws_mma_default, (q_s, kbf_s, rope_s, sc_s, full, empty, done, row, start, end, n_main, n_tiles,
              main_idx, main_idx_stride, extra_idx, extra_idx_stride, qk_scale_log2,
              HAS_EXTRA, BLOCK_T, STAGES, MMA_GROUPS, PROBE)),
            (_ws_loader, (kbf_s, rope_s, sc_s, full, empty, row, start, end, n_main, n_tiles,
              main_u8, main_idx, main_idx_stride, main_page, main_page_bytes, main_shift,
              extra_u8, extra_idx, extra_idx_stride, extra_page, extra_page_bytes, extra_shift,
              HAS_EXTRA, POW2_PAGES, BLOCK_T, STAGES, LOAD_WARPS, PROBE)),
        ], [LOAD_WARPS], [LOAD_REGS])

    # The shipped epilogue (default warps only).
    heads = hg * BLOCK_H + gl.arange(0, BLOCK_H, layout=ROWS)
    head_ok = heads < H
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
    fn = f * 1.152921504606846976e18  # 2^60: the nope accumulators carry 2^-60 (bit placement)
    gl.store(o_ptrs + 0, (acc0 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 64, (acc1 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 128, (acc2 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 192, (acc3 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 256, (acc4 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 320, (acc5 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + 384, (acc6 * fn).to(o_ptrs.dtype.element_ty), mask=o_mask)
    gl.store(o_ptrs + _NOPE_DIM, (acc7 * f).to(o_ptrs.dtype.element_ty), mask=o_mask)


# Probes (timing only, outputs are wrong): "<config>:gather" times the loader alone (the MMA warps only hand
# stages back), "<config>:mma" the MMA warps alone (the ring is filled once, then handed over without loads).
PROBES = {"": 0, "gather": 1, "mma": 2}


def ws_constexprs(name: str, split: bool, **over) -> dict:
    """Constexprs of a WS config in the production specialisation (as tests/kernels/test_mma_aot.py's gluon ones);
    `name` may carry a probe suffix (":gather", ":mma")."""
    name, _, probe = name.partition(":")
    over = {"PROBE": PROBES[probe], **over}
    block_t, stages, groups, load_warps, load_regs, mma_regs = WS_CONFIGS[name]
    return {**dict(HAS_MAIN_LEN=True, HAS_EXTRA=True, HAS_EXTRA_LEN=True, HAS_SINK=True, SPLIT=split,
                   POW2_PAGES=True, BLOCK_T=block_t, STAGES=stages, MMA_GROUPS=groups, LOAD_WARPS=load_warps,
                   LOAD_REGS=load_regs, MMA_REGS=mma_regs, PROBE=0), **over}


def ws_sparse_decode(q, k_cache, indices, topk_length, attn_sink, softmax_scale, extra_k_cache=None,
                     extra_indices=None, extra_topk_length=None, config="ws32g1", num_splits=None):
    """`mma_sparse_decode`'s host side (the overlay's helpers) with the WS kernel; -> (out [B,1,H,512], lse [B,H,1])."""
    B, s_q, H, D = q.shape
    assert s_q == 1 and D == _D.value
    has_extra = extra_k_cache is not None and extra_indices is not None
    q3 = q.reshape(B, H, D)
    if q3.stride(-1) != 1:
        q3 = q3.contiguous()
    main_idx = _m._int32_rows(indices, B)
    main_u8 = _m._flat_u8(k_cache)
    main_page = k_cache.shape[1]
    if has_extra:
        extra_idx = _m._int32_rows(extra_indices, B)
        extra_u8 = _m._flat_u8(extra_k_cache)
        extra_page, extra_page_bytes = extra_k_cache.shape[1], extra_k_cache.stride(0)
    else:
        extra_idx, extra_u8 = main_idx, main_u8
        extra_page, extra_page_bytes = 1, 0
    width = main_idx.shape[1] + (extra_idx.shape[1] if has_extra else 0)
    main_shift, extra_shift = _m._page_shift(main_page), _m._page_shift(extra_page)
    head_groups = triton.cdiv(H, BLOCK_H.value)
    if num_splits is None:
        # One program per SM (84-88 KB of shared memory): g32dqq's split rule.
        num_splits = _m.pick_num_splits(B, head_groups, width, _m._num_sms(q.device.index), "g32dqq")
    split = num_splits > 1
    out = torch.empty(B, H, D, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(B, H, dtype=torch.float32, device=q.device)
    if split:
        part_out = torch.empty(B, num_splits, H, D, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(B, num_splits, H, dtype=torch.float32, device=q.device)
    else:
        part_out, part_lse = out, lse
    sink = attn_sink.float() if attn_sink is not None else lse
    const = ws_constexprs(
        config, split, HAS_MAIN_LEN=topk_length is not None, HAS_EXTRA=has_extra,
        HAS_EXTRA_LEN=has_extra and extra_topk_length is not None, HAS_SINK=attn_sink is not None,
        POW2_PAGES=main_shift is not None and extra_shift is not None)
    _gluon_ws_decode_kernel[(head_groups, num_splits, B)](
        q3, q3.stride(0), q3.stride(1),
        main_u8, main_idx, main_idx.stride(0), topk_length if topk_length is not None else main_idx,
        main_idx.shape[1], main_page, k_cache.stride(0), main_shift or 0,
        extra_u8, extra_idx, extra_idx.stride(0),
        extra_topk_length if (has_extra and extra_topk_length is not None) else main_idx,
        extra_idx.shape[1] if has_extra else 0, extra_page, extra_page_bytes, extra_shift or 0,
        sink, out, lse, part_out, part_lse, H, num_splits, softmax_scale * _m._LOG2E.value,
        **const, num_warps=4,
    )
    if split:
        grid, cbh, cbd, at_once, cwarps = _m.combine_launch(B, H, num_splits)
        _m._combine_splits_kernel[grid](part_out, part_lse, sink, out, lse, H, num_splits,
                                        HAS_SINK=attn_sink is not None, BLOCK_H=cbh, BLOCK_D=cbd,
                                        SPLITS_AT_ONCE=at_once, num_warps=cwarps)
    return out.unsqueeze(1), lse.unsqueeze(-1)


# ----------------------------------------------------------------------------- AOT (CPU)
def aot_rows(archs=(120, 90), names=None, cache_variants=None) -> list[dict]:
    """Compile every WS config (split and unsplit, both caches and one) as tests/kernels/test_mma_aot.py compiles the
    shipped kernels; with SASS counts of the MMA loop (count_instructions.py's method)."""
    from harness.aot import DIV16, MAIN_SIGNATURE, build_report, compile_kernel
    from bench.experiments.count_instructions import main_loop_mix, sass

    cache_variants = cache_variants or {"": {}, "/one-cache": dict(HAS_EXTRA=False, HAS_EXTRA_LEN=False)}
    rows = []
    for arch in archs:
        for name in names or WS_CONFIGS:
            for split in (False, True):
                for suffix, over in cache_variants.items():
                    k = compile_kernel(_gluon_ws_decode_kernel, MAIN_SIGNATURE, ws_constexprs(name, split, **over),
                                       DIV16, 4, 1, arch)
                    text = sass(k.asm["cubin"])
                    mix = main_loop_mix(text)
                    mix.pop("top", None)
                    rows.append({"arch": arch, "kernel": f"ws/{name}/split={split}{suffix}",
                                 "shared": k.metadata.shared, "num_warps": k.metadata.num_warps,
                                 **build_report(k),
                                 "wgmma": "wgmma" in k.asm["ptx"], "mma_sync": "mma.sync" in k.asm["ptx"],
                                 "setmaxnreg": "setmaxnreg" in k.asm["ptx"], "loop": mix})
    return rows


# ----------------------------------------------------------------------------- GPU timing
def bench(configs, heads=(8, 16), batches=(16, 64, 128)) -> list[dict]:
    """H200: WS configs next to the shipped g32dqq, same method as bench/kernels/bench_mma_decode.py (CUDA-graph
    replay over ROTATE input sets, shared pools, error vs its float64 reference)."""
    from bench.kernels import decode_timing as bm

    bm.print_header()   # command, GPU, versions, as every decode bench
    gen = torch.Generator(device="cuda").manual_seed(0)
    pools = {256: bm.make_pool(4096, 256, gen), 64: bm.make_pool(32768, 64, gen)}
    rows = []
    for H in heads:
        for B in batches:
            s = bm.Shape(B, H, 128, 512)
            inp = bm.Inputs(s, (pools[s.page], pools[s.extra_page]), gen)
            ref = bm.reference_f64(inp, 0)
            row = {"shape": s.name}
            for name in ["g32dqq", *configs]:
                def call(i, name=name):
                    a = inp.args(i)
                    if name.partition(":")[0] in WS_CONFIGS:
                        return ws_sparse_decode(*a[:5], bm.SCALE, *a[7:], config=name)
                    return _m.mma_sparse_decode(*a[:5], bm.SCALE, *a[7:], config=name)
                try:
                    row[f"{name}_err"] = bm.rel_err(call(0)[0], ref)
                    row[f"{name}_us"] = bm.graph_time_us([lambda i=i: call(i) for i in range(bm.ROTATE)], replays=10)
                except Exception as exc:  # report, keep going
                    row[f"{name}_fail"] = f"{type(exc).__name__}: {exc}"[:300]
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--aot", action="store_true", help="compile for sm_120 / sm_90, print rows as JSON (CPU)")
    ap.add_argument("--bench", action="store_true", help="time on the GPU next to g32dqq")
    ap.add_argument("--configs", default=",".join(WS_CONFIGS))
    ap.add_argument("--heads", default="8,16")
    ap.add_argument("--batches", default="16,64,128")
    args = ap.parse_args()
    names = [c for c in args.configs.split(",") if c]
    if args.bench:
        bench(names, heads=tuple(map(int, args.heads.split(","))), batches=tuple(map(int, args.batches.split(","))))
    else:
        print(json.dumps(aot_rows(names=names)))


if __name__ == "__main__":
    main()
