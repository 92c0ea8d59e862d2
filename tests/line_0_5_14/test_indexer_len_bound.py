"""P4 red/green: the sm_120 indexer's work is bounded by the rows' real lengths.

Runs the real `fp8_paged_mqa_logits_torch_sm120` compiled out of the pristine and the patched
indexer.py (the patched one routes to the overlay Triton kernel, run by Triton's interpreter here),
with max_seq_len the whole page-table width as under CUDA graphs, and counts the KV-cache bytes the
call reads (torch ops and interpreted Triton loads alike). Length-bounded means at most
sum_b ceil(seq_len_b / 64) pages of 8448 bytes; the pristine fallback reads every page of the table.
Every valid logit must match the pristine fallback, and the output keep its static shape.
"""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"   # before anything imports triton: run kernels on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402

from harness import dsv4_indexer_cases as C  # noqa: E402

MATCH_REL = 2.0 ** -16   # fp32 vs fp32 in another summation order, relative to sum_h |w_h s_h|


def _case():
    gen = torch.Generator().manual_seed(4)
    batch, width = 4, 32                                   # "context" of 2048 c4 positions
    cache = C.make_indexer_cache(batch * width + 3, gen)
    q_fp8, weight = C.make_indexer_query(batch, gen)
    page_table = torch.randperm(batch * width + 3, generator=gen)[: batch * width].view(batch, width).int()
    seq_lens = torch.tensor([[1], [64], [65], [1500]], dtype=torch.int32)
    return q_fp8, cache, weight, seq_lens, page_table, width * C.PAGE


def _pages_needed(seq_lens):
    return sum(-(-n // C.PAGE) for n in seq_lens.flatten().tolist())


def check_len_bounded(root, pristine_root):
    q_fp8, cache, weight, seq_lens, page_table, max_seq_len = _case()
    fn = C.indexer_function(root)
    with C.KVBytesRead(cache) as probe:
        logits = fn(q_fp8, cache, weight, seq_lens, page_table, None, max_seq_len, False)

    assert logits.shape == (q_fp8.shape[0], max_seq_len) and logits.dtype == torch.float32
    budget = _pages_needed(seq_lens) * C.PAGE_BYTES
    assert probe.bytes <= budget, (
        f"expected at most {budget} KV bytes read (the rows' real lengths), found {probe.bytes} "
        f"(the whole table is {page_table.numel() * C.PAGE_BYTES})"
    )

    upstream = C.indexer_function(pristine_root)
    expected = upstream(q_fp8, cache, weight, seq_lens, page_table, None, max_seq_len, False)
    s, _, kscale = C.reference_scores(q_fp8, cache, weight, page_table, max_seq_len)
    tol = C.logit_bound(s, weight, kscale, MATCH_REL)
    for b, length in enumerate(seq_lens.flatten().tolist()):
        diff = (logits[b, :length].double() - expected[b, :length].double()).abs()
        assert (diff <= tol[b, :length]).all(), f"row {b}: logits differ from the upstream fallback"
        page_end = -(-length // C.PAGE) * C.PAGE
        assert torch.isneginf(logits[b, length:page_end]).all(), f"row {b}: expected -inf after seq_len"
    return logits


def test_pristine_indexer_reads_whole_table(pristine_root, monkeypatch):
    monkeypatch.delenv("SGLANG_SM120_INDEXER_TRITON", raising=False)
    with pytest.raises(AssertionError, match="KV bytes read"):
        check_len_bounded(pristine_root, pristine_root)


def test_patched_indexer_reads_only_real_lengths(patched_root, pristine_root, monkeypatch):
    monkeypatch.delenv("SGLANG_SM120_INDEXER_TRITON", raising=False)
    monkeypatch.delenv("SGLANG_SM120_INDEXER_FILL_TAIL", raising=False)
    check_len_bounded(patched_root, pristine_root)


def test_patched_fill_tail_writes_whole_row(patched_root, pristine_root, monkeypatch):
    monkeypatch.delenv("SGLANG_SM120_INDEXER_TRITON", raising=False)
    monkeypatch.setenv("SGLANG_SM120_INDEXER_FILL_TAIL", "1")
    logits = check_len_bounded(patched_root, pristine_root)
    _, _, _, seq_lens, _, _ = _case()
    for b, length in enumerate(seq_lens.flatten().tolist()):
        assert torch.isneginf(logits[b, length:]).all()


def test_patched_switch_restores_upstream_fallback(patched_root, monkeypatch):
    monkeypatch.setenv("SGLANG_SM120_INDEXER_TRITON", "0")
    q_fp8, cache, weight, seq_lens, page_table, max_seq_len = _case()
    with C.KVBytesRead(cache) as probe:
        C.indexer_function(patched_root)(q_fp8, cache, weight, seq_lens, page_table, None, max_seq_len, False)
    assert probe.torch_bytes == page_table.numel() * C.PAGE_BYTES and probe.triton_bytes == 0


def _overlay(root):
    from harness.upstream import load_module

    return load_module(root / C.TRITON_INDEXER, "indexer_overlay_configs")


@pytest.mark.parametrize("fill_tail", [False, True])
def test_every_config_reads_only_real_lengths_and_matches(patched_root, pristine_root, fill_tail, monkeypatch):
    """Every INDEXER_CONFIGS entry (any can be picked by batch and GPU), with 3 "SMs" so rows get
    several programs, each walking its pages round-robin."""
    q_fp8, cache, weight, seq_lens, page_table, max_seq_len = _case()
    overlay = _overlay(patched_root)
    monkeypatch.setattr(overlay, "_device_info", lambda device: (3, 9))
    upstream = C.indexer_function(pristine_root)
    expected = upstream(q_fp8, cache, weight, seq_lens, page_table, None, max_seq_len, False)
    s, _, kscale = C.reference_scores(q_fp8, cache, weight, page_table, max_seq_len)
    tol = C.logit_bound(s, weight, kscale, MATCH_REL)
    budget = _pages_needed(seq_lens) * C.PAGE_BYTES
    for name in overlay.INDEXER_CONFIGS:
        with C.KVBytesRead(cache) as probe:
            logits = overlay.fp8_paged_mqa_logits_triton(q_fp8, cache, weight, seq_lens, page_table, max_seq_len,
                                                         fill_tail=fill_tail, config=name)
        assert probe.bytes <= budget, f"{name}: expected at most {budget} KV bytes read, found {probe.bytes}"
        for b, length in enumerate(seq_lens.flatten().tolist()):
            diff = (logits[b, :length].double() - expected[b, :length].double()).abs()
            assert (diff <= tol[b, :length]).all(), f"{name}, row {b}: logits differ from the upstream fallback"
            end = max_seq_len if fill_tail else -(-length // C.PAGE) * C.PAGE
            assert torch.isneginf(logits[b, length:end]).all(), f"{name}, row {b}: expected -inf after seq_len"


def test_config_choice_follows_batch_and_gpu(patched_root):
    overlay = _overlay(patched_root)
    assert overlay.pick_config(1, 9) == overlay.SMALL_BATCH_CONFIG
    assert overlay.pick_config(64, 9) == overlay.DEFAULT_CONFIG
    assert overlay.pick_config(64, 12) == overlay.SMALL_BATCH_CONFIG    # sm_120: unmeasured, unchanged
    # Full rows: the rounded-down grid stays within programs_per_sm * SMs (one wave on the H200).
    assert overlay.num_splits(64, 4096, 4, 132, "down") * 64 <= 4 * 132
    assert overlay.num_splits(64, 4096, 4, 132, "up") == 9
