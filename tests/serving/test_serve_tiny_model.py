"""The tiny DeepSeek-V4 model `make serve` runs without a download (serving/tiny_model.py).

Acceptance is decided by the pinned sglang 0.5.14 itself: its DeepSeekV4Config, ModelConfig
(the path the server takes to read config.json), model registry and tokenizer loader.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving import tiny_model
from tests.serve_env import import_pinned

# The shapes the sm_120 kernels are specialised to: the tiny model must keep them.
ATTENTION_GEOMETRY = ("num_attention_heads", "num_key_value_heads", "head_dim", "qk_rope_head_dim",
                      "index_n_heads", "index_head_dim", "index_topk", "sliding_window", "o_groups",
                      "hc_mult", "quantization_config", "expert_dtype", "architectures", "model_type")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return tiny_model.generate(tmp_path_factory.mktemp("tiny") / "tiny-dsv4")


def test_tiny_config_keeps_the_real_attention_geometry_and_layer_kinds():
    real, tiny = tiny_model.real_config(), tiny_model.tiny_config()
    assert real["architectures"] == ["DeepseekV4ForCausalLM"] and real["num_hidden_layers"] == 43
    for key in ATTENTION_GEOMETRY:
        assert tiny[key] == real[key], key
    # like the real list, one entry per layer plus one for the MTP layer; every layer kind present
    assert len(real["compress_ratios"]) == real["num_hidden_layers"] + real["num_nextn_predict_layers"]
    assert len(tiny["compress_ratios"]) == tiny["num_hidden_layers"] + tiny["num_nextn_predict_layers"]
    assert set(tiny["compress_ratios"][: tiny["num_hidden_layers"]]) == {0, 4, 128}
    assert tiny["num_hash_layers"] < tiny["num_hidden_layers"]
    assert tiny["hidden_size"] % 128 == 0 and tiny["moe_intermediate_size"] % 128 == 0   # fp8 128x128 blocks


def test_generate_is_idempotent(tmp_path):
    out = tiny_model.generate(tmp_path / "m")
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert sorted(stamps) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    tiny_model.generate(out)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    assert json.loads((out / "config.json").read_text()) == tiny_model.tiny_config()


def test_shipped_tokenizer_rebuilds_identically(tmp_path):
    pytest.importorskip("tokenizers", reason="needs the tokenizers library: make test-serve")
    from serving import build_tokenizer

    build_tokenizer.build(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert json.loads((tmp_path / name).read_text()) == json.loads((tiny_model.TOKENIZER_DIR / name).read_text()), name


def test_pinned_deepseek_v4_config_class_accepts_it():
    cfg_mod = import_pinned("sglang.srt.configs.deepseek_v4")
    tiny = tiny_model.tiny_config()
    config = cfg_mod.DeepSeekV4Config(**tiny)
    assert config.num_hidden_layers == 3 and config.hidden_size == 512
    assert config.compress_ratios == [0, 4, 128, 0]
    assert config.qk_nope_head_dim + config.qk_rope_head_dim == tiny["head_dim"]   # 448 + 64


def test_pinned_model_config_and_registry_resolve_it(tiny_dir):
    mc_mod = import_pinned("sglang.srt.configs.model_config")
    registry = import_pinned("sglang.srt.models.registry")
    mc = mc_mod.ModelConfig(str(tiny_dir), context_length=4096)
    assert mc_mod.is_deepseek_v4(mc.hf_config)
    assert mc.context_len == 4096
    assert mc_mod.get_num_indexer_layers(mc.hf_config) == 1          # the one c4 layer
    assert mc.hf_config.vocab_size == 512 and mc.hf_config.hidden_size == 512
    cls, arch = registry.ModelRegistry.resolve_model_cls(mc.hf_config.architectures)
    assert (cls.__module__, cls.__name__, arch) == (
        "sglang.srt.models.deepseek_v4", "DeepseekV4ForCausalLM", "DeepseekV4ForCausalLM")


def test_pinned_tokenizer_loader_and_dsv4_chat_encoding_match_it(tiny_dir):
    utils = import_pinned("sglang.srt.utils.hf_transformers_utils")
    encoding = import_pinned("sglang.srt.entrypoints.openai.encoding_dsv4")
    config = tiny_model.tiny_config()
    tok = utils.get_tokenizer(str(tiny_dir))
    assert len(tok) == config["vocab_size"]
    assert (tok.bos_token_id, tok.eos_token_id) == (config["bos_token_id"], config["eos_token_id"])
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Capital of France?"}]
    ours = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ours == encoding.encode_messages(messages, thinking_mode="chat")
    ids = tok.encode(ours)
    assert ids[0] == config["bos_token_id"] and max(ids) < config["vocab_size"]
    assert tok.decode(ids) == ours


def test_router_kernel_launches_the_warps_it_was_built_for(pristine_root):
    """SGLang 0.5.14's small-batch MoE router kernel is instantiated for 8, 12 or 16 warps per token and reduces over
    that many per-warp results, while its host code launches ceil(experts / 32) warps (at most 16). The tiny model's
    expert count must make the two agree, else the kernel reads shared memory no warp wrote (an illegal instruction
    on the H200: BENCHMARKS.md, "Live logprob comparison", run 7). Read from the pinned source, not assumed."""
    import math
    import re

    src = (pristine_root / "sglang/jit_kernel/csrc/moe/moe_fused_gate.cuh").read_text()
    built_for = sorted({int(n) for n in re.findall(r"moe_fused_gate_kernel_small_token<(\d+),", src)})
    assert built_for == [8, 12, 16], built_for
    assert "uint32_t warps_per_token = div_ceil(num_experts, kWarpSize);" in src
    experts = tiny_model.tiny_config()["n_routed_experts"]
    launched = min(math.ceil(experts / 32), 16)
    instantiated = next(n for n in built_for if launched <= n)
    assert launched == instantiated, f"{experts} experts launch {launched} warps into a kernel built for {instantiated}"
