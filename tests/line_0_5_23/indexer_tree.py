"""0.5.23's V4.1 indexer functions field-check's indexer stage calls (serving/field_indexer.py IndexerParts), out of
a tree or its slice, without the serving runtime: each definition compiled out of its own file with the file's
name and line numbers (Triton reads its kernels' source from there).

What cannot come from the files: `get_platform()` of the fp4 quantiser, answered `is_blackwell=False`, which only
picks its one-row launch over the multi-row launch of the same arithmetic; and, where no `amax8` is given,
amax8_varlen, a JIT CUDA module of sglang's runtime, is tests/line_0_5_23/v41_tree.py's torch implementation of
its documented contract (the row says so). DeepGEMM is whatever `import deep_gemm` finds when the stage asks.
"""
from __future__ import annotations

import ast
import functools
import types
import typing
from pathlib import Path

from bench.kernels.v41_candidate_gpu import load_defs
from harness.scoped import scoped
from harness.upstream import import_from_tree
from serving import field_indexer as FI

QUANT = "sglang/kernels/ops/quantization/fp4_indexer_quant.py"
STORE = "sglang/kernels/ops/kvcache/dsv4_fp4_index_k_cache.py"
FP4_INDEXER = "sglang/kernels/ops/attention/dsv4/fp4_indexer.py"
POOL = "sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
FP8 = "sglang/srt/layers/quantization/fp8.py"
SPARSE = "sglang/srt/layers/attention/dsv4/dsv41_sparse.py"
DENSE_BLOCKS = "sglang/srt/layers/attention/dsv4/v41_indexer/dense_blocks.py"
CANDIDATE_BLOCKS = "sglang/kernels/ops/attention/dsv4/candidate_blocks.py"
INDEX_LOGITS = "sglang/kernels/ops/attention/dsv4/index_logits.py"
ENVIRON = "sglang/srt/environ.py"
# what parts() reads: the files a GPU box's slice carries for the indexer stage (tests/line_0_5_23/p1_tree.py SLICE)
FILES = (QUANT, STORE, FP4_INDEXER, POOL, FP8, SPARSE, DENSE_BLOCKS, CANDIDATE_BLOCKS, INDEX_LOGITS, ENVIRON)
FP8_MODULE = "sglang.srt.layers.quantization.fp8"
STAND_IN_AMAX8 = ("tests/line_0_5_23/v41_tree.py's torch amax8_varlen (its documented contract; sglang's JIT CUDA "
                  "kernel needs the serving runtime)")


def _method(path: Path, cls: str, name: str, namespace: dict):
    """One method of a class of `path`, compiled alone as a function (self its first argument)."""
    tree = ast.parse(path.read_text())
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def parts(root: Path, amax8=None) -> FI.IndexerParts:
    import torch
    import torch.nn.functional as F
    import triton
    import triton.language as tl

    root = Path(root)
    base = {"torch": torch, "triton": triton, "tl": tl}
    quant = load_defs(root / QUANT, ["quantize_fp4_indexer_tensor"],
                      {**base, "get_platform": lambda: types.SimpleNamespace(is_blackwell=False)})
    slot = load_defs(root / FP4_INDEXER, ["INDEX_K_SLOT_BYTES"], dict(base))
    store = load_defs(root / STORE, ["store_fp4_index_k_cache"],
                      {**base, "INDEX_K_SLOT_BYTES": slot["INDEX_K_SLOT_BYTES"],
                       "quantize_fp4_indexer_tensor": quant["quantize_fp4_indexer_tensor"]})
    fp8 = types.SimpleNamespace(**{k: v for k, v in load_defs(root / FP8, ["DSV4_DEQUANT_FP4_TABLE"], {"torch": torch})
                                   .items() if k == "DSV4_DEQUANT_FP4_TABLE"})
    get_dequant = _method(root / POOL, "DeepSeekV4IndexerPool", "get_index_k_dequant",
                          {"torch": torch, "Optional": typing.Optional})
    pool_dequant = FI.pool_dequant(get_dequant)

    def dequant(cache, slots, page_size):
        with scoped(__import__("sys").modules, {FP8_MODULE: fp8}):     # the method imports the table when called
            return pool_dequant(cache, slots, page_size)

    scores = _method(root / SPARSE, "DeepseekV41Indexer", "scores", {"torch": torch})
    blocks = load_defs(root / CANDIDATE_BLOCKS, ["topk_among_blocks"],
                       {"torch": torch, "F": F, "Optional": typing.Optional, "Union": typing.Union})
    if amax8 is None:
        from tests.line_0_5_23.v41_tree import amax8_varlen as amax8
        amax8_label = STAND_IN_AMAX8
    else:
        amax8_label = "the given amax8_varlen"
    try:
        dense = load_defs(root / DENSE_BLOCKS, ["paged_topk_block_ids", "_positions_to_pool_slots"],
                          {"torch": torch, "amax8_varlen": amax8})
        missing = None
    except KeyError:               # a tree without the line's V4.1 start-up patch
        dense, missing = {}, FI.NO_CANDIDATE

    def deep_gemm():
        import deep_gemm as dg

        envs = import_from_tree(root, "sglang.srt.environ").envs
        logits = load_defs(root / INDEX_LOGITS, ["deep_gemm_fp4_paged_mqa_logits"],
                           {"torch": torch, "functools": functools, "Tuple": typing.Tuple, "envs": envs})
        return dg.get_paged_mqa_logits_metadata, dg.get_num_sms, logits["deep_gemm_fp4_paged_mqa_logits"]

    return FI.IndexerParts(
        where=f"0.5.23's V4.1 indexer functions out of {root.name}", quantize=quant["quantize_fp4_indexer_tensor"],
        store=store["store_fp4_index_k_cache"], dequant=dequant, scores=lambda q, k, w: scores(None, q, k, w),
        deep_gemm=deep_gemm, block_ids=dense.get("paged_topk_block_ids"), among_blocks=blocks["topk_among_blocks"],
        to_slots=dense.get("_positions_to_pool_slots"), amax8=amax8_label, candidate_missing=missing)
