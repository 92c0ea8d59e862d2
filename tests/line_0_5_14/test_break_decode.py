"""The TEST-ONLY switches of serving/test_hooks/emulate_sm120.py for the live comparison's red runs and weights.

OVERLAY_TEST_BREAK_DECODE=zero-attn|no-sink|drop-split wraps the patched tree's real sm_120 dispatcher
(flash_mla_sm120.flash_mla_with_kvcache_sm120, loaded from the tree; its torch backend runs on the CPU):
each mode changes the attention output the way its name says, and only that way. OVERLAY_DUMMY_INIT=scaled
rebinds the loader's initialize_dummy_weights. Neither name appears in the shipped series or overlay.
"""
from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
import torch

from harness.upstream import load_module, tree_package
from serving.test_hooks import emulate_sm120
from serving.mma_decode_cases import make_case

REPO = Path(__file__).resolve().parents[2]
DISPATCHER = "sglang/srt/layers/attention/flash_mla_sm120.py"


def dispatcher(patched_root, monkeypatch, mode: str | None):
    monkeypatch.setenv("SGLANG_SM120_SPARSE_DECODE", "torch")
    with tree_package(patched_root, "sglang"):     # the dispatcher reads its switch through sglang.srt.environ
        module = load_module(patched_root / DISPATCHER, f"_flash_mla_sm120_{mode}")
    if mode:
        monkeypatch.setenv(emulate_sm120.BREAK_ENV, mode)
        emulate_sm120._break_decode(module)
        assert module.flash_mla_with_kvcache_sm120.overlay_broken
    return module.flash_mla_with_kvcache_sm120


@pytest.fixture(scope="module")
def case():
    return make_case(B=4, H=16, topk=64, extra_topk=32, seed=3, edge_rows=False)


def test_zero_attn_zeroes_the_output_and_keeps_lse(patched_root, monkeypatch, case):
    out, lse = dispatcher(patched_root, monkeypatch, None)(**case.kwargs())
    out_b, lse_b = dispatcher(patched_root, monkeypatch, "zero-attn")(**case.kwargs())
    assert out.abs().max() > 0
    assert torch.equal(out_b, torch.zeros_like(out)) and torch.equal(lse_b, lse)


def test_no_sink_is_the_kernel_without_the_sink(patched_root, monkeypatch, case):
    good = dispatcher(patched_root, monkeypatch, None)
    out, _ = good(**case.kwargs())
    out_nosink, _ = good(**{**case.kwargs(), "attn_sink": None})
    out_b, _ = dispatcher(patched_root, monkeypatch, "no-sink")(**case.kwargs())
    assert torch.equal(out_b, out_nosink)
    assert (out_b.float() - out.float()).abs().max() > 0.05


def test_drop_split_masks_the_last_quarter_of_each_rows_valid_positions(patched_root, monkeypatch, case):
    kw = case.kwargs()
    dropped = emulate_sm120.drop_last_split(kw["indices"], kw["topk_length"])
    for row in range(kw["indices"].shape[0]):
        n = int(kw["topk_length"][row])
        cut = n - n // emulate_sm120.DROP_SPLITS
        assert torch.equal(dropped[row, 0, :cut], kw["indices"][row, 0, :cut])
        assert (dropped[row, 0, cut:n] == -1).all()
        assert torch.equal(dropped[row, 0, n:], kw["indices"][row, 0, n:])
    out, _ = dispatcher(patched_root, monkeypatch, None)(**kw)
    out_manual, _ = dispatcher(patched_root, monkeypatch, None)(**{**kw, "indices": dropped})
    out_b, _ = dispatcher(patched_root, monkeypatch, "drop-split")(**case.kwargs())
    assert torch.equal(out_b, out_manual)
    assert (out_b.float() - out.float()).abs().max() > 0.05


def test_skip_attn_returns_the_dispatchers_shapes_without_a_kernel(patched_root, monkeypatch, case):
    out, lse = dispatcher(patched_root, monkeypatch, None)(**case.kwargs())
    out_b, lse_b = dispatcher(patched_root, monkeypatch, "skip-attn")(**case.kwargs())
    assert out_b.shape == out.shape and out_b.dtype == out.dtype and lse_b.shape == lse.shape
    assert lse_b.dtype == lse.dtype and not out_b.any() and not lse_b.any()


def test_drop_split_without_lengths_counts_valid_entries():
    idx = torch.tensor([[[5, 6, 7, 8, 9, 10, 11, 12, -1, -1]]], dtype=torch.int32)
    assert emulate_sm120.drop_last_split(idx).tolist() == [[[5, 6, 7, 8, 9, 10, -1, -1, -1, -1]]]


@pytest.mark.parametrize("seed,sink_mode", [(0, "random"), (1, "inf"), (2, "none")])
def test_graph_safe_torch_decode_is_the_trees_fallback_bit_for_bit_without_index_put(patched_root, monkeypatch,
                                                                                    seed, sink_mode):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Ops.seen.add(str(func))
            return func(*args, **(kwargs or {}))

    monkeypatch.setenv("SGLANG_SM120_SPARSE_DECODE", "torch")
    with tree_package(patched_root, "sglang"):
        module = load_module(patched_root / DISPATCHER, f"_flash_mla_sm120_graph_safe_{seed}")
    case = make_case(B=5, H=16, topk=48, extra_topk=24, seed=seed, sink_mode=sink_mode)   # edge rows: empty, invalid
    original = module.flash_mla_with_kvcache_sm120(**case.kwargs())
    with Ops():
        module.flash_mla_with_kvcache_sm120(**case.kwargs())
    assert "aten.index_put_.default" in Ops.seen                      # upstream's fallback syncs (nonzero)
    emulate_sm120._patch_torch_decode(module)
    Ops.seen = set()
    with Ops():
        safe = module.flash_mla_with_kvcache_sm120(**case.kwargs())
    assert not {op for op in Ops.seen if "index_put" in op or "nonzero" in op}, Ops.seen
    for a, b in zip(original, safe):
        assert torch.equal(a.view(torch.int16) if a.dtype == torch.bfloat16 else a, b.view(torch.int16)
                           if b.dtype == torch.bfloat16 else b)


def test_switches_register_their_hooks_and_refuse_unknown_values():
    base = {"OVERLAY_HC_SINKHORN": "off"}
    assert emulate_sm120.patches_for(base) == {}
    got = emulate_sm120.patches_for({**base, emulate_sm120.BREAK_ENV: "no-sink", "OVERLAY_EMULATE_SM120": "1"})
    assert got[emulate_sm120.DECODE][-1] is emulate_sm120._break_decode     # wraps the traced entry
    got = emulate_sm120.patches_for({**base, emulate_sm120.GRAPH_SAFE_ENV: "1"})
    assert got[emulate_sm120.DECODE] == [emulate_sm120._patch_torch_decode]
    got = emulate_sm120.patches_for({**base, emulate_sm120.DUMMY_INIT_ENV: "scaled"})
    assert got[emulate_sm120.LOADER] == [emulate_sm120._patch_loader]
    with pytest.raises(ValueError, match=r"OVERLAY_TEST_BREAK_DECODE: expected one of zero-attn, no-sink, "
                                         r"drop-split, skip-attn, found 'drop'"):
        emulate_sm120.patches_for({**base, emulate_sm120.BREAK_ENV: "drop"})
    with pytest.raises(ValueError, match="OVERLAY_DUMMY_INIT: expected scaled, found 'yes'"):
        emulate_sm120.patches_for({**base, emulate_sm120.DUMMY_INIT_ENV: "yes"})


def test_loader_hook_rebinds_initialize_dummy_weights(capsys):
    loader = types.ModuleType(emulate_sm120.LOADER)
    loader.initialize_dummy_weights = lambda model, **kw: None
    emulate_sm120._patch_loader(loader)
    lin = torch.nn.Linear(256, 64, bias=False)
    norm = torch.nn.Module()
    norm.weight = torch.nn.Parameter(torch.zeros(64))
    model = torch.nn.ModuleDict({"proj": lin, "out_norm": norm})
    counts = loader.initialize_dummy_weights(model)
    assert counts["linear"] == 1 and counts["norm"] == 1
    assert torch.equal(norm.weight.detach(), torch.ones(64))
    assert 0.05 < float(lin.weight.detach().std()) < 0.07            # 1/sqrt(256)
    assert "OVERLAY_DUMMY_INIT=scaled: TEST ONLY dummy weights by role: linear 1, norm 1" in capsys.readouterr().err


def test_switch_names_are_not_in_the_shipped_series():
    for top in ("patches", "overlay"):
        for path in (REPO / top).rglob("*"):
            if path.is_file():
                text = path.read_text(errors="replace")
                for name in (emulate_sm120.BREAK_ENV, emulate_sm120.DUMMY_INIT_ENV, emulate_sm120.GRAPH_SAFE_ENV,
                             emulate_sm120.SHADOW_ENV):
                    assert name not in text, f"{path.relative_to(REPO)} mentions {name}"
