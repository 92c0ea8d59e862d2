"""v5 candidate of the P1 MMA decode (bench/experiments/mma_decode_v5.py) against the pinned oracle.

Same method as tests/test_mma_decode.py: the Triton kernels run on the CPU under
TRITON_INTERPRET=1 on small shapes and are compared with `_sm120_sparse_decode_fwd` from the
pinned flash_mla_sm120.py and with a float64 reference. Extra cases stress what v5 changes:
KV scales spread over 2^-15..2^0 (fp16 K relative to the largest scale), q beyond the fp16 range (the
per-head power-of-two prescale), a page size that is not a power of two (division path).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from mma_decode_cases import SCALE_STRIDE, TOKEN_STRIDE, make_case, reference_f64  # noqa: E402
from test_mma_decode import CASES, REL_TOL, _oracle, _rel  # noqa: E402,F401
from test_mma_decode import oracle  # noqa: E402,F401  (fixture)
from upstream import load_module  # noqa: E402

V5 = REPO / "bench/experiments/mma_decode_v5.py"


@pytest.fixture(scope="module")
def v5():
    """v5 (and the shipped module it imports helpers from) under Triton's CPU interpreter."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    for name in ("flash_mla_sm120_mma_for_v5", "mma_decode_v5_interpreted"):
        sys.modules.pop(name, None)
    try:
        yield load_module(V5, "mma_decode_v5_interpreted")
    finally:
        for name in ("flash_mla_sm120_mma_for_v5", "mma_decode_v5_interpreted"):
            sys.modules.pop(name, None)
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


def _run(mod, case, **overrides):
    kw = case.kwargs()
    return mod.mma_sparse_decode(
        kw["q"], kw["k_cache"], kw["indices"], kw["topk_length"], kw["attn_sink"],
        kw["softmax_scale"], kw["extra_k_cache"], kw["extra_indices"], kw["extra_topk_length"],
        **overrides,
    )


def _check(out, lse, case, oracle_fn):
    B, _, H, _ = case.q.shape
    assert out.shape == (B, 1, H, 512) and out.dtype == torch.bfloat16
    assert lse.shape == (B, H, 1) and lse.dtype == torch.float32
    assert not out.isnan().any(), "NaN or unwritten output element"
    ref_out, _ = reference_f64(case)
    assert _rel(out, ref_out) < REL_TOL
    with torch.no_grad():
        up_out, up_lse = _oracle(oracle_fn, case)
    assert _rel(out, up_out) < REL_TOL
    zero_rows = up_out.float().abs().amax(-1) == 0
    assert (out.float().abs().amax(-1)[zero_rows] == 0).all()
    want = up_lse.double()
    if case.sink is not None:
        want = torch.logaddexp(want, case.sink.double().view(1, H, 1))
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(lse))
    assert torch.equal(want[~finite], lse.double()[~finite])
    assert (lse.double()[finite] - want[finite]).abs().max().item() < 1e-3


@pytest.mark.parametrize("B,H,topk,extra_topk,page,extra_page,sink_mode,lengths,splits", CASES)
def test_matches_pinned_oracle_and_float64(
    v5, oracle, poisoned_empty, B, H, topk, extra_topk, page, extra_page, sink_mode, lengths, splits
):
    case = make_case(
        B, H, topk, page_size=page, extra_topk=extra_topk, extra_page_size=extra_page or 64,
        seed=B * 1000 + H + topk, sink_mode=sink_mode, with_lengths=lengths,
    )
    out, lse = _run(v5, case, num_splits=splits)
    _check(out, lse, case, oracle)


def _spread_scales(pool, page_size, gen, lo=112, hi=127):
    """Rewrite the UE8M0 exponents of every token and column group to random values in [lo, hi]."""
    foot = pool[:, page_size * TOKEN_STRIDE : page_size * (TOKEN_STRIDE + SCALE_STRIDE)]
    foot = foot.reshape(pool.shape[0], page_size, SCALE_STRIDE)
    foot[..., :7] = torch.randint(lo, hi + 1, foot[..., :7].shape, generator=gen, dtype=torch.uint8)


# (F16_REL, LAZY_RESCALE): every main-loop path of the kernel.
PATHS = [
    pytest.param(True, True, id="fp16-relative-K-lazy-rescale"),
    pytest.param(True, False, id="fp16-relative-K-rescale-every-tile"),
    pytest.param(False, True, id="bf16-K-lazy-rescale"),
    pytest.param(False, False, id="bf16-K-rescale-every-tile"),
]


@pytest.mark.parametrize("f16_rel,lazy", PATHS)
def test_scales_spread_over_2e15(v5, oracle, f16_rel, lazy):
    """DSv4 KV scales range ~2^-15..2^0: fp16 K = fp8 * 2^(e - e_max) must keep them."""
    case = make_case(3, 16, 64, page_size=64, extra_topk=64, seed=21, sink_mode="random")
    gen = torch.Generator().manual_seed(22)
    _spread_scales(case.pool, case.page_size, gen)
    _spread_scales(case.extra_pool, case.extra_page_size, gen)
    out, lse = _run(v5, case, config=(16, 32, 4, 1, f16_rel, lazy))
    _check(out, lse, case, oracle)


def _rescale_tokens(pool, page_size, gen, std, exp):
    """Every token of the pool: fp8 values ~ N(0, std) and every UE8M0 exponent = exp."""
    body = pool[:, : page_size * TOKEN_STRIDE].view(pool.shape[0], page_size, TOKEN_STRIDE)
    nope = (torch.randn(pool.shape[0], page_size, 448, generator=gen) * std).clamp(-440, 440)
    body[..., :448] = nope.to(torch.float8_e4m3fn).view(torch.uint8)
    foot = pool[:, page_size * TOKEN_STRIDE : page_size * (TOKEN_STRIDE + SCALE_STRIDE)]
    foot.reshape(pool.shape[0], page_size, SCALE_STRIDE)[..., :7] = exp


@pytest.mark.parametrize("f16_rel,lazy", PATHS)
def test_scale_reference_moves_mid_row(v5, oracle, f16_rel, lazy):
    """The extra cache (after the main one in each row's list) holds values of the same size as
    the main cache's but with 2^10 larger scales: e_run rises mid-row while the row maxima do
    not jump, so the accumulators must move to the new K scale reference by themselves."""
    case = make_case(2, 16, 96, extra_topk=96, seed=61, sink_mode="random", edge_rows=False, invalid_frac=0.0)
    gen = torch.Generator().manual_seed(62)
    _rescale_tokens(case.pool, case.page_size, gen, std=100.0, exp=117)
    _rescale_tokens(case.extra_pool, case.extra_page_size, gen, std=100.0 / 1024, exp=127)
    out, lse = _run(v5, case, config=(16, 32, 4, 1, f16_rel, lazy), num_splits=1)
    _check(out, lse, case, oracle)


@pytest.mark.parametrize("f16_rel,lazy", PATHS)
def test_peaked_scores_move_the_running_max(v5, oracle, f16_rel, lazy):
    """q * 8: per-tile row maxima jump by far more than 2^8 between tiles of a 256-entry row, so
    the lazy rescale branch runs mid-row (and is skipped on other tiles)."""
    case = make_case(2, 16, 192, extra_topk=64, seed=51, sink_mode="random", edge_rows=False)
    case.q = (case.q.double() * 8).to(torch.bfloat16)
    out, lse = _run(v5, case, config=(16, 32, 4, 1, f16_rel, lazy), num_splits=1)
    _check(out, lse, case, oracle)


@pytest.mark.parametrize("f16_rel,lazy", PATHS[:1] + PATHS[2:3])
def test_q_beyond_fp16_range(v5, oracle, f16_rel, lazy):
    """q * 2^14 (|q| up to ~2^17 > fp16 max) with softmax_scale / 2^14: the same attention, exact
    in bf16; the per-head prescale keeps the fp16 q operand finite (bf16 path: unaffected)."""
    case = make_case(3, 16, 64, extra_topk=64, seed=31, sink_mode="none")
    case.q = (case.q.double() * 2.0**14).to(torch.bfloat16)
    case.softmax_scale = case.softmax_scale / 2.0**14
    assert case.q.float().abs().max().item() > 65504
    out, lse = _run(v5, case, config=(16, 32, 4, 1, f16_rel, lazy))
    _check(out, lse, case, oracle)


def test_non_power_of_two_pages(v5, oracle):
    """Page sizes that are not powers of two take the division path (POW2_PAGES=False)."""
    case = make_case(3, 8, 64, page_size=48, extra_topk=64, extra_page_size=24, seed=41)
    out, lse = _run(v5, case)
    _check(out, lse, case, oracle)


def test_split_count_does_not_change_the_result(v5):
    case = make_case(2, 16, 256, extra_topk=128, seed=11, invalid_frac=0.3)
    base, base_lse = _run(v5, case, num_splits=1)
    for splits in (2, 5):
        out, lse = _run(v5, case, num_splits=splits)
        assert _rel(out, base) < 1e-2
        assert (lse - base_lse).abs().max().item() < 1e-4


def test_custom_op_entry_point(v5):
    case = make_case(3, 8, 64, extra_topk=64, seed=5)
    out, lse = v5.flash_mla_sparse_decode_mma(**case.kwargs())
    direct, direct_lse = _run(v5, case)
    assert torch.equal(out, direct) and torch.equal(lse, direct_lse)
