"""P1 on 0.5.23: `mma` is a value of upstream's SGLANG_SM120_FLASHMLA_BACKEND, and (sglang 0002) its default.

Red on pristine 0.5.23 and green patched, against the trees' real files (tests/line_0_5_23/p1_tree.py):
- the selector documents mma; the dispatcher with mma runs the overlay MMA kernel (TRITON_INTERPRET=1)
  and matches the float64 reference, also above SM120_DECODE_MAX_TOKENS rows, where the flashinfer
  backend switches to FlashInfer's prefill kernel and mma keeps the same kernel;
- at TP > 1, MqaAttentionBase._kernel_num_heads (0.5.20+) hands the mma decode call the rank's real
  heads (P7's job without P7): pristine pads it to 64, as for every backend but flashinfer;
- the default (the variable unset) routes each call by its query rows as SM120_DEFAULT_ROUTES says, through
  0.5.23's own flash_mla_with_kvcache_sm120 and _kernel_num_heads alike; empty, it is mma at every row count;
  a backend set in the variable takes every call (FlashInfer's two functions stubbed: they need its library).
"""
from __future__ import annotations

import sys

import pytest
import torch

from tests.line_0_5_23 import p1_tree as T
from serving.mma_decode_cases import make_case, reference_f64, rel_err as _rel

N_HEADS = 64


def _decode(module, case):
    kw = case.kwargs()
    kw["extra_indices_in_kvcache"] = kw.pop("extra_indices")
    return module.flash_mla_with_kvcache_sm120(**kw)




def selector_default(root) -> str:
    envs = T.import_from_tree(root, "sglang.srt.environ").envs
    return type(envs).__dict__[T.SELECTOR].default


def test_the_default_is_mma_once_patched(pristine_root, patched_root):
    """sglang 0002: mma is the default where the decode bench's rule held under this release's Triton
    (BENCHMARKS.md, 2026-12-04 run); the release's own default is flashinfer."""
    assert selector_default(pristine_root) == "flashinfer"
    assert selector_default(patched_root) == "mma"


@pytest.mark.parametrize("backend", ["flashinfer", "triton", "torch"])
def test_the_releases_backends_stay_selectable(patched_root, backend):
    assert T.dispatcher(patched_root, backend)._sm120_default_backend == backend


def test_pristine_mma_is_not_a_backend(pristine_root):
    """Pristine 0.5.23 has no mma branch: the value falls through to the torch fallback (no MMA module)."""
    module = T.dispatcher(pristine_root, "mma")
    assert module._test_mma is None
    assert '"mma"' not in (pristine_root / T.DISPATCHER).read_text()


@pytest.mark.parametrize("B,H,topk,extra", [(3, 16, 64, 32), (66, 16, 16, 0)])
def test_patched_mma_runs_the_overlay_kernel(patched_root, monkeypatch, B, H, topk, extra):
    module = T.dispatcher(patched_root, "mma")
    assert module._test_mma is not None
    monkeypatch.setitem(sys.modules, T.MMA_MODULE, module._test_mma)  # the branch imports them at call time
    monkeypatch.setitem(sys.modules, T.GLUON_MODULE, module._test_gluon)
    calls = []
    kernel = module._test_mma.flash_mla_sparse_decode_mma
    monkeypatch.setattr(module._test_mma, "flash_mla_sparse_decode_mma",
                        lambda *a, **k: calls.append(a[0].shape) or kernel(*a, **k))
    case = make_case(B=B, H=H, topk=topk, extra_topk=extra, page_size=64, num_pages=4, seed=B)
    out, _ = _decode(module, case)
    assert calls == [case.q.shape], f"expected one MMA kernel call, found {calls}"
    ref, _ = reference_f64(case)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16
    assert _rel(out.float(), ref) < 2.0 ** -7


def test_above_decode_max_tokens_mma_keeps_its_kernel(patched_root):
    """B > SM120_DECODE_MAX_TOKENS: flashinfer goes to its prefill kernel, mma does not switch."""
    max_tokens = T.dispatcher_constant(patched_root, "SM120_DECODE_MAX_TOKENS")
    assert max_tokens == 64
    source = (patched_root / T.DISPATCHER).read_text()
    branch = source[source.index('if backend == "mma":'):]     # the backend sm120_backend picks for the call
    branch = branch[: branch.index('if backend == "triton":')]
    assert "SM120_DECODE_MAX_TOKENS" not in branch.split("\n", 3)[-1] and "_prefill" not in branch


@pytest.mark.parametrize("tp_size", [2, 4, 8])
def test_pristine_mma_decode_gets_64_heads(pristine_root, tp_size):
    heads = T.kernel_num_heads(pristine_root, "mma")
    assert heads(N_HEADS, N_HEADS // tp_size, tp_size, 8) == 64


@pytest.mark.parametrize("tp_size", [2, 4, 8])
def test_patched_mma_decode_gets_real_heads(patched_root, tp_size):
    heads = T.kernel_num_heads(patched_root, "mma")
    assert heads(N_HEADS, N_HEADS // tp_size, tp_size, 8) == N_HEADS // tp_size
    assert heads(N_HEADS, N_HEADS // tp_size, tp_size, 200) == N_HEADS // tp_size  # above 64 rows: upstream's own


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_patched_other_backends_keep_the_padding(patched_root, backend):
    heads = T.kernel_num_heads(patched_root, backend)
    assert heads(N_HEADS, 8, 8, 8) == 64
    assert heads(N_HEADS, N_HEADS, 1, 8) == N_HEADS  # TP = 1 unchanged


def test_forward_passes_kernel_num_heads_and_slices_the_sink(patched_root):
    """How deepseek_v4.py uses it: the q width and the sink both follow _kernel_num_heads."""
    source = (patched_root / T.MODEL).read_text()
    assert "else self._kernel_num_heads(x.shape[0])" in source
    assert "attn_sink = self._local_attn_sink(kernel_num_heads)" in source


def test_a_slice_of_the_patched_tree_runs_both_backends_as_the_gpu_test_calls_them(patched_root, tmp_path):
    """What the GPU test runs on a box without the 0.5.23 wheels: the slice (SLICE.sha256 checked), 0.5.23's keyword
    call through flash_mla_with_kvcache_sm120, mma (interpreter, one small case) against upstream's torch backend
    (the per-head kernel the GPU test compares with is autotuned, which needs a GPU)."""
    from tests.line_0_5_23.gpu import test_p1_mma_backend_gpu as G

    lines = T.write_slice(patched_root, tmp_path / "slice")
    assert [l.split("  ")[1] for l in lines] == list(T.SLICE)
    case = make_case(B=3, H=16, topk=32, extra_topk=32, page_size=64, num_pages=2, seed=5)
    outs = {}
    for name in ("mma", "torch"):
        module = T.dispatcher(tmp_path / "slice", name)
        outs[name] = G.call(module, case)[0].float()
    ref, _ = reference_f64(case)
    assert _rel(outs["mma"], ref) < 2.0 ** -7 and _rel(outs["mma"], outs["torch"]) < 2.0 ** -7
    (tmp_path / "slice" / T.MMA).write_text("# changed\n")
    import os
    os.environ["P1_TREE"] = str(tmp_path / "slice")
    try:
        with pytest.raises(AssertionError, match=r"expected sglang/kernels/ops/attention/flash_mla_sm120_mma.py with"):
            G.slice_root()
    finally:
        del os.environ["P1_TREE"]


ROUTE_ROWS = [1, 8, 9, 64, 65, 448, 2048]     # decode, a verify batch, both sides of 64 rows, a prefill chunk


def _routed(module, monkeypatch):
    """Calls of `module`'s flash_mla_with_kvcache_sm120 by row count -> which function ran them: the MMA
    kernel, FlashInfer's decode or its prefill path (each a recording stub: the kernels run in the tests above
    and on the GPU machine; FlashInfer's need its library)."""
    ran = {}
    monkeypatch.setitem(sys.modules, T.MMA_MODULE, module._test_mma)
    monkeypatch.setitem(sys.modules, T.GLUON_MODULE, module._test_gluon)
    stubs = ((module._test_mma, "flash_mla_sparse_decode_mma", "mma"),
             (module, "_flash_mla_flashinfer", "flashinfer decode"),
             (module, "_flash_mla_sm120_prefill", "flashinfer prefill"))
    for owner, name, label in stubs:
        monkeypatch.setattr(owner, name, lambda q, *a, label=label: (ran.setdefault(q.shape[0], label), None))
    for rows in ROUTE_ROWS:
        _decode(module, make_case(B=rows, H=16, topk=16, extra_topk=0, page_size=64, num_pages=2, seed=rows))
    return ran


def test_pristine_has_no_routing_by_rows(pristine_root):
    module = T.dispatcher(pristine_root, None)
    assert not hasattr(module, "SM120_DEFAULT_ROUTES") and not hasattr(module, "sm120_backend")


def test_the_default_sends_every_row_count_to_mma_as_measured(patched_root, monkeypatch):
    """Empty table: mma at every row count, prefill chunks and verify batches included (timed at V4.1-Flash's rows,
    mma was faster than FlashInfer at each: BENCHMARKS.md, "P1 at DeepSeek-V4.1-Flash's rows")."""
    module = T.dispatcher(patched_root, None)
    assert module.SM120_DEFAULT_ROUTES == ()
    assert _routed(module, monkeypatch) == {rows: "mma" for rows in ROUTE_ROWS}


def test_the_default_follows_the_table_per_row_range(patched_root, monkeypatch):
    """Rows in a range go to its backend (both ends included, the first range that holds them wins); FlashInfer
    then runs as the release runs it: its decode up to 64 rows, its prefill path above."""
    module = T.dispatcher(patched_root, None)
    monkeypatch.setattr(module, "SM120_DEFAULT_ROUTES", ((9, 64, "flashinfer"), (448, 10 ** 9, "flashinfer"),
                                                         (1, 10 ** 9, "mma")))
    assert _routed(module, monkeypatch) == {1: "mma", 8: "mma", 9: "flashinfer decode", 64: "flashinfer decode",
                                            65: "mma", 448: "flashinfer prefill", 2048: "flashinfer prefill"}


@pytest.mark.parametrize("backend", ["mma", "flashinfer"])
def test_a_backend_set_in_the_variable_takes_every_call(patched_root, monkeypatch, backend):
    module = T.dispatcher(patched_root, backend)
    monkeypatch.setattr(module, "SM120_DEFAULT_ROUTES", ((1, 10 ** 9, "mma" if backend == "flashinfer" else "flashinfer"),))
    want = {rows: "mma" if backend == "mma" else "flashinfer " + ("decode" if rows <= 64 else "prefill")
            for rows in ROUTE_ROWS}
    assert _routed(module, monkeypatch) == want


@pytest.mark.parametrize("tp_size", [4, 8])
def test_the_head_count_follows_the_routed_backend(patched_root, tp_size):
    """_kernel_num_heads asks the same routing: a decode call routed to FlashInfer gets its padded 64 heads (no
    FlashInfer here reports no exact-head kernel), one left to mma the rank's own."""
    local = N_HEADS // tp_size
    routed = T.kernel_num_heads(patched_root, None, routes=((9, 64, "flashinfer"),))
    assert [routed(N_HEADS, local, tp_size, rows) for rows in (8, 9, 64, 65)] == [local, 64, 64, local]
    unrouted = T.kernel_num_heads(patched_root, None)
    assert [unrouted(N_HEADS, local, tp_size, rows) for rows in (8, 9, 64, 65)] == [local] * 4
