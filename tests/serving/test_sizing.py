"""serving/sizing.py: the memory sizing README quotes, computed from DeepSeek-V4-Flash's config.json.

Checked against what the same config gives by other roads: the tiny model's real tensor layout
(tests/dsv4_tiny_forward.py: every tensor the pinned model creates) for the weights, the layer list for the
KV cache, and the TP split (per-GPU bytes = split / tp + replicated)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from serving import sizing, tiny_model
from tests.dsv4_tiny_forward import tiny_state

REAL = tiny_model.real_config()


def test_weights_match_the_tensor_layout_of_the_model():
    config = {**tiny_model.tiny_config(), "num_nextn_predict_layers": 0}
    layout = sum(t.numel() * t.element_size() for t in tiny_state(config).values())
    # the layout keeps MXFP4 scales as fp32 (4 bytes per 32 values) where the checkpoint has one e8m0 byte
    fp4_scales = sum(t.numel() for n, t in tiny_state(config).items() if n.endswith("weight_scale_inv") and ".experts." in n)
    computed = sizing.weight_bytes(config)["total"]
    assert computed == pytest.approx(layout - 3 * fp4_scales, rel=0.05)


def test_real_model_weights_and_the_tp_split():
    w1, w8 = sizing.weight_bytes(REAL, 1), sizing.weight_bytes(REAL, 8)
    layers = REAL["num_hidden_layers"] + REAL["num_nextn_predict_layers"]
    experts = layers * REAL["n_routed_experts"] * 3 * REAL["hidden_size"] * REAL["moe_intermediate_size"]
    assert w1["parts"]["routed experts (MXFP4)"] == pytest.approx(experts * (0.5 + 1 / 32))
    assert w1["total"] == pytest.approx(w8["total"]) and w1["per_gpu_total"] == pytest.approx(w1["total"])
    replicated = sum(v for k, v in w8["per_gpu"].items() if w8["parts"][k] == v)
    assert w8["per_gpu_total"] == pytest.approx((w1["total"] - replicated) / 8 + replicated)
    assert 0 < replicated < 0.02 * w1["total"]


def test_kv_cache_follows_the_layer_list():
    kv = sizing.kv_bytes(REAL)
    ratios = REAL["compress_ratios"][:REAL["num_hidden_layers"]]
    assert kv["layers"] == {0: ratios.count(0), 4: ratios.count(4), 128: ratios.count(128)}
    assert kv["per_token"] == pytest.approx(ratios.count(4) * (584 + 132) / 4 + ratios.count(128) * 584 / 128)
    assert kv["per_request"] == REAL["num_hidden_layers"] * REAL["sliding_window"] * 584


def test_command_prints_computed_not_measured_and_refuses_a_bad_config(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "serving.sizing", *a], capture_output=True, text=True)  # noqa: E731
    done = run("--tp", "8", "--gpu-gib", "96")
    assert done.returncode == 0 and done.stdout.startswith("COMPUTED from config.json, not measured: TP=8")
    bad = tmp_path / "config.json"
    bad.write_text("{}")
    done = run("--config", str(bad))
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"sizing: expected a DeepSeek-V4 config.json at {bad}, found KeyError")
