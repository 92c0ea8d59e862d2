"""P3 on a GPU: the patched MHC-pre (fused bf16 kernel route) within the bf16 bound, eagerly, under
torch.compile (as `compile_in_capture_mode` wraps it during capture) and replayed in a CUDA graph."""
from __future__ import annotations

import pytest
import torch

from harness import dsv4_indexer_cases as C

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _bound_ratio(x, hc_fn, mixes):
    x64, w64 = x.flatten(1).double(), hc_fn.double()
    rsqrt = torch.rsqrt(x64.square().mean(-1, keepdim=True) + C.RMS_EPS)
    ref = (x64 @ w64.t()) * rsqrt
    bound = 2.0 ** -8 * rsqrt * (x64.abs() @ w64.abs().t())
    return ((mixes[:, 0].double() - ref).abs() / bound).max().item()


# 1 and 7 take the 16-token tile, 32 the 32-token one, 64 and 128 the 64-token one (launch_config)
@pytest.mark.parametrize("tokens", [1, 7, 32, 64, 128])
def test_fused_mhc_pre_eager_compiled_and_graph(patched_root, tokens, monkeypatch):
    monkeypatch.delenv("SGLANG_SM120_MHC_PRE_TRITON", raising=False)
    impl = C.hc_pre_torch_impl(patched_root, sm120=True)   # the sm_120 route, on whatever GPU runs the test
    gen = torch.Generator(device="cuda").manual_seed(6)
    x = torch.randn(tokens, C.HC_MULT, C.HIDDEN, generator=gen, device="cuda") * 4
    x = x.to(torch.bfloat16)
    hc_fn = torch.randn(C.MIX_HC, C.HC_DIM, generator=gen, device="cuda") * C.HC_DIM ** -0.5

    x_flat, mixes = impl(x, hc_fn)
    assert x_flat.dtype == torch.bfloat16 and torch.equal(x_flat, x.flatten(1))
    assert _bound_ratio(x, hc_fn, mixes) <= 1.0

    compiled = torch.compile(impl, fullgraph=True)
    _, mixes_c = compiled(x, hc_fn)
    assert torch.equal(mixes_c, mixes), "the custom op must run unchanged under torch.compile"

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, mixes_g = compiled(x, hc_fn)
    x.copy_(x.flip(0))
    graph.replay()
    torch.cuda.synchronize()
    assert _bound_ratio(x, hc_fn, mixes_g) <= 1.0


@pytest.mark.parametrize("tokens", [2, 100, 1024, 4096])
def test_both_routes_within_bound_repeatable_and_graph_safe(patched_root, tokens):
    """The eager one-launch route (arrival counters, last program adds the splits) at decode and
    prefill sizes: within the bound, the same bits on every call, counters back at 0; and the graph
    route, which the function takes by itself while a stream is being captured."""
    from harness.upstream import load_kernel

    overlay = load_kernel(patched_root / C.MHC_PRE_TRITON, "mhc_overlay_gpu_routes")
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = (torch.randn(tokens, C.HC_MULT, C.HIDDEN, generator=gen, device="cuda") * 3).to(torch.bfloat16)
    hc_fn = torch.randn(C.MIX_HC, C.HC_DIM, generator=gen, device="cuda") * C.HC_DIM ** -0.5
    flat = x.flatten(1)
    runs = [overlay.mhc_pre_mixes_triton(flat, hc_fn, C.RMS_EPS) for _ in range(3)]
    torch.cuda.synchronize()
    assert _bound_ratio(x, hc_fn, runs[0]) <= 1.0
    assert all(torch.equal(r, runs[0]) for r in runs), "one-launch route: results differ between calls"
    assert all(int(buf.abs().sum()) == 0 for buf in overlay._counters.values()), "arrival counters not reset"

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = overlay.mhc_pre_mixes_triton(flat, hc_fn, C.RMS_EPS)
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _bound_ratio(x, hc_fn, captured) <= 1.0
    direct = overlay.mhc_pre_mixes_triton(flat, hc_fn, C.RMS_EPS, route="graph")
    assert torch.equal(captured, direct), "inside a capture the function must take the graph route"
