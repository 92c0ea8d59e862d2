"""P1: the MMA sparse-MLA decode kernel (overlay) against the pinned upstream oracle.

Numerics run the Triton kernels on the CPU under TRITON_INTERPRET=1 on small shapes and
compare with `_sm120_sparse_decode_fwd` loaded from the pinned flash_mla_sm120.py and with a
float64 reference, including inputs that stress the main loop: KV scales spread over
2^-15..2^0, peaked scores that move the running max mid-row (the lazy rescale), page sizes that
are not powers of two (the division path). The dispatcher tests run the real pinned (pristine / patched) dispatcher
in a subprocess and check which kernel the default route and the env switch reach. The op the entry point
registers (its fake shapes, its eager call) is tests/kernels/test_release_custom_op.py's, per line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from harness.upstream import load_kernel, load_module, release_custom_op
from serving.mma_decode_cases import REL_TOL, SCALE_STRIDE, TOKEN_STRIDE, make_case, reference_f64

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "overlay/0.5.14/sglang/srt/layers/attention/flash_mla_sm120_mma.py"
DISPATCHER = "sglang/srt/layers/attention/flash_mla_sm120.py"


@pytest.fixture(scope="module")
def mma():
    """The overlay under Triton's CPU interpreter, which reads TRITON_INTERPRET when a kernel
    is decorated and again when it runs; the variable is restored after this module."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield load_kernel(OVERLAY, "flash_mla_sm120_mma_interpreted")
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


@pytest.fixture(scope="module")
def oracle(pristine_root):
    return load_module(pristine_root / DISPATCHER, "pinned_flash_mla_sm120")._sm120_sparse_decode_fwd



def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()


def _run(mma, case, **overrides):
    kw = case.kwargs()
    return mma.mma_sparse_decode(
        kw["q"], kw["k_cache"], kw["indices"], kw["topk_length"], kw["attn_sink"],
        kw["softmax_scale"], kw["extra_k_cache"], kw["extra_indices"], kw["extra_topk_length"],
        **overrides,
    )


def _oracle(oracle, case):
    kw = case.kwargs()
    return oracle(
        kw["q"], kw["k_cache"], kw["indices"], kw["topk_length"], kw["attn_sink"], 512,
        kw["softmax_scale"], kw["extra_k_cache"], kw["extra_indices"], kw["extra_topk_length"],
    )


CASES = [
    # (B, H, topk, extra_topk, page, extra_page, sink_mode, lengths, splits)
    pytest.param(3, 8, 64, 64, 256, 64, "random", True, None, id="h8-window+extra-p256/64"),
    pytest.param(4, 16, 64, 128, 64, 64, "inf", True, 3, id="h16-sink-inf-split3-p64"),
    pytest.param(3, 64, 128, 0, 256, 0, "none", False, 2, id="h64-single-cache-nolen-split2"),
    pytest.param(2, 128, 64, 64, 256, 2, "random", True, 1, id="h128-c128-pool-p2"),
]


def _check(out, lse, case, oracle_fn):
    """Shapes, no unwritten element, output vs float64 and the pinned oracle, lse vs the oracle."""
    B, _, H, _ = case.q.shape
    assert out.shape == (B, 1, H, 512) and out.dtype == torch.bfloat16
    assert lse.shape == (B, H, 1) and lse.dtype == torch.float32
    assert not out.isnan().any(), "NaN or unwritten output element"

    ref_out, _ = reference_f64(case)
    assert _rel(out, ref_out) < REL_TOL

    with torch.no_grad():
        up_out, up_lse = _oracle(oracle_fn, case)
    assert _rel(out, up_out) < REL_TOL
    # Rows the oracle zeroes (no valid token, or a +inf sink) are exactly zero here too.
    zero_rows = up_out.float().abs().amax(-1) == 0
    assert (out.float().abs().amax(-1)[zero_rows] == 0).all()

    # lse: over both caches' valid tokens and the sink (the upstream Triton wrapper's value);
    # the oracle's lse excludes the sink.
    want = up_lse.double()
    if case.sink is not None:
        want = torch.logaddexp(want, case.sink.double().view(1, H, 1))
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(lse))
    assert torch.equal(want[~finite], lse.double()[~finite])
    assert (lse.double()[finite] - want[finite]).abs().max().item() < 1e-3


@pytest.mark.parametrize("B,H,topk,extra_topk,page,extra_page,sink_mode,lengths,splits", CASES)
def test_matches_pinned_oracle_and_float64(
    mma, oracle, poisoned_empty, B, H, topk, extra_topk, page, extra_page, sink_mode, lengths, splits
):
    case = make_case(
        B, H, topk, page_size=page, extra_topk=extra_topk, extra_page_size=extra_page or 64,
        seed=B * 1000 + H + topk, sink_mode=sink_mode, with_lengths=lengths,
    )
    out, lse = _run(mma, case, num_splits=splits)
    _check(out, lse, case, oracle)


def _shipped_config_names() -> list[str]:
    from harness.upstream import extract_functions

    return list(extract_functions(OVERLAY, ["MMA_CONFIGS"], {})["MMA_CONFIGS"])


@pytest.mark.parametrize("config", _shipped_config_names())
def test_every_shipped_config_matches_oracle(mma, oracle, poisoned_empty, config):
    """Each config by name, split and unsplit: pick_config sends these small CPU shapes to one
    config only, the others are exercised here (and at full shapes on the GPU)."""
    case = make_case(3, 32, 96, extra_topk=64, seed=61, sink_mode="inf")
    for splits in (None, 1):
        out, lse = _run(mma, case, config=config, num_splits=splits)
        _check(out, lse, case, oracle)


def test_dispatch_gluon_for_few_heads_many_rows(mma, oracle):
    """pick_config sends <= 16 heads with >= 16 rows to the Gluon kernel and everything else to a
    Triton config; under the CPU interpreter (no Gluon interpreter) such a shape runs on Triton."""
    assert mma.pick_config(16, 16, "3.6.0") == mma.pick_config(8, 128, "3.6.0") == mma.GLUON_CONFIG
    assert mma.GLUON_CONFIG in mma.GLUON_CONFIGS
    for heads, batch in ((16, 15), (8, 1), (64, 16), (64, 128), (32, 64)):
        assert mma.pick_config(heads, batch, "3.6.0") == mma.pick_triton_config(heads, batch) in mma.MMA_CONFIGS
    case = make_case(16, 8, 32, extra_topk=32, seed=71, sink_mode="random")
    out, lse = _run(mma, case)
    _check(out, lse, case, oracle)


def _spread_scales(pool, page_size, gen, lo=112, hi=127):
    """Rewrite the UE8M0 exponents of every token and column group to random values in [lo, hi]."""
    foot = pool[:, page_size * TOKEN_STRIDE : page_size * (TOKEN_STRIDE + SCALE_STRIDE)]
    foot = foot.reshape(pool.shape[0], page_size, SCALE_STRIDE)
    foot[..., :7] = torch.randint(lo, hi + 1, foot[..., :7].shape, generator=gen, dtype=torch.uint8)


# 32-token tiles (4 warps: irrelevant to the interpreter) give the test rows several tiles each.
SMALL_TILES = (16, 32, 4, 1)


def test_scales_spread_over_2e15(mma, oracle):
    """DSv4 KV scales range ~2^-15..2^0: every group's UE8M0 byte must reach its own columns."""
    case = make_case(3, 16, 64, page_size=64, extra_topk=64, seed=21, sink_mode="random")
    gen = torch.Generator().manual_seed(22)
    _spread_scales(case.pool, case.page_size, gen)
    _spread_scales(case.extra_pool, case.extra_page_size, gen)
    out, lse = _run(mma, case, config=SMALL_TILES)
    _check(out, lse, case, oracle)


def test_peaked_scores_move_the_running_max(mma, oracle):
    """q * 8: per-tile row maxima jump by far more than 2^8 between tiles of a 256-entry row, so
    the lazy rescale runs mid-row (and is skipped on other tiles)."""
    case = make_case(2, 16, 192, extra_topk=64, seed=51, sink_mode="random", edge_rows=False)
    case.q = (case.q.double() * 8).to(torch.bfloat16)
    out, lse = _run(mma, case, config=SMALL_TILES, num_splits=1)
    _check(out, lse, case, oracle)


@pytest.mark.parametrize("page,extra_page", [(48, 24), (256, 24)], ids=["both", "extra-only"])
def test_non_power_of_two_pages(mma, oracle, page, extra_page):
    """A page size that is not a power of two (in either cache) takes the division path."""
    case = make_case(3, 8, 64, page_size=page, extra_topk=64, extra_page_size=extra_page, seed=41)
    out, lse = _run(mma, case)
    _check(out, lse, case, oracle)


def test_rows_without_tokens_are_zero(mma, poisoned_empty):
    case = make_case(4, 16, 64, extra_topk=64, seed=7)  # row 0: lengths 0; row 1: all -1
    out, lse = _run(mma, case)
    assert out[:2].float().abs().max().item() == 0.0
    assert out[2:].float().abs().max().item() > 0.0
    # No token: the lse is the sink alone.
    assert torch.allclose(lse[:2, :, 0], case.sink.expand(2, 16))


@pytest.mark.parametrize("wide_up_to", [512, 0], ids=["all-splits-at-once", "one-split-per-step"])
def test_split_count_does_not_change_the_result(mma, monkeypatch, wide_up_to):
    # Both combine shapes (combine_launch switches on rows x heads; 0 forces the many-rows one).
    monkeypatch.setattr(mma, "_WIDE_COMBINE_MAX_ROW_HEADS", wide_up_to)
    case = make_case(2, 16, 256, extra_topk=128, seed=11, invalid_frac=0.3)
    base, base_lse = _run(mma, case, num_splits=1)
    for splits in (2, 5, 16):  # 16 splits of a 384-entry list: some splits get no token
        out, lse = _run(mma, case, num_splits=splits)
        assert _rel(out, base) < 1e-2
        assert (lse - base_lse).abs().max().item() < 1e-4


# ------------------------------------------------------------------------ dispatcher routing
def _route(root: Path, env: dict) -> dict:
    """Call the tree's flash_mla_with_kvcache_sm120 in a fresh interpreter; see _route_main."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_SM120")}
    full_env.update(env, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-m", __name__, "route", str(root)],
        capture_output=True, text=True, env=full_env, cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_default_route_pristine_is_the_per_head_kernel(pristine_root):
    """Red on the pinned release: the default backend is the per-head Triton kernel."""
    got = _route(pristine_root, {})
    assert got["called"] == ["triton"]


def test_default_route_patched_is_mma(patched_root):
    got = _route(patched_root, {})
    assert got["called"] == ["mma"]
    assert got["rel_err_vs_f64"] < REL_TOL


@pytest.mark.parametrize(
    "env,want",
    [
        ({"SGLANG_SM120_SPARSE_DECODE": "triton"}, "triton"),
        ({"SGLANG_SM120_SPARSE_DECODE": "torch"}, "torch"),
        ({"SGLANG_SM120_TRITON_FLASHMLA": "0"}, "torch"),
    ],
)
def test_env_switch_back_to_upstream(patched_root, env, want):
    assert _route(patched_root, env)["called"] == [want]


def _route_main(root: str) -> None:
    """Subprocess body: load the dispatcher under a bare `sglang` package, spy on the kernels. The MMA module
    registers its op with the tree's own register_custom_op (harness.upstream.release_custom_op; a CPU kernel
    for the interpreter)."""
    with release_custom_op(tree=Path(root), cpu_kernels=True):
        _route_in_tree(root)


def _route_in_tree(root: str) -> None:
    pkg = types.ModuleType("sglang")
    pkg.__path__ = [str(Path(root) / "sglang")]
    sys.modules["sglang"] = pkg
    import importlib

    disp = importlib.import_module("sglang.srt.layers.attention.flash_mla_sm120")
    called = []

    class Routed(Exception):
        pass

    # The per-head kernel autotunes with CUDA timing, so it cannot run here: record and stop.
    per_head = importlib.import_module("sglang.srt.layers.attention.flash_mla_sm120_triton")

    def per_head_spy(*args, **kwargs):
        called.append("triton")
        raise Routed

    per_head.flash_mla_sparse_decode_triton = per_head_spy

    torch_fwd = disp._sm120_sparse_decode_fwd

    def torch_spy(*args, **kwargs):
        called.append("torch")
        return torch_fwd(*args, **kwargs)

    disp._sm120_sparse_decode_fwd = torch_spy
    try:
        mma_mod = importlib.import_module("sglang.srt.layers.attention.flash_mla_sm120_mma")
    except ModuleNotFoundError:
        mma_mod = None
    if mma_mod is not None:
        mma_fn = mma_mod.flash_mla_sparse_decode_mma

        def mma_spy(*args, **kwargs):
            called.append("mma")
            return mma_fn(*args, **kwargs)

        mma_mod.flash_mla_sparse_decode_mma = mma_spy

    case = make_case(3, 16, 64, extra_topk=64, seed=3)
    kw = case.kwargs()
    result = {"called": called, "rel_err_vs_f64": None}
    try:
        out, _ = disp.flash_mla_with_kvcache_sm120(
            q=kw["q"], k_cache=kw["k_cache"], head_dim_v=512, softmax_scale=kw["softmax_scale"],
            indices=kw["indices"], topk_length=kw["topk_length"], attn_sink=kw["attn_sink"],
            extra_k_cache=kw["extra_k_cache"], extra_indices_in_kvcache=kw["extra_indices"],
            extra_topk_length=kw["extra_topk_length"],
        )
        result["rel_err_vs_f64"] = _rel(out, reference_f64(case)[0])
    except Routed:
        pass
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1] == "route":
        _route_main(sys.argv[2])


@pytest.mark.parametrize("version", ["3.7.1", "3.10.0", "4.0.0"])
def test_gluon_only_on_the_triton_releases_it_builds_on(mma, version):
    """Off GLUON_TRITON_RELEASES (3.6, 3.8 and 3.9, where the AOT gate, tests/kernels/test_mma_aot.py, builds it)
    every shape, Gluon's included, gets a Triton config: decided by the release, not by a failed compile."""
    assert all(mma.gluon_builds(v) for v in ("3.6.0", "3.6.1", "3.8.0", "3.9.0")) and not mma.gluon_builds(version)
    for heads, batch in ((16, 16), (8, 128), (16, 64), (8, 1), (64, 128)):
        assert mma.pick_config(heads, batch, version) == mma.pick_triton_config(heads, batch, version) in mma.MMA_CONFIGS


@pytest.mark.parametrize("version", ["3.7.1", "3.10.0", "4.0.0"])
def test_a_release_the_gate_has_not_passed_takes_the_config_with_the_most_headroom(mma, version):
    """Off TUNED_TRITON_RELEASES (the releases the AOT gate passed: 3.6, 3.8 and 3.9) every shape takes
    UNTUNED_RELEASE_CONFIG; on 3.6 the measured table, on 3.8 the same with 3.8's substitute, on 3.9 3.6's."""
    shapes = [(h, b) for h in (8, 16, 64, 128) for b in (1, 4, 16, 64, 128)]
    assert {mma.pick_config(h, b, version) for h, b in shapes} == {mma.UNTUNED_RELEASE_CONFIG}
    assert {mma.pick_triton_config(h, b, "3.6.0") for h, b in shapes} == {"h16_t16_w4", "h16_t64_w8", "h32_t32_w8"}
    # 3.8: the same table with its substitute (h16_t64_w8 spills on sm_90 there)
    assert {mma.pick_triton_config(h, b, "3.8.0") for h, b in shapes} == {"h16_t16_w4", "h16_t32_w8", "h32_t32_w8"}
    assert all(mma.pick_triton_config(h, b, "3.8.0") == mma.TUNED_TRITON_RELEASES["3.8"].get(
        mma.pick_triton_config(h, b, "3.6.0"), mma.pick_triton_config(h, b, "3.6.0")) for h, b in shapes)
    # 3.9: every config builds spill-free there, so 3.6's table as measured
    assert all(mma.pick_triton_config(h, b, "3.9.0") == mma.pick_triton_config(h, b, "3.6.0") for h, b in shapes)


def test_shape_thresholds_are_keyed_by_the_sm_count_they_were_measured_on(mma, monkeypatch):
    """pick_config's thresholds come from SHAPE_RULES by SM count: the measured 132-SM row (H200) by default and
    for any count without its own row (the nearest measured), so a card with another SM count can be re-tuned
    by adding its row without touching other cards' choices."""
    h200 = mma.SHAPE_RULES[132]
    assert mma.shape_rule() == mma.shape_rule(132) == mma.shape_rule(188) == h200   # one row measured so far
    assert mma.pick_config(16, 16, "3.6.0", sms=188) == mma.pick_config(16, 16, "3.6.0") == mma.GLUON_CONFIG
    other = mma.ShapeRule(small_tiles_max_row_heads=1024, wide_heads_min_row_heads=2048, gluon_max_heads=16,
                          gluon_min_batch=32)
    monkeypatch.setattr(mma, "SHAPE_RULES", {132: h200, 188: other})
    assert mma.shape_rule(188) == mma.shape_rule(170) == other and mma.shape_rule(150) == mma.shape_rule(160) == h200
    assert mma.pick_config(16, 16, "3.6.0", sms=188) == "h16_t16_w4"           # 188's row: Triton up to 32 rows
    assert mma.pick_config(16, 16, "3.6.0", sms=132) == mma.pick_config(16, 16, "3.6.0") == mma.GLUON_CONFIG
    assert mma.pick_triton_config(64, 16, "3.6.0", sms=188) == "h16_t16_w4"   # 1024 rows x heads: small tiles
    assert mma.pick_triton_config(64, 16, "3.6.0", sms=132) == "h32_t32_w8"
