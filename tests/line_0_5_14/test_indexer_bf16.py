"""P2 red/green: the indexer fallback's scoring matmul runs in bf16, within a bf16 error bound.

Runs the real `fp8_paged_mqa_logits_torch_sm120` (and the generic `fp8_paged_mqa_logits_torch`)
compiled out of the pristine and the patched indexer.py. On the patched tree the torch fallback
sits behind SGLANG_SM120_INDEXER_TRITON=0 (P4 routes the default to the Triton kernel).

Bound: FP8 -> bf16 is exact and the products accumulate in fp32, so the only new rounding is the
bmm's bf16 output, 2^-9 relative per head score s_h. Hence per logit
|logit - ref| <= 2^-8 * scale_t * sum_h |w_h * s_h| (one 2^-9 for the output, one for margin
over fp32 accumulation), against a float64 reference.
"""
from __future__ import annotations

import pytest
import torch

from harness import dsv4_indexer_cases as C

BOUND_REL = 2.0 ** -8
MIN_TOPK_OVERLAP = 0.99
TOPK = 512


def _case():
    gen = torch.Generator().manual_seed(2)
    batch, width = 4, 64                                   # max_seq_len 4096 c4 positions
    cache = C.make_indexer_cache(batch * width, gen)
    q_fp8, weight = C.make_indexer_query(batch, gen)
    page_table = torch.randperm(batch * width, generator=gen).view(batch, width).int()
    seq_lens = torch.tensor([4096, 4000, 2500, 700], dtype=torch.int32)
    return q_fp8, cache, weight, seq_lens, page_table, width * C.PAGE


def check_bf16_indexer(root, name):
    q_fp8, cache, weight, seq_lens, page_table, max_seq_len = _case()
    fn = C.indexer_function(root, name)
    lens = seq_lens.unsqueeze(-1) if name.endswith("_sm120") else seq_lens
    with C.MatmulDtypes() as probe:
        logits = fn(q_fp8, cache, weight, lens, page_table, None, max_seq_len, False)

    assert probe.calls, f"{name}: expected a matmul, found none"
    dtypes = {d for _, operands, _ in probe.calls for d in operands}
    assert dtypes == {torch.bfloat16}, f"{name}: expected bf16 matmul operands, found {probe.calls}"

    s, ref, kscale = C.reference_scores(q_fp8, cache, weight, page_table, max_seq_len)
    bound = C.logit_bound(s, weight, kscale, BOUND_REL)
    for b, length in enumerate(seq_lens.tolist()):
        err = (logits[b, :length].double() - ref[b, :length]).abs()
        worst = (err / bound[b, :length]).max().item()
        assert worst <= 1.0, f"{name} row {b}: error reaches {worst:.3f} of the 2^-8 bound"
        picked = set(torch.topk(logits[b, :length], TOPK).indices.tolist())
        exact = set(torch.topk(ref[b, :length], TOPK).indices.tolist())
        overlap = len(picked & exact) / TOPK
        assert overlap >= MIN_TOPK_OVERLAP, f"{name} row {b}: top-{TOPK} overlap {overlap:.4f}"


NAMES = ["fp8_paged_mqa_logits_torch_sm120", "fp8_paged_mqa_logits_torch"]


@pytest.mark.parametrize("name", NAMES)
def test_pristine_indexer_matmul_is_fp32(pristine_root, name):
    with pytest.raises(AssertionError, match="expected bf16 matmul operands"):
        check_bf16_indexer(pristine_root, name)


@pytest.mark.parametrize("name", NAMES)
def test_patched_indexer_matmul_is_bf16_within_bound(patched_root, name, monkeypatch):
    monkeypatch.setenv("SGLANG_SM120_INDEXER_TRITON", "0")
    check_bf16_indexer(patched_root, name)
