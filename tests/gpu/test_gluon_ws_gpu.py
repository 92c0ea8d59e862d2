"""Issue 12 experiment on a GPU: the warp-specialised Gluon decode (bench/experiments/gluon_ws_decode.py,
written without a GPU) against the pinned oracle and float64 at the shapes the shipped Gluon configs are
checked at (tests/gpu/test_mma_decode_gpu.py's GLUON_SHAPES and check_against_oracle), split and unsplit."""
from __future__ import annotations

import pytest
import torch

from tests.gpu.test_mma_decode_gpu import GLUON_SHAPES, check_against_oracle, gluon_case

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("config", ["ws32g1", "ws32g2"])
@pytest.mark.parametrize("B,H,topk,extra_topk,page,extra_page,sink_mode", GLUON_SHAPES)
def test_ws_configs(oracle, poisoned_empty, config, B, H, topk, extra_topk, page, extra_page, sink_mode):
    from bench.experiments.gluon_ws_decode import ws_sparse_decode

    case, args = gluon_case(B, H, topk, extra_topk, page, extra_page, sink_mode)
    for splits in (None, 1, 3):
        out, lse = ws_sparse_decode(*args, config=config, num_splits=splits)
        torch.cuda.synchronize()
        assert out.shape == (B, 1, H, 512) and lse.shape == (B, H, 1)
        check_against_oracle(case, out, lse, oracle)
