"""P1 on a GPU: full DSv4 shapes against the pinned oracle and float64, a CUDA-graph capture from a
cold start replayed with new inputs, and torch.compile(fullgraph=True) of a caller."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from harness.upstream import load_kernel
from serving.mma_decode_cases import LSE_ABS_TOL, REL_TOL, GraphInputs, make_case, reference_f64, rel_err as _rel

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "overlay/0.5.14/sglang/srt/layers/attention/flash_mla_sm120_mma.py"


@pytest.fixture(scope="module")
def mma():
    return load_kernel(OVERLAY, "flash_mla_sm120_mma")


def check_against_oracle(case, out, lse, oracle):
    kw = case.kwargs()
    assert not out.isnan().any(), "NaN or unwritten output element"
    ref, ref_lse = reference_f64(case)
    assert _rel(out, ref) < REL_TOL
    up_out, up_lse = oracle(kw["q"], kw["k_cache"], kw["indices"], kw["topk_length"], kw["attn_sink"], 512,
                            kw["softmax_scale"], kw["extra_k_cache"], kw["extra_indices"], kw["extra_topk_length"])
    assert _rel(out, up_out) < REL_TOL
    finite = torch.isfinite(ref_lse)
    assert torch.equal(finite, torch.isfinite(lse.cpu()))
    assert (lse.double().cpu()[finite] - ref_lse[finite]).abs().max().item() < LSE_ABS_TOL


SHAPES = [
    # B, H, topk, extra_topk, page, extra_page, sink_mode
    pytest.param(64, 64, 128, 512, 256, 64, "random", id="h64-b64-window128+c4-512"),
    pytest.param(128, 64, 128, 512, 256, 64, "inf", id="h64-b128-sink-inf"),
    pytest.param(5, 64, 128, 512, 256, 64, "random", id="h64-b5-split"),
    pytest.param(16, 8, 128, 512, 256, 64, "random", id="h8-b16"),
    pytest.param(16, 16, 128, 512, 256, 64, "inf", id="h16-b16"),
    pytest.param(32, 128, 128, 512, 256, 64, "random", id="h128-b32"),
    pytest.param(8, 64, 128, 1024, 256, 2, "random", id="h64-c128-pool"),
    pytest.param(64, 64, 2048, 0, 64, 64, "none", id="h64-b64-topk2048-p64"),
]


@pytest.mark.parametrize("B,H,topk,extra_topk,page,extra_page,sink_mode", SHAPES)
def test_full_shapes(mma, oracle, poisoned_empty, B, H, topk, extra_topk, page, extra_page, sink_mode):
    case = make_case(B, H, topk, page_size=page, extra_topk=extra_topk, extra_page_size=extra_page,
                     seed=B + H + topk, device="cuda", sink_mode=sink_mode, num_pages=64,
                     invalid_frac=0.15)
    out, lse = mma.flash_mla_sparse_decode_mma(**case.kwargs())
    torch.cuda.synchronize()
    assert out.shape == (B, 1, H, 512) and lse.shape == (B, H, 1)
    check_against_oracle(case, out, lse, oracle)


# Every Triton config by name at a full two-cache shape, split and unsplit: the table sends each shape to one config,
# and UNTUNED_RELEASE_CONFIG is what a Triton release off TUNED_TRITON_RELEASES (3.8) takes for every shape. This box
# runs triton 3.6, so this checks the configs' numerics, not 3.8's code generation.
@pytest.mark.parametrize("B,H", [(64, 8), (16, 64)], ids=["h8-b64", "h64-b16"])
def test_every_triton_config(mma, oracle, poisoned_empty, B, H):
    case = make_case(B, H, 128, page_size=256, extra_topk=512, extra_page_size=64, seed=B * H + 7, device="cuda",
                     sink_mode="random", num_pages=64, invalid_frac=0.15)
    kw = case.kwargs()
    args = [kw[k] for k in ("q", "k_cache", "indices", "topk_length", "attn_sink", "softmax_scale",
                            "extra_k_cache", "extra_indices", "extra_topk_length")]
    assert mma.UNTUNED_RELEASE_CONFIG in mma.MMA_CONFIGS
    for name in mma.MMA_CONFIGS:
        for splits in (None, 1):
            out, lse = mma.mma_sparse_decode(*args, config=name, num_splits=splits)
            torch.cuda.synchronize()
            check_against_oracle(case, out, lse, oracle)


# Every Gluon config at the shapes it may serve (8 / 16 heads, 64 in head groups of 16), split and
# unsplit, both caches and one, the c128 pool (page 2), sink +-inf and none: Gluon has no CPU
# interpreter, so this is its numerics check (tests/kernels/test_mma_aot.py checks that it compiles).
GLUON_SHAPES = [
    pytest.param(16, 8, 128, 512, 256, 64, "random", id="h8-b16"),
    pytest.param(64, 16, 128, 512, 256, 64, "inf", id="h16-b64-sink-inf"),
    pytest.param(5, 64, 128, 512, 256, 64, "random", id="h64-b5"),
    pytest.param(8, 16, 128, 1024, 256, 2, "random", id="h16-c128-pool"),
    pytest.param(32, 8, 2048, 0, 64, 64, "none", id="h8-b32-topk2048-p64"),
]


def gluon_case(B, H, topk, extra_topk, page, extra_page, sink_mode):
    """(case, the decode op's positional arguments) for one GLUON_SHAPES row."""
    case = make_case(B, H, topk, page_size=page, extra_topk=extra_topk, extra_page_size=extra_page,
                     seed=B + H + topk + 1, device="cuda", sink_mode=sink_mode, num_pages=64,
                     invalid_frac=0.15)
    kw = case.kwargs()
    return case, [kw[k] for k in ("q", "k_cache", "indices", "topk_length", "attn_sink", "softmax_scale",
                                  "extra_k_cache", "extra_indices", "extra_topk_length")]


@pytest.mark.parametrize("B,H,topk,extra_topk,page,extra_page,sink_mode", GLUON_SHAPES)
def test_gluon_configs(mma, oracle, poisoned_empty, B, H, topk, extra_topk, page, extra_page, sink_mode):
    case, args = gluon_case(B, H, topk, extra_topk, page, extra_page, sink_mode)
    assert mma.GLUON_CONFIGS
    for name in mma.GLUON_CONFIGS:
        for splits in (None, 3):
            out, lse = mma.mma_sparse_decode(*args, config=name, num_splits=splits)
            torch.cuda.synchronize()
            assert out.shape == (B, 1, H, 512) and lse.shape == (B, H, 1)
            check_against_oracle(case, out, lse, oracle)


@pytest.mark.parametrize("heads", [64, 16], ids=["h64-triton", "h16-gluon"])
def test_graph_capture_from_cold_start(heads):
    """First call of the op happens inside torch.cuda.graph, in a fresh process with an empty
    Triton cache; replays with new q / indices / lengths match float64. 24 rows: 64 heads take a
    Triton config, 16 heads the Gluon one (pick_config)."""
    env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="triton_cold_"))
    proc = subprocess.run([sys.executable, "-m", __name__, "cold-graph", str(heads)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    errs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(errs) == 3 and all(e < REL_TOL for e in errs), errs


def _cold_graph_main(heads: int):
    mma = load_kernel(OVERLAY, "flash_mla_sm120_mma_cold")
    cases = [make_case(24, heads, 128, extra_topk=512, seed=s, device="cuda", num_pages=32) for s in range(3)]
    static = GraphInputs(cases[0])     # KV pools are static in SGLang; the cases differ in pools too
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out, _ = mma.flash_mla_sparse_decode_mma(**static.kwargs)
    errs = []
    for case in cases:
        static.load(case)
        graph.replay()
        torch.cuda.synchronize()
        errs.append(_rel(out, reference_f64(case)[0]))
    print(json.dumps(errs))


def test_torch_compile_fullgraph(mma):
    case = make_case(16, 64, 128, extra_topk=512, seed=9, device="cuda", num_pages=32)
    kw = case.kwargs()

    def caller(q, k_cache, indices, topk_length, attn_sink, extra_k_cache, extra_indices, extra_topk_length):
        o, _ = mma.flash_mla_sparse_decode_mma(q * 1.0, k_cache, indices, topk_length, attn_sink, 512,
                                               kw["softmax_scale"], extra_k_cache, extra_indices, extra_topk_length)
        return o.squeeze(1).float() * 2.0

    torch._dynamo.reset()
    compiled = torch.compile(caller, fullgraph=True)
    args = [kw[k] for k in ("q", "k_cache", "indices", "topk_length", "attn_sink", "extra_k_cache",
                            "extra_indices", "extra_topk_length")]
    got = compiled(*args)
    want = caller(*args)
    assert torch.equal(got, want)
    assert _rel(got / 2, reference_f64(case)[0].squeeze(1)) < REL_TOL


if __name__ == "__main__":
    if sys.argv[1] == "cold-graph":
        _cold_graph_main(int(sys.argv[2]))
