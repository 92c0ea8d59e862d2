"""P3 red/green: on sm_120 the MHC-pre mixing linear runs in bf16, the RMS statistics in fp32; anywhere
else, and with SGLANG_SM120_MHC_PRE_TRITON=0, the release's own fp32 code runs, bit for bit.

Runs the real nested `hc_pre_torch_impl` of DeepseekV4DecoderLayer.hc_pre, compiled out of the
pristine and the patched deepseek_v4.py, at DSv4-Flash shapes (x [T, 4, 4096] bf16,
hc_fn [24, 16384] fp32), with the file's device probe answering sm_120 or not. The fused Triton kernel
its sm_120 route calls (overlay mhc_pre_triton.py) is run by Triton's interpreter, its tl.dot operand
dtypes recorded.

Bound: x is bf16 already, so the GEMM in bf16 rounds only hc_fn (2^-9 relative) and its output
(2^-9 relative); fp32 accumulation stays. Per mix, against float64:
|mix - ref| <= 2^-8 * rsqrt * sum_i |x_i * w_i|.
The RMS statistic must stay fp32 (checked through the same bound: a bf16 mean of 16384 squares
would move rsqrt, hence every mix, by up to 2^-9 relative on its own).
"""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"   # before anything imports triton: run kernels on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402

from harness import dsv4_indexer_cases as C  # noqa: E402

BOUND_REL = 2.0 ** -8


def _case(tokens=16):
    gen = torch.Generator().manual_seed(3)
    # Residual-stream magnitudes spread over two decades, plus a few large outlier channels.
    x = torch.randn(tokens, C.HC_MULT, C.HIDDEN, generator=gen)
    x = x * torch.logspace(-1, 1.3, tokens)[:, None, None]
    x[:, :, :8] *= 50
    hc_fn = torch.randn(C.MIX_HC, C.HC_DIM, generator=gen) * C.HC_DIM ** -0.5
    return x.to(torch.bfloat16), hc_fn


def _assert_within_bound(x, hc_fn, mixes):
    assert mixes.shape == (x.shape[0], 1, C.MIX_HC) and mixes.dtype == torch.float32
    x64, w64 = x.flatten(1).double(), hc_fn.double()
    rsqrt = torch.rsqrt(x64.square().mean(-1, keepdim=True) + C.RMS_EPS)
    ref = (x64 @ w64.t()) * rsqrt
    bound = BOUND_REL * rsqrt * (x64.abs() @ w64.abs().t())
    worst = ((mixes[:, 0].double() - ref).abs() / bound).max().item()
    assert worst <= 1.0, f"error reaches {worst:.3f} of the 2^-8 bound"


def check_bf16_mhc_pre(root):
    """The sm_120 route of the function: the fused kernel's bf16 dots, within the bound."""
    x, hc_fn = _case()
    fn = C.hc_pre_torch_impl(root, sm120=True)
    with C.InterpretedDots() as dots:
        x_flat, mixes = fn(x, hc_fn)

    assert dots.dtypes and set(dots.dtypes) == {("bf16", "bf16")}, \
        f"expected bf16 matmul operands (the fused kernel), found tl.dot operands {set(dots.dtypes) or 'none'}"
    # x_flat feeds `pre * x_flat` in the caller: it must carry x's values exactly.
    assert torch.equal(x_flat.double(), x.flatten(1).double())
    _assert_within_bound(x, hc_fn, mixes)


def upstream_outputs(root, sm120, monkeypatch, switch=None):
    if switch is None:
        monkeypatch.delenv("SGLANG_SM120_MHC_PRE_TRITON", raising=False)
    else:
        monkeypatch.setenv("SGLANG_SM120_MHC_PRE_TRITON", switch)   # read when the module flag is evaluated
    x, hc_fn = _case()
    return C.hc_pre_torch_impl(root, sm120=sm120)(x, hc_fn)


def check_fused_mhc_pre(root):
    """The CUDA route: the fused kernel the patched function calls for bf16 x on a GPU."""
    assert C.mhc_pre_file(root).is_file(), "expected the fused MHC-pre kernel in the tree"
    for tokens in (1, 5, 64):
        x, hc_fn = _case(tokens)
        with C.InterpretedDots() as dots:
            mixes = C.mhc_pre_kernel(root)(x.flatten(1), hc_fn, C.RMS_EPS)
        assert dots.dtypes and set(dots.dtypes) == {("bf16", "bf16")}, f"tl.dot operands: {set(dots.dtypes)}"
        _assert_within_bound(x, hc_fn, mixes)


def test_pristine_mhc_pre_matmul_is_fp32(pristine_root):
    with pytest.raises(AssertionError, match="expected bf16 matmul operands"):
        check_bf16_mhc_pre(pristine_root)


def test_patched_mhc_pre_matmul_is_bf16_within_bound(patched_root):
    check_bf16_mhc_pre(patched_root)


@pytest.mark.parametrize("sm120, switch", [(False, None), (False, "1"), (True, "0")],
                         ids=["not-sm120", "not-sm120-switch-on", "sm120-switch-off"])
def test_off_sm120_or_switched_off_is_upstream_bit_for_bit(pristine_root, patched_root, monkeypatch, sm120, switch):
    """Other devices (NPU/XPU, other CUDA GPUs, CPU) and SGLANG_SM120_MHC_PRE_TRITON=0 reach the release's
    fp32 code exactly: same dtypes, same bits as the pristine function."""
    pristine = upstream_outputs(pristine_root, sm120, monkeypatch, switch)
    patched = upstream_outputs(patched_root, sm120, monkeypatch, switch)
    for name, want, got in zip(("x_flat", "mixes"), pristine, patched):
        assert got.dtype == want.dtype == torch.float32, f"{name}: expected {want.dtype}, found {got.dtype}"
        assert torch.equal(got, want), f"{name} differs from the release's fp32 code"


def test_pristine_has_no_fused_mhc_pre(pristine_root):
    with pytest.raises(AssertionError, match="expected the fused MHC-pre kernel"):
        check_fused_mhc_pre(pristine_root)


def test_patched_fused_mhc_pre_is_bf16_within_bound(patched_root):
    check_fused_mhc_pre(patched_root)


@pytest.mark.parametrize("route", ["graph", "one-launch"])
def test_patched_fused_routes_split_k_within_bound(patched_root, route):
    """Both routes of the fused kernel with many K splits (programs_per_sm=24 on the interpreter's
    one "SM"): the graph route's second launch and the one-launch route's last-arriving program
    must add every split. The one-launch route runs twice: its arrival counters must be back at 0."""
    from harness.upstream import load_kernel

    overlay = load_kernel(C.mhc_pre_file(patched_root), "mhc_overlay_routes")
    for tokens in (3, 70):                     # one token tile / two tiles of 64
        x, hc_fn = _case(tokens)
        with C.InterpretedDots():           # the interpreter's own bf16 dot is wrong (see the helper)
            first = overlay.mhc_pre_mixes_triton(x.flatten(1), hc_fn, C.RMS_EPS, route=route, programs_per_sm=24)
            again = overlay.mhc_pre_mixes_triton(x.flatten(1), hc_fn, C.RMS_EPS, route=route, programs_per_sm=24)
        _assert_within_bound(x, hc_fn, first)
        assert torch.equal(first, again), "the same inputs must give the same bits"
    if route == "one-launch":
        assert all(int(buf.abs().sum()) == 0 for buf in overlay._counters.values()), "arrival counters not reset"


def test_host_launch_helpers_match_triton(patched_root):
    """The overlay sizes launches with plain-Python integer helpers (Triton's are slow constexpr functions
    on the host); they must give Triton's values, or the AOT-gated tile sizes would not be the ones run."""
    import triton
    from harness.upstream import load_kernel

    overlay = load_kernel(C.mhc_pre_file(patched_root), "mhc_overlay_helpers")
    for n in list(range(1, 300)) + [4095, 4096, 4097, 65536]:
        assert overlay._pow2_at_least(n) == triton.next_power_of_2(n), n
        for d in (1, 7, 16, 128):
            assert overlay._cdiv(n, d) == triton.cdiv(n, d), (n, d)
