"""The 0.5.14 line's DeepSeek-V4-Flash reach row (patches/0.5.14/sglang/reach.toml), held by 0.5.14's own sm_120
dispatch driven on the CPU with `make serve`'s switches (serving/serve_cmd.OVERLAY_ENV): the sparse-decode entry
flash_mla_with_kvcache_sm120 (kernels recorders), the indexer's sm_120 logits function
fp8_paged_mqa_logits_torch_sm120 (the release sets SGLANG_FP8_PAGED_MQA_LOGITS_TORCH on sm_120; its Triton
kernel a recorder, the release's torch code run as it is), and P3's reach figure, which does not hold here."""
from __future__ import annotations

import os
import sys
import types
import typing
from pathlib import Path

import torch

from harness.scoped import scoped
from harness.upstream import extract_functions, import_from_tree, load_module, tree_package
from patchkit.rebase.reach import load_models, load_partly
from serving.serve_cmd import OVERLAY_ENV
from tests.conftest import pristine_wheel
from tests.rebase.test_rebase_reach import _reader, _series

DISPATCHER = "sglang/srt/layers/attention/flash_mla_sm120.py"
INDEXER = "sglang/srt/layers/attention/dsv4/indexer.py"
KERNELS = {"sglang.srt.layers.attention.flash_mla_sm120_mma": "flash_mla_sparse_decode_mma",
           "sglang.srt.layers.attention.flash_mla_sm120_triton": "flash_mla_sparse_decode_triton"}
SERVE = {k: v for k, v in OVERLAY_ENV.items()}
ROW = ("DeepSeek-V4-Flash", "decode at TP 8 (8 heads a rank), B 1-64")


def _env(values: dict):
    """Exactly `values` of the serving flags (and the release's own selector) set while inside."""
    return scoped(os.environ, {**{k: None for k in (*SERVE, "SGLANG_SM120_TRITON_FLASHMLA")}, **values})


def _dispatcher(root: Path, env: dict):
    with _env(env), tree_package(root, "sglang"):
        return load_module(root / DISPATCHER, f"_reach_0514_{abs(hash((str(root), tuple(env))))}")


def _route(module, rows: int) -> str:
    """The kernel the dispatcher calls for `rows` query rows (each kernel a recorder of its name)."""
    called = []
    out = (torch.empty(rows, 1, 64, 512, device="meta"), torch.empty(rows, 64, 1, device="meta"))
    stubs = {name: types.SimpleNamespace(**{fn: lambda *a, fn=fn, **k: called.append(fn) or out})
             for name, fn in KERNELS.items()}
    module._sm120_sparse_decode_fwd = lambda *a, **k: called.append("torch reference") or out
    with scoped(sys.modules, stubs):
        module.flash_mla_with_kvcache_sm120(q=torch.empty(rows, 1, 64, 512, device="meta"), k_cache=None,
                                            indices=None, head_dim_v=512, softmax_scale=512 ** -0.5)
    return called[-1]


def _indexer_logits(root: Path, env: dict):
    """The tree's fp8_paged_mqa_logits_torch_sm120 on two rows of real lengths 5 and 70 under a 256-wide table:
    ('triton', the lengths it got) where it hands off to the set's kernel, else ('torch', the logits' width)."""
    with _env(env), tree_package(root, "sglang"):
        envs = import_from_tree(root, "sglang.srt.environ").envs
        called = []
        ns = {"torch": torch, "Any": typing.Any, "envs": envs, "FP8_DTYPE": torch.float8_e4m3fn,
              "F": torch.nn.functional,
              "fp8_paged_mqa_logits_triton": lambda q, kv, w, lens, table, width, **k: called.append(lens.tolist())}
        names = ["fp8_paged_mqa_logits_torch_sm120"]
        if "_len_bounded_indexer_enabled" in (root / INDEXER).read_text():
            names.append("_len_bounded_indexer_enabled")
        extract_functions(root / INDEXER, names, ns)
        q = torch.ones(2, 1, 4, 128).to(torch.float8_e4m3fn)
        out = ns["fp8_paged_mqa_logits_torch_sm120"](
            q, torch.zeros(8, 64, 1, 132, dtype=torch.uint8), torch.ones(2, 4), torch.tensor([5, 70], dtype=torch.int32),
            torch.arange(8, dtype=torch.int32).view(2, 4), None, 256, clean_logits=False)
    return ("triton", called[0]) if called else ("torch", out.shape[-1])


def test_the_v4_flash_row_is_what_0_5_14_dispatch_does_on_sm120(pristine_root, patched_root):
    series = _series("0.5.14")
    names = {p.subject: p.name for p in series.patches}
    rows = {(r.model, r.forward): r for r in load_models(series.directory, series.patches, lambda w: None)}
    ours, alone = _dispatcher(patched_root, SERVE), _dispatcher(pristine_root, {})
    routes = ({_route(ours, r) for r in range(1, 65)}, {_route(alone, r) for r in range(1, 65)})
    assert routes == ({"flash_mla_sparse_decode_mma"}, {"flash_mla_sparse_decode_triton"}), routes
    subjects = ["dsv4: share each KV tile across heads in sm_120 sparse decode"]
    upstream = ["sparse attention: flash_mla_with_kvcache_sm120 -> the set's MMA kernel (upstream alone: the "
                "per-head Triton kernel)"]
    if ours.sm120_decode_takes_real_heads() and not hasattr(alone, "sm120_decode_takes_real_heads"):
        subjects.append("dsv4: keep a TP rank's real query heads when the sm_120 MMA kernel decodes")
        upstream.append("query heads: the rank's own (upstream alone: padded to 64)")
    indexer = (_indexer_logits(patched_root, SERVE), _indexer_logits(pristine_root, {}))
    assert indexer == (("triton", [5, 70]), ("torch", 256)), indexer
    subjects.append("dsv4 indexer: score only each row's real length on sm_120 (CUDA-graph safe)")
    upstream.append("indexer: fp8_paged_mqa_logits_torch_sm120 -> the set's length-bounded Triton kernel, each row "
                    "to its real length (upstream alone: torch over the table's whole width)")
    partly = load_partly(series.directory, series.patches, lambda _: None)
    assert not any(r.holds(_reader(pristine_wheel("sglang", "0.5.14"))) for r in partly.values())
    subjects.append("dsv4: run the MHC-pre mixing linear in bf16 on tensor cores")
    upstream.append("MHC: hc_pre on every mixing (P3's reach figure does not hold on this release: no fused "
                    "post/pre boundary)")
    order = [p.name for p in series.patches]
    assert rows[ROW].reaches == tuple(sorted((names[s] for s in subjects), key=order.index))
    assert rows[ROW].upstream == tuple(upstream)
