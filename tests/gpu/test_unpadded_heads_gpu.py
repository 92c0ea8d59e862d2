"""P7 on a GPU: the compiled MMA kernel gives the same real-head output for a TP rank's real heads as
for the same heads padded to 64 (junk q heads, zero sink), at full DSv4 shapes; and the real
MQALayer.forward of the pristine (padded) and patched (real heads) trees agree on the GPU.

Bound (see tests/line_0_5_14/test_unpadded_heads.py): the two calls differ in rounding only, so real-head
outputs agree to 2^-7 of their norm, and each is within the kernel's tolerance of float64.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.upstream import load_kernel
from serving.mma_decode_cases import REL_TOL, make_case, reference_f64

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "overlay/0.5.14/sglang/srt/layers/attention/flash_mla_sm120_mma.py"
SAME_REL = 2.0 ** -7      # padded against real heads


@pytest.fixture(scope="module")
def mma():
    return load_kernel(OVERLAY, "flash_mla_sm120_mma_p7")


def _rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("heads", [8, 16, 32])
@pytest.mark.parametrize("batch", [1, 16, 128])
def test_padded_and_real_heads_agree(mma, heads, batch):
    from tests import unpadded_heads_cases as P

    case = make_case(batch, heads, 128, extra_topk=512, seed=heads + batch, device="cuda", num_pages=16)
    kw = case.kwargs()
    q64, sink64 = P.pad_heads(case.q, case.sink, 64, torch.Generator().manual_seed(1))

    def call(q, sink):
        out, lse = mma.flash_mla_sparse_decode_mma(q, kw["k_cache"], kw["indices"], kw["topk_length"], sink, 512,
                                                   kw["softmax_scale"], kw["extra_k_cache"], kw["extra_indices"],
                                                   kw["extra_topk_length"])
        return out[:, :, :heads], lse[:, :heads]

    real, real_lse = call(case.q, case.sink)
    pad, pad_lse = call(q64, sink64)
    assert not real.isnan().any() and not pad.isnan().any()
    ref, _ = reference_f64(case)
    assert _rel(real, ref) < REL_TOL and _rel(pad, ref) < REL_TOL
    assert _rel(real, pad) < SAME_REL
    finite = torch.isfinite(real_lse)
    assert torch.equal(finite, torch.isfinite(pad_lse))
    assert (real_lse[finite] - pad_lse[finite]).abs().max().item() < 1e-3


@pytest.mark.parametrize("tp_size", [2, 4, 8])
def test_model_forward_real_heads_matches_padded(pristine_root, patched_root, tp_size):
    from tests import unpadded_heads_cases as P

    mine = P.run_forward(patched_root, patched_root, tp_size=tp_size, mode="decode", tokens=16, device="cuda")
    padded = P.run_forward(pristine_root, patched_root, tp_size=tp_size, mode="decode", tokens=16, device="cuda")
    local = 64 // tp_size
    assert mine.calls[0].heads == local and padded.calls[0].heads == 64
    assert _rel(mine.calls[0].out, padded.calls[0].out[:, :local]) < SAME_REL
    assert _rel(mine.out, padded.out) < 2.0 ** -6
