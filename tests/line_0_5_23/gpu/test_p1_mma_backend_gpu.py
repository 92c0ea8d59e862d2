"""P1 on the 0.5.23 line, on a GPU: `SGLANG_SM120_FLASHMLA_BACKEND=mma` through 0.5.23's own entry point
(flash_mla_with_kvcache_sm120, its keyword call signature) against 0.5.23's per-head Triton kernel
(`SGLANG_SM120_FLASHMLA_BACKEND=triton`, same entry point) and float64, at the shapes TP = 8 / 4 / 1 decode with
(8 / 16 / 64 heads), batch 1-128 (above 64 rows upstream's flashinfer backend would switch to its prefill kernel;
mma keeps its own), window + compressed caches and top-k 2048; then a CUDA-graph capture from a cold start.

The tree: P1_TREE (a slice of the patched 0.5.23 tree, `python -m tests.line_0_5_23.p1_tree slice
build/site-0.5.23 DIR`, for a GPU machine that cannot take both 0.5.23 wheels) or the patched tree from the pinned
wheels. The kernels run on the machine's Triton (the H200 machine: 3.6, so the Gluon path is live there for 8/16 heads
from 16 rows; under 0.5.23's own 3.8 every shape takes a Triton config, tests/kernels/test_mma_aot.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from tests.line_0_5_23 import p1_tree as T
from serving.mma_decode_cases import LSE_ABS_TOL, REL_TOL, GraphInputs, make_case, reference_f64, rel_err as _rel

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

REPO = Path(__file__).resolve().parents[3]


def slice_root() -> Path | None:
    """P1_TREE, checked against its SLICE.sha256 (one line naming the first file that differs)."""
    root = os.environ.get("P1_TREE")
    if not root:
        return None
    root = Path(root)
    for line in (root / "SLICE.sha256").read_text().splitlines():
        digest, rel = line.split("  ", 1)
        found = hashlib.sha256((root / rel).read_bytes()).hexdigest()
        assert found == digest, f"P1_TREE {root}: expected {rel} with sha256 {digest[:16]}, found {found[:16]}"
    return root


@pytest.fixture(scope="module")
def tree(request) -> Path:
    return slice_root() or request.getfixturevalue("patched_root")


@pytest.fixture(scope="module")
def backends(tree):
    return {name: T.dispatcher(tree, name) for name in ("mma", "triton")}


def call(module, case=None, kwargs=None):
    """0.5.23's call, as deepseek_v4_backend.py makes it (from a case, or from kwargs shaped like case.kwargs())."""
    kw = case.kwargs() if case is not None else kwargs
    with T.with_kernels(module):
        return module.flash_mla_with_kvcache_sm120(
            q=kw["q"], k_cache=kw["k_cache"], head_dim_v=512, softmax_scale=kw["softmax_scale"],
            indices=kw["indices"], topk_length=kw["topk_length"], attn_sink=kw["attn_sink"],
            extra_k_cache=kw["extra_k_cache"], extra_indices_in_kvcache=kw["extra_indices"],
            extra_topk_length=kw["extra_topk_length"])


SHAPES = [
    # B, H, topk, extra_topk, page, extra_page, sink_mode
    pytest.param(1, 8, 128, 512, 256, 64, "random", id="h8-b1"),
    pytest.param(16, 8, 128, 512, 256, 64, "random", id="h8-b16"),
    pytest.param(128, 8, 128, 512, 256, 64, "random", id="h8-b128-over64"),
    pytest.param(64, 16, 128, 512, 256, 64, "random", id="h16-b64"),
    pytest.param(96, 16, 128, 512, 256, 64, "random", id="h16-b96-over64"),
    pytest.param(4, 64, 128, 512, 256, 64, "random", id="h64-b4"),
    pytest.param(128, 64, 128, 512, 256, 64, "random", id="h64-b128-over64"),
    pytest.param(64, 8, 2048, 0, 64, 64, "none", id="h8-b64-topk2048-p64"),
    pytest.param(16, 64, 128, 1024, 64, 2, "random", id="h64-c128-pool-p64"),
]


@pytest.mark.parametrize("B,H,topk,extra_topk,page,extra_page,sink_mode", SHAPES)
def test_mma_matches_the_per_head_kernel_and_float64(backends, B, H, topk, extra_topk, page, extra_page, sink_mode):
    case = make_case(B, H, topk, page_size=page, extra_topk=extra_topk, extra_page_size=extra_page,
                     sink_mode=sink_mode, seed=B * 131 + H, device="cuda", num_pages=max(8, B // 2))
    out, lse = call(backends["mma"], case)
    want, want_lse = call(backends["triton"], case)
    torch.cuda.synchronize()
    assert out.shape == want.shape == (B, 1, H, 512) and out.dtype == torch.bfloat16
    assert not out.isnan().any(), "NaN or unwritten output element"
    ref, ref_lse = reference_f64(case)
    err_ref, err_per_head, err_oracle = _rel(out, ref), _rel(out, want), _rel(want, ref)
    print(f"B={B} H={H}: mma vs float64 {err_ref:.2e}, vs per-head {err_per_head:.2e}; per-head vs float64 {err_oracle:.2e}")
    assert err_ref < REL_TOL and err_per_head < REL_TOL
    finite = torch.isfinite(ref_lse)
    assert torch.equal(finite, torch.isfinite(lse.cpu()))
    assert (lse.double().cpu()[finite] - ref_lse[finite]).abs().max().item() < LSE_ABS_TOL


@pytest.mark.parametrize("B,H", [(24, 8), (24, 64), (128, 16)], ids=["h8-b24", "h64-b24", "h16-b128"])
def test_graph_capture_from_cold_start(tree, B, H):
    """The first mma call happens inside torch.cuda.graph, in a fresh process with an empty Triton cache;
    replays with new q / indices / lengths / pool bytes match float64."""
    env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="triton_cold_"))
    proc = subprocess.run([sys.executable, "-m", __name__, "cold-graph", str(tree), str(B), str(H)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    errs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(errs) == 3 and all(e < REL_TOL for e in errs), errs


def _cold_graph_main(root: Path, B: int, H: int):
    module = T.dispatcher(root, "mma")
    cases = [make_case(B, H, 128, extra_topk=512, seed=s, device="cuda", num_pages=max(32, B // 2)) for s in range(3)]
    static = GraphInputs(cases[0])
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = call(module, kwargs=static.kwargs)[0]
    errs = []
    for case in cases:
        static.load(case)
        graph.replay()
        torch.cuda.synchronize()
        errs.append(_rel(out, reference_f64(case)[0]))
    print(json.dumps(errs))


if __name__ == "__main__":
    if sys.argv[1] == "cold-graph":
        _cold_graph_main(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
