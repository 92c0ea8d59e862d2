"""DeepSeek-V4.1-Flash's start-up on an sm_120 card (capability 12.0), run on the CPU through 0.5.23's own code:
the sm_120 block of model_hook.py (the flags it sets for every DeepSeek-V4 architecture, V4.1 included), the
DeepGEMM configurer (deep_gemm_wrapper/configurer.py, run whole), the platform probes it reads (utils/common.py),
the attention backend's indexer construction (the two statements of DeepseekV4AttnBackend.__init__), the indexer
metadata it builds for the ratio-1/2 layers (init_forward_metadata_indexer, PagedIndexerMetadata) and the first
decode's and first verify's calls into DeepGEMM.

Faked: the device queries (torch.cuda's capability, NVML's) and the kernels. DeepGEMM is the pinned
sgl-deep-gemm 0.2.3.post2 wheel's own package over its own op schemas (harness/deep_gemm_wheel.py): a None where its
schema says Tensor raises. Not run: ServerArgs itself (0.5.23's runtime does not import on this CPU venv); the
recipe's arguments enter where they decide something here (DSPARK block 6: 7 verify rows per request).

On the pristine release both start-up failures show: the candidate indexer refuses to be built, and with that out
of the way (a config with no candidate layers) the first decode hands DeepGEMM no schedule. Patched, both start,
and every schedule DeepGEMM's logits kernel gets is the one deep_gemm.get_paged_mqa_logits_metadata made.
"""
from __future__ import annotations

import ast
import functools
import os
import sys
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

import pytest
import torch

from harness import deep_gemm_wheel
from harness.scoped import scoped
from harness.upstream import extract_functions, import_from_tree, tree_package
from tests.line_0_5_23 import v41_tree as V

HOOK = "sglang/srt/arg_groups/model_hook.py"
CONFIGURER = "sglang/srt/layers/deep_gemm_wrapper/configurer.py"
COMMON = "sglang/srt/utils/common.py"
RUNTIME = "sglang/srt/runtime_context.py"
BACKEND = "sglang/srt/layers/attention/deepseek_v4_backend.py"
INDEX_LOGITS = "sglang/kernels/ops/attention/dsv4/index_logits.py"
DENSE_BLOCKS = "sglang/srt/layers/attention/dsv4/v41_indexer/dense_blocks.py"
CANDIDATE_BLOCKS = "sglang/kernels/ops/attention/dsv4/candidate_blocks.py"
SMS = 188                    # an RTX PRO 6000's SM count: what DeepGEMM's get_num_sms answers there

# DeepSeek-V4.1-Flash's published config.json as public ports of it quote it (candidate layers from layer 20,
# 2048 candidate blocks of 8, index top-k 512, 40 layers, hidden 5120); index_n_heads 64 is V4-Flash's and the
# count DeepGEMM's sm_120 kernel accepts (tests/line_0_5_23/test_sizing_v41.py holds the same shape).
PUBLISHED = dict(model_type="deepseek_v41", num_hidden_layers=40, hidden_size=5120, index_topk=512, index_n_heads=64,
                 index_head_dim=128, candidate_source_layer_id=20, candidate_topk_blocks=2048, candidate_block_size=8)
# The recipe (docs/serving.md): DSPARK block 6, so a verify step scores block + 1 = 7 rows per request.
VERIFY_ROWS = 6 + 1


@pytest.fixture
def v41_config():
    return types.SimpleNamespace(**PUBLISHED)


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
        stack.enter_context(V.capability())
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
        root, calls = self.root, V.Calls()
        ns = {"__name__": V.PACKAGE, "__package__": V.PACKAGE, "functools": functools, "torch": torch,
              "Tuple": typing.Tuple, "is_cuda": self.platform_is_cuda, "FullTopKIndexer": self.full_topk_class()}
        names = ["is_sm100_or_newer", "has_dense_fp4_indexer", "_use_deep_gemm_prefill", "make_full_topk_indexer",
                 "make_candidate_indexer"]
        source = (root / V.INDEXER).read_text()
        names += ["is_sm12x"] if "def is_sm12x" in source else []
        extract_functions(root / V.INDEXER, names, ns)
        modules = {"deep_gemm": self.deep_gemm, "sglang.srt.runtime_context": self.runtime,
                   "sglang.srt.layers.deep_gemm_wrapper.configurer": self.configurer,
                   f"{V.PACKAGE}.dense_blocks": types.SimpleNamespace(DenseBlocksBackend=self.dense_blocks_class()),
                   f"{V.PACKAGE}.sparse_table": types.SimpleNamespace(
                       SparseTableBackend=V._recorder_class("SparseTableBackend", calls))}
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

    def full_topk_class(self):
        ns = {"torch": torch, "is_deep_select_supported": lambda: False,
              "deep_gemm_fp4_paged_mqa_logits": self.index_logits()["deep_gemm_fp4_paged_mqa_logits"],
              "topk_transform_paged_from_metadata": lambda *a, **k: None,
              "get_deep_gemm_decode_data": lambda inputs, pool: inputs.data,
              "DecodeInputs": object, "PrefillInputs": object, "DeepSeekV4TokenToKVPool": object}
        for n in ("topk_page_transform", "decode_scores", "dense_prefill_topk", "get_deep_gemm_prefill_data",
                  "prefill_requests", "select_decode", "write_prefill"):
            ns[n] = lambda *a, **k: None
        return extract_functions(self.root / V.FULL_TOPK, ["FullTopKIndexer"], ns)["FullTopKIndexer"]

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
        tree = ast.parse((root / V.METADATA).read_text())
        helpers = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in
                   ("plan_indexer_row_chunks", "iter_row_chunks", "copy_metadata")]
        consts = [n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                  and isinstance(n.targets[0], ast.Name) and n.targets[0].id.startswith("_")
                  and n.targets[0].id != "_IS_SM120" and isinstance(n.value, ast.Constant)]
        extract_functions(root / V.METADATA, consts + helpers + ["NonPagedIndexerPlan", "PagedIndexerMetadata"], ns)
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
        core = types.SimpleNamespace(page_table=torch.zeros(lens.numel(), pages * 64 * ratio // 256 + 1,
                                                            dtype=torch.int32)[:, :pages],
                                     c1_topk_lengths_clamp1=lens, c2_topk_lengths_clamp1=lens)
        with scoped(sys.modules, {"deep_gemm": self.deep_gemm}):
            return mns["init_forward_metadata_indexer"](backend, core, compress_ratio=ratio,
                                                        rows_per_request=rows_per_request)


def amax8_varlen(scores, seq_lens, topk=0, *, max_seqlen=0, out=None):
    """The JIT kernel's contract (candidate_blocks.amax8_varlen): out[b, i] = max of scores[b, 8i:8i+8] for
    i < ceil(seq_lens[b] / 8), the last of them +inf, nothing written past; here NaN stands for what is there."""
    rows, width = scores.shape
    out = torch.full((rows, (width + 7) // 8), float("nan")) if out is None else out
    for b in range(rows):
        n = (int(seq_lens[b]) + 7) // 8
        if n > topk or topk == 0:
            padded = torch.nn.functional.pad(scores[b, : 8 * n], (0, 8 * n - min(8 * n, width)))
            out[b, :n] = padded.view(n, 8).amax(-1).to(out.dtype)
            out[b, n - 1] = torch.inf
    return out


def _decode_inputs(root, rows: int, metadata, topk: int = 512):
    heads = PUBLISHED["index_n_heads"]
    data = V.decode_data_class(root)(torch.zeros(rows, 1, heads, 64, dtype=torch.int8), torch.zeros(rows, 1, heads),
                                     torch.zeros(rows, heads), torch.zeros(1, 64, 1, 68, dtype=torch.uint8))
    return types.SimpleNamespace(paged_metadata=metadata, data=data, indexer=types.SimpleNamespace(index_topk=topk),
                                 out_page_indices=torch.full((rows, topk), -1, dtype=torch.int32))


@pytest.fixture(params=["eager", "graph capture"])
def capture(request):
    return request.param == "graph capture"


def _start(root, tmp_path, stack, capture):
    recorder = deep_gemm_wheel.Recorder()
    return Release(root, tmp_path, recorder).start(stack, capture), recorder


def test_pristine_refuses_the_candidate_indexer_at_start(pristine_root, tmp_path, v41_config):
    from contextlib import ExitStack
    with ExitStack() as stack:
        release, _ = _start(pristine_root, tmp_path, stack, capture=False)
        # the release computes these; nothing here sets them
        assert release.platform.is_sm120 and not release.platform.is_sm100
        assert release.configurer.ENABLE_JIT_DEEPGEMM is True
        assert release.configurer.DEEPGEMM_BLACKWELL is False
        assert release.configurer.DEEPGEMM_PAGED_SPARSE_MQA_LOGITS is False
        with pytest.raises(RuntimeError, match="the candidate indexer needs DeepGEMM's paged sparse MQA logits"):
            release.indexers(v41_config)


def test_pristine_first_decode_hands_deep_gemm_no_schedule(pristine_root, tmp_path, v41_config, capture):
    """With the candidate layers out of the way (the --json-model-override-args workaround), the full top-k
    layers' first decode: the model hook's SGLANG_FP8_PAGED_MQA_LOGITS_TORCH leaves the schedule None."""
    from contextlib import ExitStack
    v41_config.candidate_topk_blocks, v41_config.candidate_source_layer_id = 0, -1
    with ExitStack() as stack:
        release, dg = _start(pristine_root, tmp_path, stack, capture)
        assert release.envs.SGLANG_FP8_PAGED_MQA_LOGITS_TORCH.get() is True      # the hook's sm_120 block
        backend = release.indexers(v41_config)
        assert backend.full_topk_indexer.use_deep_gemm_decode
        metadata = release.indexer_metadata(rows_per_request=1, lens=torch.tensor([5, 1000, 70000]), pages=4096 * 4)
        assert metadata.deep_gemm_metadata is None
        with pytest.raises(RuntimeError, match="argument 'schedule_meta' is a Tensor in DeepGEMM's schema"):
            backend.full_topk_indexer.topk_decode(_decode_inputs(pristine_root, 3, metadata))
        assert "get_paged_mqa_logits_metadata" not in dg.names()


@pytest.mark.parametrize("rows_per_request", [1, VERIFY_ROWS], ids=["decode", "DSPARK verify, block 6"])
def test_patched_starts_and_every_schedule_is_deep_gemm_own(patched_root, tmp_path, v41_config, capture,
                                                             rows_per_request):
    from contextlib import ExitStack
    with ExitStack() as stack:
        release, dg = _start(patched_root, tmp_path, stack, capture)
        assert release.configurer.DEEPGEMM_PAGED_SPARSE_MQA_LOGITS is False
        backend = release.indexers(v41_config)
        assert backend.prefill_candidates is backend.decode_candidates
        assert type(backend.decode_candidates).__name__ == "DenseBlocksBackend"
        assert backend.decode_candidates.use_deep_gemm_decode
        assert backend.decode_candidates.topk_blocks == 2048 and backend.decode_candidates.block_size == 8
        requests = 3
        lens = torch.tensor([5, 1000, 70000]).repeat_interleave(rows_per_request)
        lens = lens + torch.arange(rows_per_request).repeat(requests)
        metadata = release.indexer_metadata(rows_per_request=rows_per_request, lens=lens, pages=4096 * 4)
        made = [args for name, args in dg.calls if name == "get_paged_mqa_logits_metadata"]
        assert len(made) == 1 and made[0][0].tolist() == lens.view(-1, rows_per_request).tolist()
        inputs = _decode_inputs(patched_root, lens.numel(), metadata)
        backend.full_topk_indexer.topk_decode(inputs)
        published = backend.decode_candidates.publish_decode(inputs)
        backend.decode_candidates.consume_decode(inputs, published)
        logits_calls = [args for name, args in dg.calls if name == "fp8_fp4_paged_mqa_logits"]
        assert len(logits_calls) == 3                       # full top-k, candidate source, candidate consumer
        for args in logits_calls:
            assert args[6] is metadata.deep_gemm_metadata    # DeepGEMM's own schedule, not SGLang's planner
            assert args[4].tolist() == lens.view(-1, rows_per_request).tolist()
