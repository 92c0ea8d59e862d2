"""DeepSeek-V4.1-Flash's start-up on an sm_120 card (capability 12.0), run on the CPU through 0.5.23's own code:
the recipe's arguments (docs/serving.md, through serving/serve_cmd.py as `make serve` builds them) parsed by the
release's ServerArgs and resolved by its own DSPARK steps (the verify rows and max_running_requests this module
uses), the sm_120 block of model_hook.py (the flags it sets for every DeepSeek-V4 architecture, V4.1 included), the
DeepGEMM configurer (deep_gemm_wrapper/configurer.py, run whole), the platform probes it reads (utils/common.py),
the attention backend's indexer construction (the two statements of DeepseekV4AttnBackend.__init__), the indexer
metadata it builds for the ratio-1/2 layers (init_forward_metadata_indexer, PagedIndexerMetadata) and the first
decode's and first verify's calls into DeepGEMM.

Faked: the device queries (torch.cuda's capability, name, properties and count, NVML's) and the kernels. DeepGEMM
is the pinned sgl-deep-gemm 0.2.3.post2 wheel's own package over its own op schemas (harness/deep_gemm_wheel.py):
a None where its schema says Tensor raises. ServerArgs is not resolved whole (resolve_once): its pipeline module
imports sglang.srt.configs, whose package imports transformers (0.5.23 pins transformers 5.19.0, with
huggingface-hub, tokenizers and safetensors), which the CPU venv does not carry; so the record runs the two
resolution steps that decide DSPARK's numbers (handle_missing_default_values, handle_speculative_decoding) with the
checkpoint's config handed in as a fixture configuration, and the transformers side (the model config reader,
hf_transformers_utils) raising if called (tests/line_0_5_23/v41_tree.py, resolve_speculative).

On the pristine release both start-up failures show: the candidate indexer refuses to be built, and with that out
of the way (a config with no candidate layers) the first decode hands DeepGEMM no schedule. Patched, both start,
and every schedule DeepGEMM's logits kernel gets is the one deep_gemm.get_paged_mqa_logits_metadata made.
"""
from __future__ import annotations

import argparse
import shlex
import types
from contextlib import ExitStack

import pytest
import torch

from harness import deep_gemm_wheel
from serving import REPO, serve_cmd
from tests.line_0_5_23 import v41_tree as V

# DeepSeek-V4.1-Flash's published config.json (deepseek-ai/DeepSeek-V4.1-Flash), the keys read here: candidate
# layers from layer 20, 2048 candidate blocks of 8, index top-k 512 over 32 index heads of 128, 40 layers, hidden
# 5120, the DSPARK draft bundled (dspark_* keys; the checkpoint's own block size is 5). Source: TensorRT-LLM's
# DeepseekV41TextConfig (NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/configs/deepseek_v41.py at fa013630, "every
# default here is the released DeepSeek-V4.1-Flash value": index_n_heads 32, index_head_dim 128, dspark_block_size
# 5); the ports bench/kernels/v41_candidate_cost.py cites (an mlx-lm port's fixture naming revision
# deepseek-ai/DeepSeek-V4.1-Flash@dba1be0a, a vllm-gaudi test) read the same 32. V4-Flash has 64; DeepGEMM's paged
# MQA logits take 32 or 64.
PUBLISHED_TEXT = dict(model_type="deepseek_v41_text", num_hidden_layers=40, hidden_size=5120, index_topk=512,
                      index_n_heads=32, index_head_dim=128, candidate_source_layer_id=20, candidate_topk_blocks=2048,
                      candidate_block_size=8, num_nextn_predict_layers=3, dspark_block_size=5,
                      dspark_noise_token_id=128799, dspark_target_layer_ids=[37, 38, 39], dspark_markov_rank=256)
PUBLISHED = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "text_config": PUBLISHED_TEXT}
# What the recipe (docs/serving.md: DSPARK block 6) resolves to, as test_the_recipe_resolves_through_server_args
# shows the release computing it: a verify step scores block + 1 = 7 rows per request, at most 48 requests.
VERIFY_ROWS = 6 + 1
MAX_RUNNING_REQUESTS = 48
RECIPE = "make serve MODEL=/models/DeepSeek-V4.1-Flash"
# `make serve`'s variables and the serve_cmd flags the Makefile's SERVE_ARGS passes them as
MAKE_SERVE_FLAGS = {"MODEL": "--model", "TP": "--tp", "CONTEXT": "--context", "HOST": "--host",
                    "SGLANG_ARGS": "--sglang-args"}


def recipe_argv(doc=REPO / "docs/serving.md") -> list[str]:
    """sglang.launch_server's arguments for the V4.1 recipe's `make serve` line, as serving/serve_cmd.py builds
    them from the variables the line sets."""
    text = doc.read_text()
    if RECIPE not in text:
        raise AssertionError(f"{doc}: expected a line starting {RECIPE!r}, found none")
    lines = text[text.index(RECIPE):].splitlines()
    command = []
    for line in lines:
        command.append(line.rstrip().rstrip("\\"))
        if not line.rstrip().endswith("\\"):
            break
    words = shlex.split(" ".join(command))[2:]
    flags = []
    for word in words:
        name, _, value = word.partition("=")
        if name not in MAKE_SERVE_FLAGS:
            raise AssertionError(f"{doc}: expected one of {sorted(MAKE_SERVE_FLAGS)} in {RECIPE!r}, found {word!r}")
        flags += [MAKE_SERVE_FLAGS[name], value]
    parser = argparse.ArgumentParser()
    serve_cmd.add_arguments(parser)
    argv = serve_cmd.launch_from_args(parser.parse_args(flags)).argv
    return argv[argv.index("sglang.launch_server") + 1:]


def test_the_recipe_resolves_through_server_args(pristine_root):
    """The recipe's arguments through the release's ServerArgs at capability 12.0: DSPARK's draft is the
    checkpoint's bundled one, its verify window is block + 1 rows, and max_running_requests defaults to 48."""
    argv = recipe_argv()
    resolved = V.resolve_speculative(pristine_root, argv, V.hf_config(pristine_root, PUBLISHED), [
        "device", "tp_size", "ep_size", "attention_backend", "speculative_algorithm", "speculative_draft_model_path",
        "speculative_num_steps", "speculative_eagle_topk", "speculative_dspark_block_size",
        "speculative_num_draft_tokens", "max_running_requests"])
    assert (resolved.device, resolved.tp_size, resolved.ep_size, resolved.attention_backend) == ("cuda", 8, 8, "dsv4")
    assert resolved.speculative_algorithm == "DSPARK"
    assert resolved.speculative_draft_model_path == argv[argv.index("--model-path") + 1]     # bundled in the checkpoint
    assert (resolved.speculative_num_steps, resolved.speculative_eagle_topk) == (1, 1)
    assert resolved.speculative_num_draft_tokens == VERIFY_ROWS == resolved.speculative_dspark_block_size + 1
    assert resolved.max_running_requests == MAX_RUNNING_REQUESTS


@pytest.fixture
def v41_config(pristine_root):
    """The published config as the release's DeepSeek-V4.1 config reads it (text_config flattened)."""
    return V.hf_config(pristine_root, PUBLISHED)


def _decode_inputs(root, rows: int, metadata, topk: int = 512):
    heads = PUBLISHED_TEXT["index_n_heads"]
    data = V.decode_data_class(root)(torch.zeros(rows, 1, heads, 64, dtype=torch.int8), torch.zeros(rows, 1, heads),
                                     torch.zeros(rows, heads), torch.zeros(1, 64, 1, 68, dtype=torch.uint8))
    return types.SimpleNamespace(paged_metadata=metadata, data=data, indexer=types.SimpleNamespace(index_topk=topk),
                                 out_page_indices=torch.full((rows, topk), -1, dtype=torch.int32))


@pytest.fixture(params=["eager", "graph capture"])
def capture(request):
    return request.param == "graph capture"


def _start(root, tmp_path, stack, capture):
    recorder = deep_gemm_wheel.Recorder()
    return V.Release(root, tmp_path, recorder).start(stack, capture), recorder


def test_pristine_refuses_the_candidate_indexer_at_start(pristine_root, tmp_path, v41_config):
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
        assert "sglang.get_paged_mqa_logits_metadata" not in dg.names()      # not SGLang's split-256 planner
        inputs = _decode_inputs(patched_root, lens.numel(), metadata)
        backend.full_topk_indexer.topk_decode(inputs)
        published = backend.decode_candidates.publish_decode(inputs)
        backend.decode_candidates.consume_decode(inputs, published)
        logits_calls = [args for name, args in dg.calls if name == "fp8_fp4_paged_mqa_logits"]
        assert len(logits_calls) == 3                       # full top-k, candidate source, candidate consumer
        for args in logits_calls:
            assert args[6] is metadata.deep_gemm_metadata    # DeepGEMM's own schedule, not SGLang's planner
            assert args[4].tolist() == lens.view(-1, rows_per_request).tolist()
            assert args[0].shape[2] == PUBLISHED_TEXT["index_n_heads"]     # q: [requests, rows, heads, dim]


@pytest.mark.parametrize("tree", ["pristine_root", "patched_root"])
def test_prefill_top_k_on_sm120_takes_top_k_v2_s_ragged_kernel(request, tree, tmp_path, v41_config):
    """A full top-k layer's prefill on sm_120 (the candidate source's makes the same call): DeepGEMM's dense fp4
    logits in fp32 (index_logits_dtype: bf16 on sm_100 only), then topk_ragged's fp32 branch, top-k v2's
    topk_transform_ragged_v2, though the model hook turns SGLANG_OPT_USE_TOPK_V2 off on sm_120 ("the default top-k
    v2 path still requires unsupported resources"): this call does not read the flag. Its kernel is one block per
    row without the cluster path (topk_impl.cuh's SUPPORT_CLUSTER stops below sm_110); whether the v2 module's
    load-time cluster probes pass on an sm_12x card nothing here has run."""
    root = request.getfixturevalue(tree)
    v41_config.candidate_topk_blocks, v41_config.candidate_source_layer_id = 0, -1    # pristine refuses candidates
    with ExitStack() as stack:
        release, _ = _start(root, tmp_path, stack, capture=False)
        assert release.envs.SGLANG_OPT_USE_TOPK_V2.get() is False                    # the hook's sm_120 block
        assert release.index_logits()["index_logits_dtype"]() == torch.float32
        backend = release.indexers(v41_config)
        assert backend.full_topk_indexer.use_deep_gemm_prefill                        # DeepGEMM's dense prefill
        assert release.prefill_topk(torch.tensor([100, 5000, 70000])).names() == ["topk_transform_ragged_v2"]
