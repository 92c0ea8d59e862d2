"""Load 0.5.23's V4.1 dispatch functions from a tree on a CPU that says it is an sm_120 card (capability 12.0).

Release runs the start-up path: the model hook's sm_120 block, the DeepGEMM configurer, the platform probes, the
attention backend's indexer construction (dsv4/v41_indexer/__init__.py, dense_blocks.py, full_topk.py) and the
indexer metadata it builds (dsv4/metadata.py), each compiled from the tree (their modules import the serving
runtime), every flag as the release computes it; only the device queries (torch, NVML) are faked, DeepGEMM is the
pinned wheel over its own op schemas (harness/deep_gemm_wheel.py). V4.1's MHC mixing dispatch
(deepseek_v4_mhc.py) and the sparse-attention route load the same way. What needs a GPU (the top-k and mixing
kernels) is a recorder.
"""
from __future__ import annotations

import argparse
import ast
import functools
import importlib
import json
import os
import sys
import types
import typing
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from harness import deep_gemm_wheel
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


# ---- the start-up path of a tree at capability 12.0, DeepGEMM the pinned wheel over its op schemas ----

HOOK = "sglang/srt/arg_groups/model_hook.py"
CONFIGURER = "sglang/srt/layers/deep_gemm_wrapper/configurer.py"
COMMON = "sglang/srt/utils/common.py"
RUNTIME = "sglang/srt/runtime_context.py"
BACKEND = "sglang/srt/layers/attention/deepseek_v4_backend.py"
INDEX_LOGITS = "sglang/kernels/ops/attention/dsv4/index_logits.py"
DENSE_BLOCKS = "sglang/srt/layers/attention/dsv4/v41_indexer/dense_blocks.py"
CANDIDATE_BLOCKS = "sglang/kernels/ops/attention/dsv4/candidate_blocks.py"
SMS = 188                    # an RTX PRO 6000's SM count: what DeepGEMM's get_num_sms answers there


def _nvml(major_minor):
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetCudaComputeCapability = lambda handle: major_minor
    return nvml


def _body_of_sm120_branch(root: Path) -> ast.Module:
    """The `if get_platform().is_sm120:` block of handle_model_specific_adjustments' DeepSeek-V4 branch."""
    tree = ast.parse((root / HOOK).read_text())
    hook = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "handle_model_specific_adjustments")
    for node in ast.walk(hook):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "get_platform().is_sm120" and any(
                "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH" in ast.unparse(s) for s in node.body):
            return ast.Module(body=node.body, type_ignores=[])
    raise AssertionError("no sm_120 block in handle_model_specific_adjustments")


def _method(root: Path, cls: str, name: str) -> ast.FunctionDef:
    tree = ast.parse((root / BACKEND).read_text())
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)


class Release:
    """0.5.23's start-up pieces of one tree, evaluated at capability 12.0 with DeepGEMM recorded."""

    def __init__(self, root: Path, tmp: Path, recorder: deep_gemm_wheel.Recorder):
        self.root, self.tmp, self.dg = Path(root), tmp, recorder
        recorder.answers.update({
            "get_num_sms": lambda: SMS,
            "get_paged_mqa_logits_metadata": lambda lens, block, sms, idx: torch.zeros(sms + 1, 2, dtype=torch.int32),
            "fp8_fp4_paged_mqa_logits": lambda q, q_sf, kv, w, lens, table, meta, width, clean, dtype, idx:
                torch.zeros(lens.numel(), width, dtype=dtype),
        })

    def start(self, stack, capture: bool):
        root = self.root
        stack.enter_context(scoped(os.environ, {k: None for k in os.environ if k.startswith("SGLANG_")}))
        saved_env = dict(os.environ)
        stack.callback(lambda: (os.environ.clear(), os.environ.update(saved_env)))
        stack.enter_context(capability())
        stack.enter_context(scoped(sys.modules, {"pynvml": _nvml((12, 0))}))
        saved = (torch.cuda.is_initialized, getattr(torch.cuda, "_get_nvml_device_index", None))
        torch.cuda.is_initialized = lambda: False
        torch.cuda._get_nvml_device_index = lambda i: i
        stack.callback(lambda: setattr(torch.cuda, "is_initialized", saved[0]) or
                       setattr(torch.cuda, "_get_nvml_device_index", saved[1]))
        with tree_package(root, "sglang"):
            self.envs = import_from_tree(root, "sglang.srt.environ").envs
        # the model hook's sm_120 block, as the server runs it for DeepseekV4ForCausalLM (V4.1's normalised arch)
        exec(compile(_body_of_sm120_branch(root), str(root / HOOK), "exec"), {"envs": self.envs})
        common = extract_functions(root / COMMON, [
            "is_hip", "is_cuda", "is_musa", "_get_device_sm_via_nvml", "get_device_sm", "_check_cuda_device_version",
            "is_sm90_supported", "is_sm100_supported", "is_sm120_supported"],
            {"torch": torch, "lru_cache": functools.lru_cache, "partial": functools.partial, "List": typing.List,
             "Tuple": typing.Tuple, "Optional": typing.Optional,
             "logger": types.SimpleNamespace(debug=lambda *a, **k: None)})
        probes = next(ast.literal_eval(n.value) for n in ast.parse((root / RUNTIME).read_text()).body
                      if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "_PLATFORM_PROBES")
        self.platform = types.SimpleNamespace(**{fact: common[p]() for fact, p in probes.items() if p in common})
        self.deep_gemm = stack.enter_context(deep_gemm_wheel.deep_gemm(self.tmp, self.dg))
        utils = types.SimpleNamespace(**{n: common[n] for n in ("get_device_sm", "is_cuda", "is_musa")})
        self.runtime = types.SimpleNamespace(get_platform=lambda: self.platform,
                                             get_parallel=lambda: types.SimpleNamespace(attn_cp_size=1))
        configurer = types.ModuleType("sglang.srt.layers.deep_gemm_wrapper.configurer")
        with scoped(sys.modules, {"sglang.srt.environ": types.SimpleNamespace(envs=self.envs),
                                  "sglang.srt.runtime_context": self.runtime, "sglang.srt.utils": utils}):
            exec(compile((root / CONFIGURER).read_text(), str(root / CONFIGURER), "exec"), configurer.__dict__)
        self.configurer = configurer
        self.capture = capture
        return self

    # ---- the backend's indexer construction ----

    def indexers(self, cfg):
        """The two statements of DeepseekV4AttnBackend.__init__ that build the V4.1 indexers, run on the tree's
        make_candidate_indexer / make_full_topk_indexer (the tree's DenseBlocksBackend, FullTopKIndexer)."""
        root, calls = self.root, Calls()
        ns = {"__name__": PACKAGE, "__package__": PACKAGE, "functools": functools, "torch": torch,
              "Tuple": typing.Tuple, "is_cuda": self.platform_is_cuda, "FullTopKIndexer": self.full_topk_class()}
        names = ["is_sm100_or_newer", "has_dense_fp4_indexer", "_use_deep_gemm_prefill", "make_full_topk_indexer",
                 "make_candidate_indexer"]
        source = (root / INDEXER).read_text()
        names += ["is_sm12x"] if "def is_sm12x" in source else []
        extract_functions(root / INDEXER, names, ns)
        modules = {"deep_gemm": self.deep_gemm, "sglang.srt.runtime_context": self.runtime,
                   "sglang.srt.layers.deep_gemm_wrapper.configurer": self.configurer,
                   f"{PACKAGE}.dense_blocks": types.SimpleNamespace(DenseBlocksBackend=self.dense_blocks_class()),
                   f"{PACKAGE}.sparse_table": types.SimpleNamespace(
                       SparseTableBackend=_recorder_class("SparseTableBackend", calls))}
        init = _method(root, "DeepseekV4AttnBackend", "__init__")
        build = [s for s in init.body if "make_candidate_indexer" in ast.unparse(s) or
                 "make_full_topk_indexer" in ast.unparse(s)]
        assert len(build) == 2, "the backend builds its V4.1 indexers elsewhere"
        backend = types.SimpleNamespace(token_to_kv_pool=None, req_to_token=None, page_size=256)
        with scoped(sys.modules, modules):
            exec(compile(ast.Module(body=build, type_ignores=[]), str(root / BACKEND), "exec"),
                 {**ns, "self": backend, "cfg": cfg})
        return backend

    def platform_is_cuda(self):
        return self.platform.is_cuda

    def index_logits(self):
        """index_logits.py's deep_gemm_fp4_paged_mqa_logits and its dtype choices, over the stand-in DeepGEMM."""
        ns = {"torch": torch, "functools": functools, "envs": self.envs, "Tuple": typing.Tuple,
              "_is_sm100": lambda: self.platform.is_sm100}
        return extract_functions(self.root / INDEX_LOGITS, ["index_logits_dtype", "index_weights_dtype",
                                                              "deep_gemm_fp4_paged_mqa_logits"], ns)

    def prefill_topk(self, lens: torch.Tensor, topk: int = 512) -> Calls:
        """scoring.py's dense_prefill_topk of the tree (a full top-k layer's DeepGEMM prefill; the candidate
        source's prefill makes the same topk_ragged call) over one tile of logits in the dtype the release asks
        DeepGEMM's dense logits for (index_logits.py's index_logits_dtype): the top-k kernels it calls, recorded."""
        calls = Calls()
        logits = torch.zeros(lens.numel(), int(lens.max()), dtype=self.index_logits()["index_logits_dtype"]())
        data = types.SimpleNamespace(request_starts=torch.zeros_like(lens), compress_lens=lens)
        ns = {"torch": torch, "Tuple": typing.Tuple,
              "score_tiles": lambda data, kv: iter([(slice(0, lens.numel()), logits)])}
        extract_functions(self.root / SCORING, ["topk_ragged", "dense_prefill_topk"], ns)
        dsv4 = types.ModuleType("sglang.kernels.ops.attention.dsv4")
        dsv4.topk_transform_ragged_v2 = calls.stub("topk_transform_ragged_v2")
        deep_select = types.ModuleType("sglang.kernels.ops.attention.deep_select")
        deep_select.topk = calls.stub("deep_select.topk")
        with scoped(sys.modules, {dsv4.__name__: dsv4, deep_select.__name__: deep_select}):
            ns["dense_prefill_topk"](data, None, out=torch.full((lens.numel(), topk), -1, dtype=torch.int32))
        return calls

    def full_topk_class(self):
        ns = {"torch": torch, "is_deep_select_supported": lambda: False,
              "deep_gemm_fp4_paged_mqa_logits": self.index_logits()["deep_gemm_fp4_paged_mqa_logits"],
              "topk_transform_paged_from_metadata": lambda *a, **k: None,
              "get_deep_gemm_decode_data": lambda inputs, pool: inputs.data,
              "DecodeInputs": object, "PrefillInputs": object, "DeepSeekV4TokenToKVPool": object}
        for n in ("topk_page_transform", "decode_scores", "dense_prefill_topk", "get_deep_gemm_prefill_data",
                  "prefill_requests", "select_decode", "write_prefill"):
            ns[n] = lambda *a, **k: None
        return extract_functions(self.root / FULL_TOPK, ["FullTopKIndexer"], ns)["FullTopKIndexer"]

    def dense_blocks_class(self):
        """The tree's DenseBlocksBackend: its DeepGEMM logits through index_logits.py, topk_among_blocks the
        release's own torch op, amax8_varlen (a CUDA kernel) by its documented contract."""
        tree = ast.parse((self.root / DENSE_BLOCKS).read_text())
        helpers = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        ns = {"torch": torch, "Optional": typing.Optional, "List": typing.List, "Tuple": typing.Tuple,
              "BlockIds": lambda **k: types.SimpleNamespace(**k), "PagedDecodeScores": type("P", (), {}),
              "DeepGEMMDecodeData": object, "DeepGEMMPrefillData": object, "DecodeInputs": object,
              "PrefillInputs": object, "FLAT_LOGITS_WIDTH_ALIGN": 256, "amax8_varlen": amax8_varlen,
              "deep_gemm_fp4_paged_mqa_logits": self.index_logits()["deep_gemm_fp4_paged_mqa_logits"],
              "topk_transform_paged_from_metadata": lambda *a, **k: None,
              "get_deep_gemm_decode_data": lambda inputs, pool: inputs.data,
              "F": torch.nn.functional}
        extract_functions(self.root / CANDIDATE_BLOCKS, ["topk_among_blocks"], ns)
        return extract_functions(self.root / DENSE_BLOCKS, ["DenseBlocksBackend"] + helpers, ns)["DenseBlocksBackend"]

    # ---- the decode and verify metadata of a ratio-1/2 layer ----

    def indexer_metadata(self, *, rows_per_request: int, lens: torch.Tensor, pages: int, ratio: int = 1):
        """DeepseekV4AttnBackend.init_forward_metadata_indexer of the tree for a ratio-1/2 layer: its
        PagedIndexerMetadata (metadata.py) over the stand-in DeepGEMM, under the release's flags."""
        root = self.root
        ns = {"torch": torch, "dataclass": dataclass, "field": field, "fields": fields, "Any": typing.Any,
              "Optional": typing.Optional, "List": typing.List, "envs": self.envs, "is_hip": lambda: False,
              "is_xpu": lambda: False, "_IS_SM120": self.platform.is_sm120,
              "logger": types.SimpleNamespace(debug=lambda *a, **k: None),
              "mqa_logits_needs_budget_check": lambda **k: True, "get_is_capture_mode": lambda: self.capture,
              "is_in_breakable_cuda_graph": lambda: False, "is_in_tc_piecewise_cuda_graph": lambda: False,
              "mqa_logits_budget_bytes": lambda **k: 1 << 40}
        tree = ast.parse((root / METADATA).read_text())
        helpers = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in
                   ("plan_indexer_row_chunks", "iter_row_chunks", "copy_metadata")]
        consts = [n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                  and isinstance(n.targets[0], ast.Name) and n.targets[0].id.startswith("_")
                  and n.targets[0].id != "_IS_SM120" and isinstance(n.value, ast.Constant)]
        extract_functions(root / METADATA, consts + helpers + ["NonPagedIndexerPlan", "PagedIndexerMetadata"], ns)
        method = _method(root, "DeepseekV4AttnBackend", "init_forward_metadata_indexer")
        method.decorator_list = []
        mns = {"PagedIndexerMetadata": ns["PagedIndexerMetadata"], "get_platform": lambda: self.platform,
               "_is_xpu": False, "Optional": typing.Optional, "DSV4AttnMetadata": object,
               "expand_index_page_table": lambda page_table, **k: page_table}
        exec(compile(ast.Module(body=[method], type_ignores=[]), str(root / BACKEND), "exec"), mns)
        backend = types.SimpleNamespace(
            page_size=256, enable_deepseek_v4_fp4_indexer=False,      # --enable-deepseek-v4-fp4-indexer: default off
            dsa_topk_backend=types.SimpleNamespace(should_use_topk_v2=lambda: self.envs.SGLANG_OPT_USE_TOPK_V2.get()),
            token_to_kv_pool=types.SimpleNamespace(get_index_k_page_size=lambda r: 64))
        # the page table at the index pages' 64-slot granularity (expand_index_page_table's output)
        core = types.SimpleNamespace(page_table=torch.zeros(lens.numel(), pages, dtype=torch.int32),
                                     c1_topk_lengths_clamp1=lens, c2_topk_lengths_clamp1=lens)
        # SGLang's own JIT planner (split_kv 256), which the release takes instead of DeepGEMM's when its flags say
        # so: a recorder of its own name, returning the shape DeepGEMM's does, so only the name tells them apart
        planner = types.ModuleType("sglang.kernels.ops.attention.dsv4")
        planner.get_paged_mqa_logits_metadata = lambda lens, block, sms: self.dg(
            "sglang.get_paged_mqa_logits_metadata", lens, block, sms) or torch.zeros(sms + 1, 2, dtype=torch.int32)
        with scoped(sys.modules, {"deep_gemm": self.deep_gemm, planner.__name__: planner}):
            return mns["init_forward_metadata_indexer"](backend, core, compress_ratio=ratio,
                                                        rows_per_request=rows_per_request)


def amax8_varlen(scores, seq_lens, topk=0, *, max_seqlen=0, out=None):
    """The JIT kernel's contract (candidate_blocks.amax8_varlen): out[b, i] = max of scores[b, 8i:8i+8] for
    i < ceil(seq_lens[b] / 8), the last of them +inf, nothing written past; here NaN stands for what is there."""
    rows, width = scores.shape
    out = torch.full((rows, (width + 7) // 8), float("nan"), device=scores.device) if out is None else out
    for b in range(rows):
        n = (int(seq_lens[b]) + 7) // 8
        if n > topk or topk == 0:
            padded = torch.nn.functional.pad(scores[b, : 8 * n], (0, 8 * n - min(8 * n, width)))
            out[b, :n] = padded.view(n, 8).amax(-1).to(out.dtype)
            out[b, n - 1] = torch.inf
    return out


# ---- the recipe's arguments through the tree's own ServerArgs, at capability 12.0 ----

SERVER_ARGS = "sglang.srt.server_args"
DSPARK_CONFIG = "sglang/srt/speculative/dspark_components/dspark_config.py"
# What 0.5.23's server_args and its hooks import that needs transformers (the checkpoint's config reader) or a
# notebook: each is a module whose every name raises when called, so no answer can come from one of them.
TRANSFORMERS_SIDE = ("sglang.srt.configs.model_config", "sglang.srt.utils.hf_transformers_utils", "IPython",
                     "IPython.display")
RTX_PRO_6000 = types.SimpleNamespace(name="NVIDIA RTX PRO 6000 Blackwell Server Edition", major=12, minor=0,
                                     total_memory=95 << 30, multi_processor_count=SMS)


class NotRunHere(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def refuse(*args, **kwargs):
            raise ModuleNotFoundError(f"{self.__name__}.{name}: needs transformers, not run on this CPU venv")
        refuse.from_server_args = refuse
        return refuse


@contextmanager
def rtx_pro_6000(cards: int = 8):
    """torch answers as a CUDA build on `cards` RTX PRO 6000s (capability 12.0), NVML too."""
    names = ("get_device_name", "get_device_properties", "device_count", "current_device")
    saved = {n: getattr(torch.cuda, n) for n in names}
    torch.cuda.get_device_name = lambda *a, **k: RTX_PRO_6000.name
    torch.cuda.get_device_properties = lambda *a, **k: RTX_PRO_6000
    torch.cuda.device_count = lambda: cards
    torch.cuda.current_device = lambda: 0
    try:
        with capability((RTX_PRO_6000.major, RTX_PRO_6000.minor)), scoped(sys.modules, {"pynvml": _nvml((12, 0))}):
            yield
    finally:
        for n, f in saved.items():
            setattr(torch.cuda, n, f)


def hf_config(root: Path, config_json: dict):
    """The checkpoint's config.json as the tree's DeepSeek-V4.1 config reads it: text_config flattened, the
    architecture normalised to V4's (configs/deepseek_v41.py's normalize_deepseek_v41_config)."""
    ns = extract_functions(Path(root) / V41_CONFIG, ["_VISION_FIELDS", "_config_dict", "normalize_deepseek_v41_config"],
                           {"PretrainedConfig": type("PretrainedConfig", (), {})})
    return types.SimpleNamespace(**ns["normalize_deepseek_v41_config"](config_json))


def resolve_speculative(root: Path, argv: list[str], config, names: typing.Iterable[str]) -> types.SimpleNamespace:
    """`argv` (sglang.launch_server's arguments) parsed by the tree's ServerArgs.add_cli_args into its ServerArgs,
    then the resolution steps that decide DSPARK's numbers, as run_resolution_pipeline runs them:
    handle_missing_default_values (the device) and handle_speculative_decoding (DSPARK's draft path, steps,
    verify window and max_running_requests). Returns the resolved value of each of `names`.

    `config` is the checkpoint's config (hf_config), handed to the record as a configuration a fixture supplies
    (model_config_of returns it as it is). dspark_config.py's functions are compiled from the tree without the
    module's import of dflash_utils (which imports the model runtime); its read of the draft checkpoint goes
    through the transformers side and fails, which _handle_dspark logs and steps over, as it would for an
    unreadable draft config: the recipe's explicit block size decides."""
    root = Path(root)
    dspark = types.ModuleType("sglang.srt.speculative.dspark_components.dspark_config")
    with rtx_pro_6000(), tree_package(root, "sglang"), \
            scoped(sys.modules, {n: NotRunHere(n) for n in TRANSFORMERS_SIDE}):
        server_args = importlib.import_module(SERVER_ARGS)
        overrides = importlib.import_module("sglang.srt.arg_groups.overrides")
        dspark.__dict__.update(json=json, resolved_view=overrides.resolved_view)
        extract_functions(root / DSPARK_CONFIG, ["DEFAULT_DSPARK_GAMMA", "_cfg_get", "checkpoint_bundles_dspark_draft",
                                                 "read_draft_checkpoint_config"], dspark.__dict__)
        sys.modules[dspark.__name__] = dspark
        parser = argparse.ArgumentParser(prog="sglang serve")      # as prepare_server_args builds it
        server_args.ServerArgs.add_cli_args(parser)
        record = server_args.ServerArgs.from_cli_args(parser.parse_args(argv))
        record._model_config = types.SimpleNamespace(hf_config=config)
        # resolve_once's and run_resolution_pipeline's own preamble
        record._input_frozen = True
        record._raw_input = {f.name: getattr(record, f.name)
                             for f in importlib.import_module("sglang.srt.arg_groups.arg_utils").record_fields(
                                 type(record))}
        record._resolved_overrides = list(getattr(record, "_resolved_overrides", ()))
        hooks = importlib.import_module("sglang.srt.arg_groups.serving_hook")
        speculative = importlib.import_module("sglang.srt.arg_groups.speculative_hook")
        hooks.handle_missing_default_values(record)
        speculative.handle_speculative_decoding(record)
        view = overrides.resolving_view(record)
        return types.SimpleNamespace(**{n: getattr(view, n) for n in names})
