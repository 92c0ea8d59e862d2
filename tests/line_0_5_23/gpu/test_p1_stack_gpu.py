"""P1's two PRs (0.5.23) on a GPU, one kernel per file: through 0.5.23's dispatcher with
SGLANG_SM120_FLASHMLA_BACKEND=mma, the follow-up's tree calls the Gluon module's entry at the shapes gluon_serves
takes (<= 16 heads from 16 rows, on a Triton release of GLUON_TRITON_RELEASES) and the Triton kernel's elsewhere;
the first PR's route (the same Triton file, no Gluon choice: gluon_serves answering no) runs the Triton kernel at
every shape; both match float64. The tree: P1_TREE (a slice, as tests/line_0_5_23/gpu/test_p1_mma_backend_gpu.py
says) or the patched tree from the pinned wheels."""
from __future__ import annotations

import pytest
import torch

from serving.mma_decode_cases import make_case, reference_f64, rel_err
from tests.line_0_5_23 import p1_tree as T
from tests.line_0_5_23.gpu.test_p1_mma_backend_gpu import REL_TOL, call, slice_root

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# B, H: the first three are the Gluon kernel's shapes (<= 16 heads from 16 rows)
SHAPES = [(16, 16), (64, 8), (128, 16), (1, 8), (32, 64)]


@pytest.fixture(scope="module")
def module(request):
    return T.dispatcher(slice_root() or request.getfixturevalue("patched_root"), "mma")


def _recorded(monkeypatch, owner, name, calls):
    entry = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a, **k: calls.append(name) or entry(*a, **k))


@pytest.mark.parametrize("B,H", SHAPES, ids=[f"h{h}-b{b}" for b, h in SHAPES])
@pytest.mark.parametrize("route", ["follow-up", "first"])
def test_each_kernel_serves_its_shapes_and_matches_float64(module, monkeypatch, route, B, H):
    gluon, mma = module._test_gluon, module._test_mma
    assert gluon is not None, "the tree has no Gluon module (the follow-up's patch)"
    case = make_case(B, H, 128, extra_topk=512, seed=B * 7 + H, device="cuda", num_pages=max(8, B // 2))
    ref, _ = reference_f64(case)
    if route == "first":
        monkeypatch.setattr(gluon, "gluon_serves", lambda *a: False)
    calls = []
    _recorded(monkeypatch, gluon, "flash_mla_sparse_decode_mma_gluon", calls)
    _recorded(monkeypatch, mma, "flash_mla_sparse_decode_mma", calls)
    out, _ = call(module, case)
    torch.cuda.synchronize()
    gluon_shape = route == "follow-up" and H <= 16 and B >= 16 and gluon.gluon_builds()
    print(f"{route} B={B} H={H}: {calls} vs float64 {rel_err(out, ref):.2e}")
    assert calls == ["flash_mla_sparse_decode_mma_gluon" if gluon_shape else "flash_mla_sparse_decode_mma"]
    assert rel_err(out, ref) < REL_TOL
