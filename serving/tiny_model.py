"""Generate the tiny DeepSeek-V4 model directory that `make serve` runs when no MODEL is given.

config.json is DeepSeek-V4-Flash's own config.json (serving/dsv4_flash_config.json, a copy of
deepseek-ai/DeepSeek-V4-Flash/config.json on the Hugging Face hub) with the sizes that cost memory
cut down. The attention geometry stays real (64 heads of 448+64, 512-wide latent, sliding window
128, c4/c128 compression, indexer 64x128 with top-512): the sm_120 kernels the patches change are
specialised to those shapes, so the tiny model runs the same patched code paths as the real one.
Weights are random (`--load-format dummy`); the tokenizer is serving/tiny_tokenizer/.

    python -m serving.tiny_model [OUT_DIR]      # default build/tiny-dsv4
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REAL_CONFIG = HERE / "dsv4_flash_config.json"
TOKENIZER_DIR = HERE / "tiny_tokenizer"
DEFAULT_DIR = HERE.parent / "build" / "tiny-dsv4"
SERVED_NAME = "dsv4-tiny"

# What shrinks, and why each value is still legal for the real model code:
TINY_OVERRIDES = {
    "num_hidden_layers": 3,
    # One layer of each attention kind (SWA only, c4 + indexer, c128); the real list carries
    # one more entry than there are layers, for the MTP layer.
    "compress_ratios": [0, 4, 128, 0],
    "num_hash_layers": 1,          # keep one hash-routed MoE layer (real: 3)
    "hidden_size": 512,            # multiple of the fp8 weight block (128)
    "q_lora_rank": 256,
    "o_lora_rank": 256,
    # The real count. SGLang 0.5.14's small-batch MoE router kernel (jit_kernel moe_fused_gate, small-token path)
    # is built for 8, 12 or 16 warps per token and reads that many warps' partial results, but launches
    # ceil(experts / 32) warps: with fewer than 225 experts it reads uninitialised shared memory, which killed
    # the live servers with an illegal instruction (BENCHMARKS.md, "Live logprob comparison", run 7).
    "n_routed_experts": 256,
    "moe_intermediate_size": 256,
    "vocab_size": 512,             # = the tiny tokenizer's vocabulary
}


def real_config() -> dict:
    return json.loads(REAL_CONFIG.read_text())


def tiny_config() -> dict:
    config = real_config()
    unknown = set(TINY_OVERRIDES) - set(config)
    if unknown:  # an override of a key the real model does not have would be silently ignored
        raise KeyError(f"{REAL_CONFIG.name}: no such keys to shrink: {sorted(unknown)}")
    config.update(TINY_OVERRIDES)
    return config


def _write_if_changed(path: Path, data: bytes) -> None:
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def generate(out_dir: Path = DEFAULT_DIR) -> Path:
    """Write config.json and the tokenizer files into out_dir (idempotent); return out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = json.dumps(tiny_config(), indent=1, sort_keys=True) + "\n"
    _write_if_changed(out_dir / "config.json", config.encode())
    for src in sorted(TOKENIZER_DIR.iterdir()):
        if src.is_file():
            _write_if_changed(out_dir / src.name, src.read_bytes())
    return out_dir


if __name__ == "__main__":
    print(generate(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR))
