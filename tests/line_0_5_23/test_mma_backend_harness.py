"""harness/mma_backend.py on 0.5.23's two kernel files: one namespace with both config tables, whose
mma_sparse_decode runs the Triton kernel for a Triton config (here under Triton's interpreter, against float64),
hands a Gluon config to the Gluon module's entry (a recording stub: the Gluon kernel needs a GPU), and, given no
config, routes as the dispatcher does (on the CPU: the Triton kernel)."""
from __future__ import annotations

import pytest

from harness.mma_backend import load_mma_backend
from serving.mma_decode_cases import make_case, reference_f64, rel_err
from tests.conftest import REPO

KERNEL = REPO / "overlay/0.5.23/sglang/kernels/ops/attention/flash_mla_sm120_mma.py"


@pytest.fixture(scope="module")
def backend():
    return load_mma_backend(KERNEL, "flash_mla_sm120_mma_harness_test")


def _args(case):
    kw = case.kwargs()
    return tuple(kw[k] for k in ("q", "k_cache", "indices", "topk_length", "attn_sink", "softmax_scale",
                                 "extra_k_cache", "extra_indices", "extra_topk_length"))


def test_both_tables_and_both_modules(backend):
    assert "h16_t16_w4" in backend.MMA_CONFIGS and "g32dqq" in backend.GLUON_CONFIGS
    assert backend.triton.__file__ == str(KERNEL) and backend.gluon.__file__.endswith("flash_mla_sm120_mma_gluon.py")
    assert backend.pick_config(8, 64, "3.8.0") == "g32dqq" and backend.pick_config(64, 1, "3.8.0") == "h16_t16_w4"
    # a Gluon config's split rule is its own table's
    assert backend.pick_num_splits(8, 1, 1 << 20, 132, "g32s2") == 2 * 132 // 8      # two programs per SM
    assert backend.pick_num_splits(8, 1, 1 << 20, 132, "g32dqq") == 132 // 8         # one
    assert backend.pick_num_splits(1, 1, 4096, 132, "g32s2") == 4096 // 64            # the smallest slice


@pytest.mark.parametrize("config", [None, "h16_t16_w4", (16, 32, 4, 1)])
def test_a_triton_config_or_none_runs_the_triton_kernel(backend, monkeypatch, config):
    ran = []
    monkeypatch.setattr(backend.gluon, "gluon_sparse_decode", lambda *a, **k: ran.append("gluon"))
    case = make_case(B=3, H=16, topk=32, extra_topk=16, page_size=64, num_pages=2, seed=4)
    out, _ = backend.mma_sparse_decode(*_args(case), config=config)
    ref, _ = reference_f64(case)
    assert ran == [] and rel_err(out.float(), ref) < 2.0 ** -7


@pytest.mark.parametrize("config", ["g32dqq", (32, 2, 4, True, True, True)])
def test_a_gluon_config_goes_to_the_gluon_entry(backend, monkeypatch, config):
    ran = []
    monkeypatch.setattr(backend.gluon, "gluon_sparse_decode", lambda *a, **k: ran.append(k) or ("out", "lse"))
    case = make_case(B=3, H=8, topk=32, extra_topk=0, page_size=64, num_pages=2, seed=5)
    assert backend.mma_sparse_decode(*_args(case), config=config, num_splits=2) == ("out", "lse")
    assert ran == [{"config": config, "num_splits": 2}]
