"""OVERLAY_DUMMY_INIT=scaled (TEST ONLY): deterministic DeepSeek-V4 weights for `--load-format dummy`
under which attention matters.

sglang's own dummy init (model_loader/weight_utils.py: initialize_dummy_weights) fills every float
tensor with U(-1e-3, 1e-3) and leaves integer tensors alone. For DeepSeek-V4 that zeroes the model in
effect: RMSNorm weights of 1e-3, embeddings of 1e-3, FP8 block scales of +-1e-3 (negative too), the
MXFP4 experts' packed int8 weights left as torch.empty memory, and the logits come out flat (the
live test saw top-5 logprobs all equal to -ln(vocab)). A wrong attention output then changes nothing.

This init keeps activations O(1) through the layers, by role (name and dtype of each state_dict entry):

    norm         RMSNorm weights                               1
    embedding    embed_tokens                                  N(0, 1)
    lm_head      lm_head                                       N(0, (LM_GAIN / sqrt(in))^2): peaked logits
    attn_sink    per-head sinks                                U(SINK_LOW, SINK_HIGH): comparable to the
                                                               window's softmax mass, so ignoring it shows
    fp8_weight   float8 block-quantised linears                N(0, 1) clipped to +-FP8_CLIP, in float8
    fp8_scale    their weight_scale_inv (per 128x128 block)    2^round(log2(1/sqrt(in))) (a ue8m0 value)
    fp4_weight   MXFP4 experts, two e2m1 codes per int8        uniform random bytes (every code), one draw
                                                               shared by all experts of a layer (below)
    fp4_scale    their per-32 scales (fp32)                    2^round(log2(1/(E2M1_RMS * sqrt(in))))
    hc_fn        mHC mixing matrices                           N(0, 1/in)
    hc_scale     mHC scales                                    HC_SCALE
    hc_base      mHC biases                                    N(0, HC_BASE_STD^2)
    ape          compressor positional biases                  N(0, 1)
    router_bias  e_score_correction_bias                       N(0, ROUTER_BIAS_STD^2)
    kv_scale     k_scale / v_scale / input_scale               1
    linear       any other float tensor of rank >= 2           N(0, 1/in), in = last dim (bf16 linears,
                                                               the router, wo_a, wkv_gate, weights_proj)
    unknown      any other float tensor                        N(0, 0.02^2), and named in the summary
    kept         integer tensors (tid2eid...) and complex ones untouched (the model initialised them)

The routed experts of a layer are identical. Top-k routing is discontinuous: with distinct experts a 2e-3
relative change of the attention output (two correct kernels' rounding) flipped near-tied router choices and
moved the next-token logprobs by up to 0.27 nats, as much as a subtly broken kernel (the 2026-12-03 live run:
two correct decode kernels 0.5-0.9 nats apart). With identical experts and top-k weights normalised to a fixed
sum the MoE output does not depend on which experts are picked, so only the model's smooth part amplifies
(tests/serving/test_dummy_init.py). The router, the MoE kernels and their shapes run as before.

Every tensor gets its own generator seeded from its name (crc32) and SEED, on the tensor's device, so
the pinned and the patched tree get identical weights on one GPU. It runs where sglang's dummy init
runs (DummyModelLoader.load_model, before process_weights_after_loading), installed by
serving/test_hooks/emulate_sm120.py's hook on `sglang.srt.model_loader.loader`.
"""
from __future__ import annotations

import math
import zlib

import torch

ENV = "OVERLAY_DUMMY_INIT"
MODE = "scaled"
SEED = 20261201
LM_GAIN = 3.0
SINK_LOW, SINK_HIGH = 1.0, 4.0
FP8_CLIP = 8.0
# RMS of the 16 e2m1 values (+-{0, 0.5, 1, 1.5, 2, 3, 4, 6}), all codes equally likely
E2M1_RMS = math.sqrt(sum(v * v for v in (0, 0.5, 1, 1.5, 2, 3, 4, 6)) / 8)
HC_SCALE = 0.5
HC_BASE_STD = 0.1
ROUTER_BIAS_STD = 0.05
UNKNOWN_STD = 0.02

FP4_WEIGHTS = ("w13_weight", "w2_weight")
KV_SCALES = ("k_scale", "v_scale", "input_scale")


def requested(environ) -> bool:
    return environ.get(ENV, "") == MODE


def _is_fp8(t: torch.Tensor) -> bool:
    return t.is_floating_point() and torch.finfo(t.dtype).bits == 8


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _sibling(name: str, leaf: str) -> str:
    return name.rsplit(".", 1)[0] + "." + leaf if "." in name else leaf


def rule_for(name: str, t: torch.Tensor, state: dict) -> str:
    """Which role a state_dict entry plays (module doc's table)."""
    leaf = _leaf(name)
    if not t.is_floating_point():
        return "fp4_weight" if leaf in FP4_WEIGHTS and t.dtype in (torch.int8, torch.uint8) else "kept"
    weight = state.get(_sibling(name, _scaled_leaf(leaf))) if _scaled_leaf(leaf) else None
    if weight is not None and weight.dtype in (torch.int8, torch.uint8):
        return "fp4_scale"
    if weight is not None and _is_fp8(weight):
        return "fp8_scale"
    if _is_fp8(t):
        return "fp8_weight"
    if leaf == "attn_sink":
        return "attn_sink"
    if leaf.startswith("hc_") and leaf.endswith("_fn"):
        return "hc_fn"
    if leaf.startswith("hc_") and leaf.endswith("_scale"):
        return "hc_scale"
    if leaf.startswith("hc_") and leaf.endswith("_base"):
        return "hc_base"
    if leaf == "ape":
        return "ape"
    if leaf == "e_score_correction_bias":
        return "router_bias"
    if leaf in KV_SCALES:
        return "kv_scale"
    if name.endswith("embed_tokens.weight"):
        return "embedding"
    if name.endswith("lm_head.weight"):
        return "lm_head"
    if leaf == "weight" and t.dim() == 1 and "norm" in name.rsplit(".", 2)[-2]:
        return "norm"
    if t.dim() >= 2:
        return "linear"
    return "unknown"


def _scaled_leaf(leaf: str) -> str | None:
    """The weight a scale belongs to: w13_weight_scale_inv -> w13_weight, weight_scale -> weight."""
    for suffix in ("_scale_inv", "_scale"):
        if leaf.endswith(suffix) and leaf[: -len(suffix)].endswith("weight"):
            return leaf[: -len(suffix)]
    return None


def _pow2(x: float) -> float:
    return 2.0 ** round(math.log2(x))


def _generator(name: str, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed((SEED * 1_000_003 + zlib.crc32(name.encode())) % (2 ** 63))
    return g


def _normal(t: torch.Tensor, std: float, g: torch.Generator) -> torch.Tensor:
    return torch.randn(t.shape, generator=g, device=t.device, dtype=torch.float32) * std


def fill(name: str, t: torch.Tensor, rule: str, state: dict) -> None:
    """Write the rule's values into t in place."""
    g = _generator(name, t.device)
    with torch.no_grad():
        if rule == "kept":
            return
        if rule in ("norm", "kv_scale"):
            t.fill_(1.0)
        elif rule == "embedding":
            t.copy_(_normal(t, 1.0, g))
        elif rule == "lm_head":
            t.copy_(_normal(t, LM_GAIN / math.sqrt(t.shape[-1]), g))
        elif rule == "attn_sink":
            t.copy_(torch.rand(t.shape, generator=g, device=t.device) * (SINK_HIGH - SINK_LOW) + SINK_LOW)
        elif rule == "fp8_weight":
            t.copy_(_normal(t, 1.0, g).clamp_(-FP8_CLIP, FP8_CLIP).to(t.dtype))
        elif rule == "fp8_scale":
            fan_in = state[_sibling(name, _scaled_leaf(_leaf(name)))].shape[-1]
            t.fill_(_pow2(1.0 / math.sqrt(fan_in)))
        elif rule == "fp4_weight":
            # one expert's draw (an int16 temporary of a whole Flash w13 would be 4 GB), copied to the others
            first = t[0] if t.dim() >= 3 else t
            first.copy_(torch.randint(-128, 128, first.shape, generator=g, device=t.device,
                                      dtype=torch.int16).to(t.dtype))
            for chunk in (t[1:] if t.dim() >= 3 else []):
                chunk.copy_(first)
        elif rule == "fp4_scale":
            packed = state[_sibling(name, _scaled_leaf(_leaf(name)))]
            fan_in = packed.shape[-1] * 2
            t.fill_(_pow2(1.0 / (E2M1_RMS * math.sqrt(fan_in))))
        elif rule in ("hc_fn", "linear"):
            t.copy_(_normal(t, 1.0 / math.sqrt(t.shape[-1]), g))
        elif rule == "hc_scale":
            t.fill_(HC_SCALE)
        elif rule == "hc_base":
            t.copy_(_normal(t, HC_BASE_STD, g))
        elif rule == "ape":
            t.copy_(_normal(t, 1.0, g))
        elif rule == "router_bias":
            t.copy_(_normal(t, ROUTER_BIAS_STD, g))
        elif rule == "unknown":
            t.copy_(_normal(t, UNKNOWN_STD, g))
        else:
            raise ValueError(f"dummy_init: expected a rule of the module doc's table, found {rule!r}")


def initialize(state: dict) -> dict:
    """Fill every entry of a state_dict (name -> tensor, sharing the parameters' storage) by its rule.
    Returns {rule: count} and the names that fell to 'unknown' under 'unknown_names'."""
    counts: dict = {}
    unknown = []
    for name, t in state.items():
        rule = rule_for(name, t, state)
        fill(name, t, rule, state)
        counts[rule] = counts.get(rule, 0) + 1
        if rule == "unknown":
            unknown.append(name)
    counts["unknown_names"] = unknown
    return counts


def initialize_model(model: torch.nn.Module, *_args, **_kwargs) -> dict:
    """Drop-in for sglang's initialize_dummy_weights(model, low, high, seed) (those three are ignored)."""
    return initialize(model.state_dict())


def summary(counts: dict) -> str:
    parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "unknown_names")
    names = counts.get("unknown_names") or []
    return parts + (f"; unknown: {', '.join(names[:10])}" + (" ..." if len(names) > 10 else "") if names else "")
