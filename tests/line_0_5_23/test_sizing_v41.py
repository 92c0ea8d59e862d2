"""serving/sizing.py on a DeepSeek-V4.1-Flash-shaped config (COMPUTED, NOT MEASURED): compress ratios 1 / 2 / 4 /
128, shared KV layers, the engram tables. Each count is checked against sglang 0.5.23's own functions, compiled
out of the pinned wheel: which layers own compressed storage (collect_sources_by_ratio), the index key's bytes
(get_dsv4_indexer_bytes_per_token) and an engram row's scale block (FP8_BLOCK_SIZE)."""
from __future__ import annotations

import json
import subprocess
import sys
import typing

import pytest

from harness.upstream import extract_functions
from serving import sizing

POOL = "sglang/srt/mem_cache/deepseek_v4_memory_pool.py"
FP8_BLOCK = "sglang/kernels/ops/quantization/fp4_fake_quant.py"
# V4.1-Flash's published shape (hidden 5120, 40 layers, 64 heads x 512, q/o LoRA 1280/1024 in 8 groups, 384
# experts of 2304, 32 index heads of 128 (tests/line_0_5_23/test_v41_startup.py names the source), engram at
# layers 1 and 14 with 384,006,168 rows of 256 each). The ratio schedule and the
# source layers below are an illustration of the format, not the checkpoint's: the sizing reads them from the
# user's config.json.
RATIOS = [0, 0] + [1, 1, 2, 2, 4, 128, 2, 1] * 4 + [4, 128, 4, 128, 4, 128]
V41 = {
    "hidden_size": 5120, "num_hidden_layers": 40, "num_nextn_predict_layers": 1, "num_attention_heads": 64,
    "head_dim": 512, "q_lora_rank": 1280, "o_lora_rank": 1024, "o_groups": 8, "n_routed_experts": 384,
    "n_shared_experts": 1, "moe_intermediate_size": 2304, "hc_mult": 4, "index_n_heads": 32, "index_head_dim": 128,
    "vocab_size": 129280, "sliding_window": 128, "compress_ratios": RATIOS + [0],
    "kv_source_layer_ids": [i for i, r in enumerate(RATIOS) if r in (1, 2) and i % 4 == 2],
    "index_source_layer_ids": [i for i, r in enumerate(RATIOS) if r in (1, 2) and i % 8 == 2],
    "engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 384006168], "engram_head_dim": 256,
}


@pytest.fixture(scope="module")
def release(pristine_root):
    ns = {"Sequence": typing.Sequence, "List": typing.List, "range": range}
    extract_functions(pristine_root / POOL, ["collect_sources_by_ratio", "get_dsv4_indexer_bytes_per_token"], ns)
    extract_functions(pristine_root / FP8_BLOCK, ["FP8_BLOCK_SIZE"], ns)
    return ns


def test_low_ratio_layers_cost_only_where_they_own_the_cache_or_the_index_key(release):
    layers = V41["num_hidden_layers"]
    sources = release["collect_sources_by_ratio"](RATIOS, V41["kv_source_layer_ids"], range(layers))
    index_key = release["get_dsv4_indexer_bytes_per_token"](V41["index_head_dim"], True)
    expected = sum(len(sources.get(r, [])) * 584 / r for r in (1, 2, 128))
    expected += len(sources.get(4, [])) * (584 + 132) / 4
    expected += sum(index_key / RATIOS[i] for i in V41["index_source_layer_ids"])
    kv = sizing.kv_bytes(V41)
    assert kv["per_token"] == pytest.approx(expected)
    assert kv["per_request"] == layers * 128 * 584
    # sharing is what keeps the low-ratio layers cheap: every ratio-1/2 layer a source would cost this much more
    every = sizing.kv_bytes({**V41, "kv_source_layer_ids": [i for i, r in enumerate(RATIOS) if r in (1, 2)]})
    readers = [i for i, r in enumerate(RATIOS) if r in (1, 2) and i not in V41["kv_source_layer_ids"]]
    assert every["per_token"] - kv["per_token"] == pytest.approx(sum(584 / RATIOS[i] for i in readers))


def test_engram_tables_split_over_the_ranks_or_stay_in_host_memory(release):
    row = V41["engram_head_dim"] + V41["engram_head_dim"] // release["FP8_BLOCK_SIZE"]
    assert sizing.engram_bytes(V41) == 2 * 384006168 * row
    assert sizing.engram_bytes({**V41, "engram_layer_ids": []}) == 0
    device = sizing.plan(V41, 8, 96, 0.85, 6, 1 << 20)
    host = sizing.plan(V41, 8, 96, 0.85, 6, 1 << 20, engram_host=True)
    assert device["engram_per_gpu_gib"] == pytest.approx(sizing.engram_bytes(V41) / 8 / sizing.GIB)
    assert host["engram_per_gpu_gib"] == 0
    assert host["kv_pool_per_gpu_gib"] - device["kv_pool_per_gpu_gib"] == pytest.approx(device["engram_per_gpu_gib"])


def test_the_command_reads_a_nested_v41_config(tmp_path):
    config = tmp_path / "config.json"
    text = {k: v for k, v in V41.items() if k not in ("hidden_size", "num_hidden_layers")}
    config.write_text(json.dumps({"model_type": "deepseek_v41", "text_config": text,
                                  "hidden_size": 5120, "num_hidden_layers": 40}))
    run = lambda *a: subprocess.run([sys.executable, "-m", "serving.sizing", "--config", str(config), *a],  # noqa: E731
                                    capture_output=True, text=True)
    device, host = run("--tp", "8"), run("--tp", "8", "--engram-host")
    assert device.returncode == host.returncode == 0, device.stderr + host.stderr
    assert "engram tables:" in device.stdout and "GiB per GPU (rows split over the TP ranks)" in device.stdout
    assert "in host memory (SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1)" in host.stdout


def test_the_index_logits_buffer_is_as_wide_as_the_graph_context_and_counts_against_the_fraction(tmp_path):
    """DeepGEMM's fp32 logits of a decode or verify step (0.5.23 asks fp32 off sm_100: index_logits_dtype) are
    [graph batch x (DSPARK block + 1), the graph's compressed context]: about 4 MiB a row at 1M at ratio 1."""
    candidate = {**V41, "candidate_topk_blocks": 2048}
    per_row = (1 << 20) * 4
    assert sizing.index_logits_bytes(V41, 1 << 20, 48, 7) == 48 * 7 * per_row                   # 1.31 GiB
    assert sizing.index_logits_bytes(V41, 1 << 20, 64, 7) == pytest.approx(1.75 * sizing.GIB)
    assert sizing.index_logits_bytes(candidate, 1 << 20, 48, 7) == 48 * 7 * per_row * (1 + 1 / 8)
    assert sizing.index_logits_bytes({**V41, "compress_ratios": [0, 4, 128]}, 1 << 20, 48, 7) == 0
    assert sizing.index_logits_bytes({**V41, "compress_ratios": [2, 4]}, 1 << 20, 48, 7) == 48 * 7 * per_row / 2
    plain = sizing.plan(V41, 8, 96, 0.85, 6, 1 << 20, graph_batch=48, verify_rows=1)
    dspark = sizing.plan(V41, 8, 96, 0.85, 6, 1 << 20, graph_batch=48, verify_rows=7)
    assert plain["headroom_gib"] - dspark["headroom_gib"] == pytest.approx(6 * 48 * per_row / sizing.GIB)
    assert dspark["max_mem_fraction"] == pytest.approx(1 - (6 + 48 * 7 * per_row / sizing.GIB) / 96)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(V41))
    out = subprocess.run([sys.executable, "-m", "serving.sizing", "--config", str(config), "--verify-rows", "7"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "the index-logits buffer 1.31 GiB at 48 x 7 rows" in out.stdout, out.stderr
