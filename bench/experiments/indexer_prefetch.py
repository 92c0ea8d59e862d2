"""Experiment (issue 14): the P4 indexer loop with the next group's K tile prefetched into registers.

Same contract and numerics as overlay paged_mqa_logits_triton.py; built with num_stages=1 so Triton's
pipeliner leaves the loop alone: page indices are loaded two groups ahead and the K tile one group
ahead, both issued before the current group's MMA, so each load's latency overlaps a group of work.
`_paged_mqa_logits_prefetch2_kernel` keeps the next two groups in flight.

Measured on the H200 (2026-12-01, bench/runs/2026-12-01-indexer-mhc/2026-12-01-p4-sweep.txt): slower than the pipelined
loop of the overlay at every full-row size (batch 64, 1M tokens: 0.98-1.91 ms against 0.81 ms for
num_stages=5), so not shipped; kept for the record (bench/notes/indexer_mhc_notes.md).
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _paged_mqa_logits_prefetch_kernel(
    q_ptr, kv_ptr, scale_ptr, w_ptr, seq_lens_ptr, page_table_ptr, out_ptr,
    stride_qb, stride_qh, stride_wb, stride_pt, stride_out,
    max_seq_len, num_splits,
    H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, FILL_TAIL: tl.constexpr,
    PAGES_PER_ITER: tl.constexpr = 1,
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    seq_len = tl.minimum(tl.load(seq_lens_ptr + row), max_seq_len)
    n_pages = tl.cdiv(seq_len, PAGE)
    n_groups = tl.cdiv(n_pages, PAGES_PER_ITER)
    BLOCK: tl.constexpr = PAGES_PER_ITER * PAGE
    PAGE_B: tl.constexpr = PAGE * (D + 4)

    offs_h = tl.arange(0, H)
    offs_d = tl.arange(0, D)
    offs_r = tl.arange(0, BLOCK)
    slot = offs_r // PAGE
    offs_t = offs_r % PAGE
    out_row = out_ptr + row.to(tl.int64) * stride_out
    pt_row = page_table_ptr + row * stride_pt
    if split < n_groups:
        q = tl.load(q_ptr + row * stride_qb + offs_h[:, None] * stride_qh + offs_d[None, :])
        q_t = tl.trans(q.to(tl.float16))
        w = tl.load(w_ptr + row * stride_wb + offs_h)

        p0 = split * PAGES_PER_ITER + slot
        page = tl.load(pt_row + p0, mask=p0 < n_pages, other=0).to(tl.int64)
        k_next = tl.load(kv_ptr + page[:, None] * PAGE_B + offs_t[:, None] * D + offs_d[None, :],
                         mask=(p0 < n_pages)[:, None], other=0.0)
        sc_next = tl.load(scale_ptr + page * (PAGE_B // 4) + (PAGE * D // 4) + offs_t, mask=p0 < n_pages, other=0.0)
        p1 = (split + num_splits) * PAGES_PER_ITER + slot
        page_next = tl.load(pt_row + p1, mask=p1 < n_pages, other=0).to(tl.int64)
        for g in range(split, n_groups, num_splits):
            k = k_next
            scale = sc_next
            pn = (g + num_splits) * PAGES_PER_ITER + slot
            live = pn < n_pages
            k_next = tl.load(kv_ptr + page_next[:, None] * PAGE_B + offs_t[:, None] * D + offs_d[None, :],
                             mask=live[:, None], other=0.0)
            sc_next = tl.load(scale_ptr + page_next * (PAGE_B // 4) + (PAGE * D // 4) + offs_t, mask=live, other=0.0)
            pnn = (g + 2 * num_splits) * PAGES_PER_ITER + slot
            page_next = tl.load(pt_row + pnn, mask=pnn < n_pages, other=0).to(tl.int64)

            s = tl.dot(k.to(tl.float16), q_t)
            logit = tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1) * scale
            pos = g * BLOCK + offs_r
            logit = tl.where(pos < seq_len, logit, float("-inf"))
            tl.store(out_row + pos, logit, mask=pos < tl.minimum(n_pages * PAGE, max_seq_len))

    if FILL_TAIL:
        for p in tl.range(n_pages + split, tl.cdiv(max_seq_len, PAGE), num_splits):
            pos = p * PAGE + offs_t
            tl.store(out_row + pos, tl.full([BLOCK], float("-inf"), tl.float32), mask=(pos < max_seq_len) & (slot == 0))


@triton.jit
def _load_group(kv_ptr, scale_ptr, pt_row, g, n_pages, slot, offs_t, offs_d,
                D: tl.constexpr, PAGE: tl.constexpr, PAGES_PER_ITER: tl.constexpr):
    """K tile [PAGES_PER_ITER * PAGE, D] and scales of group g (zeros past the row's pages)."""
    PAGE_B: tl.constexpr = PAGE * (D + 4)
    p = g * PAGES_PER_ITER + slot
    live = p < n_pages
    page = tl.load(pt_row + p, mask=live, other=0).to(tl.int64)
    k = tl.load(kv_ptr + page[:, None] * PAGE_B + offs_t[:, None] * D + offs_d[None, :], mask=live[:, None], other=0.0)
    scale = tl.load(scale_ptr + page * (PAGE_B // 4) + (PAGE * D // 4) + offs_t, mask=live, other=0.0)
    return k, scale


@triton.jit
def _paged_mqa_logits_prefetch2_kernel(
    q_ptr, kv_ptr, scale_ptr, w_ptr, seq_lens_ptr, page_table_ptr, out_ptr,
    stride_qb, stride_qh, stride_wb, stride_pt, stride_out,
    max_seq_len, num_splits,
    H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, FILL_TAIL: tl.constexpr,
    PAGES_PER_ITER: tl.constexpr = 1,
):
    """As the prefetch kernel, with the K tiles of the next two groups in flight during each MMA."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    seq_len = tl.minimum(tl.load(seq_lens_ptr + row), max_seq_len)
    n_pages = tl.cdiv(seq_len, PAGE)
    n_groups = tl.cdiv(n_pages, PAGES_PER_ITER)
    BLOCK: tl.constexpr = PAGES_PER_ITER * PAGE
    offs_h = tl.arange(0, H)
    offs_d = tl.arange(0, D)
    offs_r = tl.arange(0, BLOCK)
    slot = offs_r // PAGE
    offs_t = offs_r % PAGE
    out_row = out_ptr + row.to(tl.int64) * stride_out
    pt_row = page_table_ptr + row * stride_pt
    if split < n_groups:
        q = tl.load(q_ptr + row * stride_qb + offs_h[:, None] * stride_qh + offs_d[None, :])
        q_t = tl.trans(q.to(tl.float16))
        w = tl.load(w_ptr + row * stride_wb + offs_h)
        k_a, sc_a = _load_group(kv_ptr, scale_ptr, pt_row, split, n_pages, slot, offs_t, offs_d, D, PAGE, PAGES_PER_ITER)
        k_b, sc_b = _load_group(kv_ptr, scale_ptr, pt_row, split + num_splits, n_pages, slot, offs_t, offs_d,
                                D, PAGE, PAGES_PER_ITER)
        for g in range(split, n_groups, num_splits):
            k = k_a
            scale = sc_a
            k_a = k_b
            sc_a = sc_b
            k_b, sc_b = _load_group(kv_ptr, scale_ptr, pt_row, g + 2 * num_splits, n_pages, slot, offs_t, offs_d,
                                    D, PAGE, PAGES_PER_ITER)
            s = tl.dot(k.to(tl.float16), q_t)
            logit = tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1) * scale
            pos = g * BLOCK + offs_r
            logit = tl.where(pos < seq_len, logit, float("-inf"))
            tl.store(out_row + pos, logit, mask=pos < tl.minimum(n_pages * PAGE, max_seq_len))

    if FILL_TAIL:
        for p in tl.range(n_pages + split, tl.cdiv(max_seq_len, PAGE), num_splits):
            pos = p * PAGE + offs_t
            tl.store(out_row + pos, tl.full([BLOCK], float("-inf"), tl.float32), mask=(pos < max_seq_len) & (slot == 0))


