"""P1's two PRs (0.5.23) on a GPU: the first PR's Triton-only kernel file (derived from the overlay file by
upstream-pr.toml's held regions, tests/line_0_5_23/test_p1_stack.py) through 0.5.23's dispatcher with
SGLANG_SM120_FLASHMLA_BACKEND=mma against float64, at the shapes where the whole file picks the Gluon kernel and
at others; and the whole file (the follow-up PR's) at those Gluon shapes launching the Gluon kernel, where the
machine's Triton is one of its releases. The tree: P1_TREE (a slice, as tests/line_0_5_23/gpu/
test_p1_mma_backend_gpu.py says) or the patched tree from the pinned wheels."""
from __future__ import annotations

import pytest
import torch

from tests.line_0_5_23 import p1_tree as T
from tests.line_0_5_23.gpu.test_p1_mma_backend_gpu import REL_TOL, call, slice_root
from tests.line_0_5_23.test_p1_stack import triton_only
from serving.mma_decode_cases import make_case, reference_f64, rel_err

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# B, H: the first three are Gluon's shapes in the whole file (<= 16 heads from 16 rows)
SHAPES = [(16, 16), (64, 8), (128, 16), (1, 8), (32, 64)]


@pytest.fixture(scope="module")
def trees(request, tmp_path_factory):
    whole = slice_root() or request.getfixturevalue("patched_root")
    first = tmp_path_factory.mktemp("p1-triton-only")
    T.write_slice(whole, first)
    (first / T.MMA).write_text(triton_only())
    trees = {"whole": T.dispatcher(whole, "mma"), "first": T.dispatcher(first, "mma")}
    for module in trees.values():
        T.run_own_code(module)   # else both files run the code of whichever module registered the op first
    return trees


@pytest.mark.parametrize("B,H", SHAPES, ids=[f"h{h}-b{b}" for b, h in SHAPES])
def test_the_triton_only_kernel_matches_float64_and_the_whole_file(trees, B, H, monkeypatch):
    case = make_case(B, H, 128, extra_topk=512, seed=B * 7 + H, device="cuda", num_pages=max(8, B // 2))
    ref, _ = reference_f64(case)
    first_kernel, whole_kernel = trees["first"]._test_mma, trees["whole"]._test_mma
    spies = {}
    for name, module, kernel in (("first triton", first_kernel, "_mma_sparse_decode_kernel"),
                                 ("whole triton", whole_kernel, "_mma_sparse_decode_kernel"),
                                 ("whole gluon", whole_kernel, "_gluon_sparse_decode_kernel")):
        spies[name] = T.LaunchSpy(getattr(module, kernel))
        monkeypatch.setattr(module, kernel, spies[name])
    first, _ = call(trees["first"], case)
    whole, _ = call(trees["whole"], case)
    torch.cuda.synchronize()
    gluon_shape = H <= 16 and B >= 16 and whole_kernel.gluon_builds()
    print(f"B={B} H={H}: triton-only vs float64 {rel_err(first, ref):.2e}, "
          f"whole ({'gluon' if spies['whole gluon'].grids else 'triton'}) vs float64 {rel_err(whole, ref):.2e}")
    # each file ran its own kernel: the Triton-only file its Triton kernel, the whole file Gluon at Gluon's shapes
    assert len(spies["first triton"].grids) == 1
    assert len(spies["whole gluon"].grids) == (1 if gluon_shape else 0)
    assert len(spies["whole triton"].grids) == (0 if gluon_shape else 1)
    assert not hasattr(trees["first"]._test_mma, "_gluon_sparse_decode_kernel")
    assert rel_err(first, ref) < REL_TOL and rel_err(whole, ref) < REL_TOL
