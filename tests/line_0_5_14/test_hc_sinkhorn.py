"""serving/test_hooks/hc_sinkhorn.py (the tilelang-free hc_split_sinkhorn of the GPU-box harness).

tilelang cannot run here, so the reference is a line-by-line transcription of the pinned TileLang
kernel (sglang/srt/layers/mhc.py, hc_split_sinkhorn_kernel) into scalar Python on float32 values;
the test first checks that the pinned source still holds the statements transcribed. Both the torch
route and the Triton kernel (under TRITON_INTERPRET=1) are compared with it, on random inputs of
several shapes. Tolerance: |diff| <= 2e-6 + 2e-5 * |ref| elementwise (fp32, 20 Sinkhorn rounds;
observed <= 2.4e-7 on CPU, 2026-12-01).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Before anything imports triton (as the other interpreter tests do): a module-scoped setenv would be
# undone after this module and leave later Triton tests of the same run without the interpreter.
os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from harness.upstream import load_module  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
IMPL = REPO / "serving" / "test_hooks" / "hc_sinkhorn.py"
MHC = "sglang/srt/layers/mhc.py"
ATOL, RTOL = 2e-6, 2e-5

# The statements of hc_split_sinkhorn_kernel that the transcription below follows, verbatim.
KERNEL_LINES = [
    "pre[i, j] = T.sigmoid(mixes_shared[j] * hc_scale[0] + hc_base[j]) + eps",
    "post[i, j] = 2 * T.sigmoid(",
    "mixes_shared[j + hc] * hc_scale[1] + hc_base[j + hc]",
    "mixes_shared[j * hc + k + hc * 2] * hc_scale[2]",
    "+ hc_base[j * hc + k + hc * 2]",
    "T.reduce_max(comb_frag, row_max, dim=1)",
    "comb_frag[j, k] = T.exp(comb_frag[j, k] - row_max[j])",
    "comb_frag[j, k] = comb_frag[j, k] / row_sum[j] + eps",
    "comb_frag[j, k] = comb_frag[j, k] / (col_sum[k] + eps)",
    "for _ in T.serial(sinkhorn_iters - 1):",
    "comb_frag[j, k] = comb_frag[j, k] / (row_sum[j] + eps)",
    "sinkhorn_iters: int = 20,",
    "eps: float = 1e-6,",
    "pre = mixes.new_empty(b, s, hc_mult)",
    "comb = mixes.new_empty(b, s, hc_mult, hc_mult)",
]


def transcription(mixes, hc_scale, hc_base, hc, iters, eps):
    """The TileLang kernel, statement by statement, one row (one CTA) at a time, in float32."""
    f = torch.float32
    b, s, mix_hc = mixes.shape
    rows = mixes.reshape(-1, mix_hc)
    n = rows.shape[0]
    pre = torch.empty(n, hc, dtype=f)
    post = torch.empty(n, hc, dtype=f)
    comb = torch.empty(n, hc, hc, dtype=f)
    sc = [hc_scale[t].to(f) for t in range(3)]
    one, two, e = torch.tensor(1.0, dtype=f), torch.tensor(2.0, dtype=f), torch.tensor(eps, dtype=f)

    def sigmoid(x):
        return one / (one + torch.exp(-x))

    for i in range(n):
        m = rows[i]
        for j in range(hc):
            pre[i, j] = sigmoid(m[j] * sc[0] + hc_base[j]) + e
        for j in range(hc):
            post[i, j] = two * sigmoid(m[j + hc] * sc[1] + hc_base[j + hc])
        c = [[m[j * hc + k + hc * 2] * sc[2] + hc_base[j * hc + k + hc * 2] for k in range(hc)] for j in range(hc)]
        row_max = [max(c[j]) for j in range(hc)]                       # reduce_max(dim=1)
        c = [[torch.exp(c[j][k] - row_max[j]) for k in range(hc)] for j in range(hc)]
        row_sum = [sum(c[j][1:], c[j][0]) for j in range(hc)]          # reduce_sum(dim=1)
        c = [[c[j][k] / row_sum[j] + e for k in range(hc)] for j in range(hc)]
        col_sum = [sum((c[j][k] for j in range(1, hc)), c[0][k]) for k in range(hc)]   # reduce_sum(dim=0)
        c = [[c[j][k] / (col_sum[k] + e) for k in range(hc)] for j in range(hc)]
        for _ in range(iters - 1):
            row_sum = [sum(c[j][1:], c[j][0]) for j in range(hc)]
            c = [[c[j][k] / (row_sum[j] + e) for k in range(hc)] for j in range(hc)]
            col_sum = [sum((c[j][k] for j in range(1, hc)), c[0][k]) for k in range(hc)]
            c = [[c[j][k] / (col_sum[k] + e) for k in range(hc)] for j in range(hc)]
        for j in range(hc):
            for k in range(hc):
                comb[i, j, k] = c[j][k]
    return pre.view(b, s, hc), post.view(b, s, hc), comb.view(b, s, hc, hc)


def test_transcribed_statements_are_the_pinned_kernel(pristine_root):
    source = (pristine_root / MHC).read_text()
    kernel = source[source.index("def hc_split_sinkhorn_kernel"):source.index("def mhc_pre_big_fuse_tilelang")]
    missing = [line for line in KERNEL_LINES if line not in kernel]
    assert not missing, f"the pinned hc_split_sinkhorn changed; re-transcribe: {missing}"


@pytest.fixture(scope="module")
def impls():
    mod = load_module(IMPL, "hc_sinkhorn_under_test")
    return {"torch": mod.hc_split_sinkhorn_torch, "triton": mod.hc_split_sinkhorn_triton}


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def random_inputs(b, s, hc, seed):
    g = torch.Generator().manual_seed(seed)
    mixes = torch.randn(b, s, (2 + hc) * hc, generator=g) * 3
    hc_scale = torch.rand(3, generator=g) * 2 + 0.1
    hc_base = torch.randn((2 + hc) * hc, generator=g)
    return mixes, hc_scale, hc_base


# (b, s) as the model calls it ([tokens, 1]) and odd counts that leave a partial Triton block.
@pytest.mark.parametrize("route", ["torch", "triton"])
@pytest.mark.parametrize("b,s,hc,iters,eps", [(1, 1, 4, 20, 1e-6), (37, 1, 4, 20, 1e-6),
                                                (3, 5, 4, 20, 1e-6), (70, 1, 4, 7, 1e-3), (5, 2, 2, 20, 1e-6)])
def test_matches_the_transcribed_kernel(impls, route, b, s, hc, iters, eps):
    mixes, hc_scale, hc_base = random_inputs(b, s, hc, seed=b * 100 + s + hc)
    want = transcription(mixes, hc_scale, hc_base, hc, iters, eps)
    got = impls[route](mixes, hc_scale, hc_base, hc, iters, eps)
    for name, g, w in zip(("pre", "post", "comb"), got, want):
        assert g.shape == w.shape and g.dtype == torch.float32, name
        err = (g - w).abs()
        bound = ATOL + RTOL * w.abs()
        assert bool((err <= bound).all()), f"{route} {name}: max error {err.max():.3g}"
    # The Sinkhorn result is (close to) doubly stochastic: the property the model relies on.
    comb = got[2]
    assert torch.allclose(comb.sum(-2), torch.ones_like(comb.sum(-2)), atol=2 * eps + 1e-5)   # col / (col + eps)


def test_contract_shapes_dtypes_and_bad_input(impls):
    mixes, hc_scale, hc_base = random_inputs(6, 1, 4, seed=1)
    for route, fn in impls.items():
        pre, post, comb = fn(mixes, hc_scale, hc_base)   # the defaults: hc_mult 4, 20 rounds, eps 1e-6
        assert (pre.shape, post.shape, comb.shape) == ((6, 1, 4), (6, 1, 4), (6, 1, 4, 4)), route
        assert {t.dtype for t in (pre, post, comb)} == {torch.float32}
        assert bool((pre > 0).all() and (post > 0).all() and (post < 2).all())
        empty = fn(mixes[:0], hc_scale, hc_base)
        assert [tuple(t.shape) for t in empty] == [(0, 1, 4), (0, 1, 4), (0, 1, 4, 4)]
        with pytest.raises(ValueError, match=r"expected mixes \[b, s, 24\] for hc_mult=4, found \[6, 1, 20\]"):
            fn(mixes[..., :20], hc_scale, hc_base)
        with pytest.raises(ValueError, match="expected float32 mixes"):
            fn(mixes.bfloat16(), hc_scale, hc_base)


def test_triton_kernel_compiles_for_sm90_and_sm120():
    """The kernel the H200 runs (sm_90) and a Blackwell would run (sm_120) builds ahead of time."""
    script = f"""
from harness.aot import compile_kernel
from harness.upstream import load_module
mod = load_module({str(IMPL)!r}, "hc_sinkhorn_aot")
sig = dict(mix_ptr="*fp32", scale_ptr="*fp32", base_ptr="*fp32", pre_ptr="*fp32", post_ptr="*fp32",
           comb_ptr="*fp32", n="i32")
for arch in (90, 120):
    k = compile_kernel(mod._hc_split_sinkhorn_kernel, sig, dict(HC=4, ITERS=20, EPS=1e-6, BLOCK=mod.BLOCK_ROWS),
                       [], 4, 1, arch)
    print(arch, k.metadata.shared)
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    shared = dict(line.split() for line in out.stdout.split("\n") if line.strip())
    assert set(shared) == {"90", "120"} and all(int(v) <= 101376 for v in shared.values()), shared
