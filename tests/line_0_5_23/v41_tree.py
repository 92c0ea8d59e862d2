"""Load 0.5.23's V4.1 dispatch functions from a tree on a CPU that says it is an sm_120 card (capability 12.0).

The indexer factories (dsv4/v41_indexer/__init__.py), the full top-k indexer's decode (full_topk.py), the indexer
metadata the attention backend builds (dsv4/metadata.py) and V4.1's MHC mixing dispatch (deepseek_v4_mhc.py) are
compiled alone from the tree: their modules import the serving runtime. What they call that needs a GPU (DeepGEMM,
the top-k and mixing kernels) is a recorder; the backends the factories pick are recorders of their own name.
"""
from __future__ import annotations

import ast
import functools
import sys
import types
import typing
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from harness.scoped import scoped
from harness.upstream import extract_functions, import_from_tree, tree_package

INDEXER = "sglang/srt/layers/attention/dsv4/v41_indexer/__init__.py"
FULL_TOPK = "sglang/srt/layers/attention/dsv4/v41_indexer/full_topk.py"
SCORING = "sglang/srt/layers/attention/dsv4/v41_indexer/scoring.py"
METADATA = "sglang/srt/layers/attention/dsv4/metadata.py"
MHC = "sglang/srt/models/deepseek_v4_mhc.py"
V41_CONFIG = "sglang/srt/configs/deepseek_v41.py"
PACKAGE = "sglang.srt.layers.attention.dsv4.v41_indexer"
# The public functions of sgl-deep-gemm 0.2.3.post2 (the version 0.5.23 requires) that 0.5.23's V4.1 paths test
# for: its deep_gemm/__init__.py defines all five.
DEEP_GEMM_NAMES = ("fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits", "get_paged_mqa_logits_metadata",
                   "get_paged_sparse_mqa_logits_metadata", "fp8_fp4_paged_sparse_mqa_logits")
SM120 = (12, 0)


class Calls(list):
    """(name, args, kwargs) of every stubbed call, in order."""

    def stub(self, name, result=None):
        def call(*args, **kwargs):
            self.append((name, args, kwargs))
            return result(*args, **kwargs) if callable(result) else result
        return call

    def names(self):
        return [c[0] for c in self]


@contextmanager
def capability(major_minor=SM120):
    """torch answers as a CUDA build on a card of this capability (nothing is launched)."""
    saved = (torch.cuda.get_device_capability, torch.cuda.is_available, torch.version.cuda)
    torch.cuda.get_device_capability = lambda *a, **k: major_minor
    torch.cuda.is_available = lambda: True
    torch.version.cuda = "13.0"
    try:
        yield
    finally:
        torch.cuda.get_device_capability, torch.cuda.is_available, torch.version.cuda = saved


def _recorder_class(name: str, calls: Calls):
    def init(self, **kwargs):
        self.kwargs = kwargs
        calls.append((name, (), kwargs))
    return type(name, (), {"__init__": init})


def indexer_factories(root: Path, calls: Calls, paged_sparse: bool = True):
    """make_full_topk_indexer / make_candidate_indexer of the tree, with a deep_gemm holding DEEP_GEMM_NAMES,
    the release's FullTopKIndexer (full_topk_class) and recorder backends. `paged_sparse` is what 0.5.23's
    deep_gemm_wrapper.configurer answers for DeepGEMM's paged sparse MQA logits."""
    deep_gemm = types.ModuleType("deep_gemm")
    for n in DEEP_GEMM_NAMES:
        setattr(deep_gemm, n, calls.stub(f"deep_gemm.{n}"))
    modules = {
        "deep_gemm": deep_gemm,
        f"{PACKAGE}.dense_blocks": types.SimpleNamespace(DenseBlocksBackend=_recorder_class("DenseBlocksBackend", calls)),
        f"{PACKAGE}.sparse_table": types.SimpleNamespace(SparseTableBackend=_recorder_class("SparseTableBackend", calls)),
        "sglang.srt.runtime_context": types.SimpleNamespace(
            get_parallel=lambda: types.SimpleNamespace(attn_cp_size=1)),
        "sglang.srt.layers.deep_gemm_wrapper.configurer": types.SimpleNamespace(
            DEEPGEMM_PAGED_SPARSE_MQA_LOGITS=paged_sparse),
    }
    ns = {"__name__": PACKAGE, "__package__": PACKAGE, "functools": functools, "torch": torch, "Tuple": typing.Tuple,
          "is_cuda": lambda: True, "FullTopKIndexer": full_topk_class(root, calls)}
    extract_functions(Path(root) / INDEXER, ["is_sm100_or_newer", "has_dense_fp4_indexer", "_use_deep_gemm_prefill",
                                             "make_full_topk_indexer", "make_candidate_indexer"], ns)

    def call(name, **kwargs):
        for f in ("is_sm100_or_newer", "has_dense_fp4_indexer", "_use_deep_gemm_prefill"):
            ns[f].cache_clear()     # functools.cache: each call asks the capability it runs under
        with scoped(sys.modules, modules):
            return ns[name](**kwargs)
    return call


def full_topk_class(root: Path, calls: Calls):
    """The tree's FullTopKIndexer; its DeepGEMM logits and top-k kernels are recorders."""
    ns = {"torch": torch, "is_deep_select_supported": lambda: False,
          "deep_gemm_fp4_paged_mqa_logits": calls.stub(
              "deep_gemm_fp4_paged_mqa_logits",
              lambda q, k, w, lens, table, meta, width: torch.zeros(lens.shape[0], width)),
          "topk_transform_paged_from_metadata": calls.stub("topk_transform_paged_from_metadata"),
          "get_deep_gemm_decode_data": calls.stub("get_deep_gemm_decode_data", lambda inputs, pool: inputs.data),
          "DecodeInputs": object, "PrefillInputs": object, "DeepSeekV4TokenToKVPool": object}
    for n in ("topk_page_transform", "decode_scores", "dense_prefill_topk", "get_deep_gemm_prefill_data",
              "prefill_requests", "select_decode", "write_prefill"):
        ns[n] = calls.stub(n)
    return extract_functions(Path(root) / FULL_TOPK, ["FullTopKIndexer"], ns)["FullTopKIndexer"]


def decode_data_class(root: Path):
    """scoring.py's DeepGEMMDecodeData (a msgspec Struct there) as a plain class with its own paged_logits_args."""
    class Struct:
        def __init_subclass__(cls, **kwargs):
            pass

        def __init__(self, *args):
            for name, value in zip(self.__annotations__, args):
                setattr(self, name, value)
    ns = {"torch": torch, "msgspec": types.SimpleNamespace(Struct=Struct), "List": typing.List}
    return extract_functions(Path(root) / SCORING, ["DeepGEMMDecodeData"], ns)["DeepGEMMDecodeData"]


def paged_indexer_metadata(root: Path, calls: Calls):
    """metadata.py's PagedIndexerMetadata as the attention backend builds it on sm_120 (force_deep_gemm_metadata:
    DeepGEMM's own schedule), its deep_gemm a recorder; budgets as under a CUDA graph (none: one call)."""
    root = Path(root)
    with tree_package(root, "sglang"):
        envs = import_from_tree(root, "sglang.srt.environ").envs
    deep_gemm = types.ModuleType("deep_gemm")
    deep_gemm.get_paged_mqa_logits_metadata = calls.stub("deep_gemm.get_paged_mqa_logits_metadata",
                                                         lambda lens, block, sms: torch.zeros(sms + 1, 2))
    deep_gemm.get_num_sms = lambda: 188
    ns = {"torch": torch, "dataclass": dataclass, "field": field, "fields": fields, "Any": typing.Any,
          "Optional": typing.Optional, "List": typing.List, "envs": envs, "is_hip": lambda: False,
          "is_xpu": lambda: False, "_IS_SM120": True, "logger": types.SimpleNamespace(debug=lambda *a, **k: None),
          "mqa_logits_needs_budget_check": lambda **k: False, "get_is_capture_mode": lambda: True,
          "is_in_breakable_cuda_graph": lambda: False, "is_in_tc_piecewise_cuda_graph": lambda: False,
          "mqa_logits_budget_bytes": calls.stub("mqa_logits_budget_bytes")}
    tree = ast.parse((root / METADATA).read_text())
    helpers = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in
               ("plan_indexer_row_chunks", "iter_row_chunks", "copy_metadata")]
    consts = [n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
              and isinstance(n.targets[0], ast.Name) and n.targets[0].id.startswith("_")
              and n.targets[0].id not in ("_IS_SM120",) and isinstance(n.value, ast.Constant)]
    extract_functions(root / METADATA, consts + helpers + ["NonPagedIndexerPlan", "PagedIndexerMetadata"], ns)

    def build(**kwargs):
        with scoped(sys.modules, {"deep_gemm": deep_gemm}):
            return ns["PagedIndexerMetadata"](**kwargs)
    return build


class _CudaLike(torch.Tensor):
    """A CPU tensor that answers is_cuda: the mixing dispatch branches on it before any kernel runs."""

    @property
    def is_cuda(self):
        return True


def mix_stats(root: Path, calls: Calls, *, sm: str, rows: int, hidden: int, mult: int = 4):
    """deepseek_v4_mhc._mix_stats_impl of the tree for a layer with `rows` tokens on a platform `sm` in {sm90,
    sm100, sm120}: which mixing kernel it calls (recorders; the release's envs)."""
    root = Path(root)
    with tree_package(root, "sglang"):
        envs = import_from_tree(root, "sglang.srt.environ").envs
    platform = types.SimpleNamespace(is_sm90=sm == "sm90", is_sm100=sm == "sm100",
                                     is_blackwell=sm in ("sm100", "sm120"), is_sm120=sm == "sm120")
    def triplet(*a, **k):
        return torch.zeros(rows, mult), torch.zeros(rows, mult), torch.zeros(rows, mult, mult)
    kernels = types.ModuleType("sglang.kernels.ops.layernorm.mhc")
    for n in ("hc_mix_stats", "hc_mix_stats_sinkhorn", "hc_split_sinkhorn", "hc_mix_stats_sinkhorn_bf16x3",
              "hc_mix_stats_sinkhorn_deepgemm"):
        setattr(kernels, n, calls.stub(n, triplet))
    invariant = types.ModuleType("sglang.srt.batch_invariant_ops")
    invariant.is_batch_invariant_mode_enabled = lambda: False
    ns = {"torch": torch, "F": torch.nn.functional, "get_platform": lambda: platform, "envs": envs,
          "_is_gfx95_supported": False, "_is_xpu": False, "HcTriplet": tuple, "HcSubLayer": object}
    extract_functions(root / MHC, ["_mix_stats_impl"], ns)
    cfg = types.SimpleNamespace(mult=mult, sinkhorn_iters=20, rms_eps=1e-6, eps=1e-6)
    hc = types.SimpleNamespace(cfg=cfg, fn=torch.zeros(mult * (2 + mult), mult * hidden), scale=None, base=None,
                               tf32_parts=None, bf16_parts=None)
    x = torch.zeros(rows, mult, hidden, dtype=torch.bfloat16).as_subclass(_CudaLike)
    with scoped(sys.modules, {kernels.__name__: kernels, invariant.__name__: invariant}), capability():
        ns["_mix_stats_impl"](hc, x)


def sparse_attention_route(root: Path, calls: Calls, rows: int, heads: int = 64):
    """Which kernel 0.5.23's flash_mla_with_kvcache_sm120 of the tree sends `rows` query rows to, with the
    release's default backend (no SGLANG_SM120_FLASHMLA_BACKEND set): every kernel is a recorder."""
    import os

    from tests.line_0_5_23 import p1_tree

    root = Path(root)
    with scoped(os.environ, {p1_tree.SELECTOR: None}), tree_package(root, "sglang"):
        sys.modules["sglang.srt.environ"] = import_from_tree(root, "sglang.srt.environ")
        sys.modules["sglang.srt.utils"] = types.SimpleNamespace(is_hip=lambda: False)
        module = p1_tree.load_module(root / p1_tree.DISPATCHER)
    out = (torch.empty(rows, 1, heads, 512, device="meta"), torch.empty(rows, heads, 1, device="meta"))
    module._flash_mla_sm120_prefill = calls.stub("flashinfer prefill", out)
    module._flash_mla_flashinfer = calls.stub("flashinfer decode", out)
    module._sm120_sparse_decode_fwd = calls.stub("torch reference", out)
    # q is a meta tensor, never CUDA: the Gluon module's gluon_serves answers no for it (tests/line_0_5_23/
    # test_p1_stack.py checks that on the CPU), so the Triton kernel's entry takes the call; both are the set's MMA kernel
    gluon = types.SimpleNamespace(gluon_serves=lambda q, *a: q.is_cuda,
                                  flash_mla_sparse_decode_mma_gluon=calls.stub("the set's MMA kernel", out))
    stubs = {p1_tree.GLUON_MODULE: gluon,
             p1_tree.MMA_MODULE: types.SimpleNamespace(flash_mla_sparse_decode_mma=calls.stub("the set's MMA kernel", out)),
             p1_tree.PER_HEAD_MODULE: types.SimpleNamespace(flash_mla_sparse_decode_triton=calls.stub("per-head Triton", out))}
    with scoped(sys.modules, stubs):
        module.flash_mla_with_kvcache_sm120(
            q=torch.empty(rows, 1, heads, 512, device="meta"), k_cache=None, indices=None, head_dim_v=512,
            softmax_scale=512 ** -0.5)
    return calls[-1][0]
