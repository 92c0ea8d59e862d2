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

import types
from contextlib import ExitStack

import pytest
import torch

from harness import deep_gemm_wheel
from tests.line_0_5_23 import v41_tree as V

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
