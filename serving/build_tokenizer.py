"""Build the tiny tokenizer shipped in serving/tiny_tokenizer/ (run once at authoring time).

The tiny DeepSeek-V4 model that `make serve` runs without a download needs a tokenizer whose
vocabulary fits its 512-row embedding. This script trains a byte-level BPE on a fixed text, so
the output is the same on every run; tests/serving/test_serve_tiny_model.py rebuilds it and compares.

    .venv-serve/bin/python -m serving.build_tokenizer serving/tiny_tokenizer
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB_SIZE = 512

# The DeepSeek-V4 special tokens the server's chat encoder (sglang encoding_dsv4) emits.
BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
SPECIAL_TOKENS = [
    BOS,  # id 0 = config bos_token_id
    EOS,  # id 1 = config eos_token_id
    "<｜▁pad▁｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<think>",
    "</think>",
    "<｜latest_reminder｜>",
    "｜DSML｜",
]

# DeepSeek-V4's non-thinking chat format, as sglang's encoding_dsv4.encode_messages renders it.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}<｜User｜>{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}<｜Assistant｜></think>{{ m['content'] }}<｜end▁of▁sentence｜>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜></think>{% endif %}"
)

# Fixed training text: plain English about the project, enough for a few hundred merges.
CORPUS = """\
The server answers chat completions and raw generate requests. A smoke test starts the server,
waits until it is healthy, sends a few requests, checks that tokens come back, and shuts it down.
DeepSeek V4 Flash uses sparse attention with a sliding window of one hundred and twenty eight
tokens, a compressed cache every four tokens with an indexer that selects the top five hundred
and twelve positions, and a second cache every one hundred and twenty eight tokens.
On Blackwell workstation GPUs the decode kernel reads each key and value tile once for all heads.
The indexer computes its scores in bfloat16 and only over the lengths of the requests in the batch.
Hello! How are you today? What is the capital of France? Paris is the capital of France.
Write a short poem about the sea. The sea is wide and deep and blue, the waves come in and out.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Code: def main(): return 0  # print("hello world")
"""


def build(out_dir: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise SystemExit(f"expected a {VOCAB_SIZE}-token vocabulary, built {tok.get_vocab_size()}")

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokenizer.json").write_text(
        json.dumps(json.loads(tok.to_str()), indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    )
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": "<｜▁pad▁｜>",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1048576,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(config, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    )


if __name__ == "__main__":
    build(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "tiny_tokenizer"))
