"""The tiny DeepSeek-V4's state_dict shapes and a plain-torch pass through it (tests of serving/test_hooks/dummy_init.py).

`tiny_state(config)` lays out every persistent tensor the pinned model creates for a config (names, shapes,
dtypes as in sglang 0.5.14: models/deepseek_v4.py MQALayer / DeepseekV4DecoderLayer / DeepseekV4Model,
layers/attention/dsv4/compressor.py and indexer.py, models/deepseek_v2.py DeepseekV2MoE, the FP8 block
linear (weight [out, in] float8 + weight_scale_inv per 128x128) and mxfp4_marlin_moe.py's create_weights
(w13 [E, 2I, H/2] int8, per-32 fp32 scales)), on the CPU, uninitialised like torch.empty.

`forward(state, config, ids)` runs the residual streams through every layer with dequantised weights:
the real MHC-pre mixes (hc_pre_torch_impl out of the tree) and sinkhorn (serving/test_hooks/hc_sinkhorn.py), causal
attention with the per-head sink, the grouped wo_a, the routed FP4 experts (sqrt-softplus top-k) plus the
shared expert, and the hc head. It records each stream's RMS, so a test can see whether activations
stay O(1). It is not sglang's forward (no compression, no indexer top-k, no KV quantisation): it checks
the scale of the weights, not the model's numerics. With fp8_act=True the input of every FP8 linear is rounded
to e4m3 per 128-element group as the server rounds it, which is what makes the server's logprobs sensitive to
a correct kernel's last bits.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from serving.test_hooks.hc_sinkhorn import hc_split_sinkhorn_torch

BLOCK = 128
FP4_GROUP = 32
E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def _fp8_linear(state, prefix, out_f, in_f):
    state[f"{prefix}.weight"] = torch.empty(out_f, in_f, dtype=torch.float8_e4m3fn)
    state[f"{prefix}.weight_scale_inv"] = torch.empty(-(-out_f // BLOCK), -(-in_f // BLOCK), dtype=torch.float32)


def _compressor(state, prefix, c, ratio, head_dim):
    coff = 2 if ratio == 4 else 1
    state[f"{prefix}.ape"] = torch.empty(ratio, coff * head_dim)
    state[f"{prefix}.wkv_gate.weight"] = torch.empty(2 * coff * head_dim, c["hidden_size"], dtype=torch.bfloat16)
    state[f"{prefix}.norm.weight"] = torch.empty(head_dim)


def tiny_state(c: dict) -> dict:
    H, heads, hd = c["hidden_size"], c["num_attention_heads"], c["head_dim"]
    E, I, hc = c["n_routed_experts"], c["moe_intermediate_size"], c["hc_mult"]
    mix = (2 + hc) * hc
    s: dict = {"model.embed_tokens.weight": torch.empty(c["vocab_size"], H, dtype=torch.bfloat16)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        a = f"{p}.self_attn"
        s[f"{a}.attn_sink"] = torch.empty(heads)
        _fp8_linear(s, f"{a}.wq_a", c["q_lora_rank"], H)
        _fp8_linear(s, f"{a}.wkv", hd, H)
        s[f"{a}.q_norm.weight"] = torch.empty(c["q_lora_rank"], dtype=torch.bfloat16)
        _fp8_linear(s, f"{a}.wq_b", heads * hd, c["q_lora_rank"])
        s[f"{a}.kv_norm.weight"] = torch.empty(hd, dtype=torch.bfloat16)
        s[f"{a}.wo_a.weight"] = torch.empty(c["o_groups"] * c["o_lora_rank"], heads * hd // c["o_groups"],
                                            dtype=torch.bfloat16)
        _fp8_linear(s, f"{a}.wo_b", H, c["o_groups"] * c["o_lora_rank"])
        ratio = c["compress_ratios"][i]
        if ratio:
            _compressor(s, f"{a}.compressor", c, ratio, hd)
        if ratio == 4:
            _fp8_linear(s, f"{a}.indexer.wq_b", c["index_n_heads"] * c["index_head_dim"], c["q_lora_rank"])
            s[f"{a}.indexer.weights_proj.weight"] = torch.empty(c["index_n_heads"], H, dtype=torch.bfloat16)
            _compressor(s, f"{a}.indexer.compressor", c, 4, c["index_head_dim"])
        m = f"{p}.mlp"
        s[f"{m}.gate.weight"] = torch.empty(E, H)
        if i < c["num_hash_layers"]:
            tid2eid = torch.arange(c["vocab_size"])[:, None] + torch.arange(c["num_experts_per_tok"])[None, :]
            s[f"{m}.gate.tid2eid"] = (tid2eid % E).to(torch.int32)      # hash_topk.py's default
        else:
            s[f"{m}.gate.e_score_correction_bias"] = torch.empty(E)
        s[f"{m}.experts.w13_weight"] = torch.empty(E, 2 * I, H // 2, dtype=torch.int8)
        s[f"{m}.experts.w2_weight"] = torch.empty(E, H, I // 2, dtype=torch.int8)
        s[f"{m}.experts.w13_weight_scale_inv"] = torch.empty(E, 2 * I, H // FP4_GROUP)
        s[f"{m}.experts.w2_weight_scale_inv"] = torch.empty(E, H, I // FP4_GROUP)
        _fp8_linear(s, f"{m}.shared_experts.gate_up_proj", 2 * I, H)
        _fp8_linear(s, f"{m}.shared_experts.down_proj", H, I)
        s[f"{p}.input_layernorm.weight"] = torch.empty(H, dtype=torch.bfloat16)
        s[f"{p}.post_attention_layernorm.weight"] = torch.empty(H, dtype=torch.bfloat16)
        for kind in ("attn", "ffn"):
            s[f"{p}.hc_{kind}_fn"] = torch.empty(mix, hc * H)
            s[f"{p}.hc_{kind}_base"] = torch.empty(mix)
            s[f"{p}.hc_{kind}_scale"] = torch.empty(3)
    s["model.norm.weight"] = torch.empty(H, dtype=torch.bfloat16)
    s["model.hc_head_fn"] = torch.empty(hc, hc * H)
    s["model.hc_head_base"] = torch.empty(hc)
    s["model.hc_head_scale"] = torch.empty(1)
    s["lm_head.weight"] = torch.empty(c["vocab_size"], H, dtype=torch.bfloat16)
    return s


# -- dequantisation ------------------------------------------------------------------------------

def fp8_weight(state, prefix) -> torch.Tensor:
    w = state[f"{prefix}.weight"].float()
    scale = state[f"{prefix}.weight_scale_inv"]
    full = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[: w.shape[0], : w.shape[1]]
    return w * full


def fp8_activations(x: torch.Tensor) -> torch.Tensor:
    """x rounded as the server's FP8 linears see it: e4m3 per 1 x 128 group along the last dim, scale amax / 448
    (sglang's per_token_group_quant_fp8), then back to float."""
    g = x.float().reshape(*x.shape[:-1], -1, BLOCK)
    scale = g.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448.0
    return ((g / scale).to(torch.float8_e4m3fn).float() * scale).reshape(x.shape)


def linear_fp8(x: torch.Tensor, state, prefix, fp8_act: bool) -> torch.Tensor:
    return (fp8_activations(x) if fp8_act else x) @ fp8_weight(state, prefix).T


def fp4_weight(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    b = packed.view(torch.uint8).long()
    codes = torch.stack([b & 0xF, b >> 4], dim=-1).flatten(-2)
    return E2M1[codes] * scale.repeat_interleave(FP4_GROUP, -1)


def rms_norm(x, w=None, eps=1e-6):
    y = x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps)
    return y * w.float() if w is not None else y


def rms(x) -> float:
    return float(x.float().square().mean().sqrt())


# -- the pass ------------------------------------------------------------------------------------

def _hc_pre(X, state, key, c, hc_pre_impl):
    """(y [T,H], post [T,hc], comb [T,hc,hc]): sglang's hc_pre without TileLang (its torch mixes + sinkhorn)."""
    x_flat, mixes = hc_pre_impl(X.to(torch.bfloat16), state[f"{key}_fn"])
    pre, post, comb = hc_split_sinkhorn_torch(mixes, state[f"{key}_scale"], state[f"{key}_base"], c["hc_mult"],
                                              c["hc_sinkhorn_iters"], c["hc_eps"])
    y = (pre.squeeze(1).unsqueeze(-1) * x_flat.float().view(X.shape)).sum(dim=1)
    return y, post.squeeze(1), comb.squeeze(1)


def _hc_post(out, X, post, comb):
    return post.unsqueeze(-1) * out.unsqueeze(1) + torch.einsum("tij,tih->tjh", comb, X)


def _attention(h, state, a, c, zero_attention: bool, attention_out=None, fp8_act: bool = False):
    T, heads, hd = h.shape[0], c["num_attention_heads"], c["head_dim"]
    q = rms_norm(linear_fp8(h, state, f"{a}.wq_a", fp8_act), state[f"{a}.q_norm.weight"])
    q = rms_norm(linear_fp8(q, state, f"{a}.wq_b", fp8_act).view(T, heads, hd))
    kv = rms_norm(linear_fp8(h, state, f"{a}.wkv", fp8_act), state[f"{a}.kv_norm.weight"])
    scores = torch.einsum("thd,sd->hts", q, kv) * hd ** -0.5
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    window = ~torch.ones(T, T, dtype=torch.bool).tril(-c["sliding_window"])
    scores = scores.masked_fill(~(causal & window), float("-inf"))
    sink = state[f"{a}.attn_sink"].view(heads, 1, 1).expand(heads, T, 1)
    p = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :T]
    o = torch.einsum("hts,sd->thd", p, kv)
    if zero_attention:
        o = torch.zeros_like(o)
    if attention_out is not None:       # a perturbation of the attention output [T, heads, head_dim]
        o = attention_out(o, a)
    g, r = c["o_groups"], c["o_lora_rank"]
    wo_a = state[f"{a}.wo_a.weight"].float().view(g, r, heads * hd // g)
    o = torch.einsum("tgi,gri->tgr", o.reshape(T, g, heads * hd // g), wo_a).reshape(T, g * r)
    return linear_fp8(o, state, f"{a}.wo_b", fp8_act)


def _moe(h, state, m, c, ids, fp8_act: bool = False):
    E, k = c["n_routed_experts"], c["num_experts_per_tok"]
    scores = F.softplus(h @ state[f"{m}.gate.weight"].T).sqrt()
    if f"{m}.gate.tid2eid" in state:
        idx = state[f"{m}.gate.tid2eid"][ids].long()
    else:
        idx = (scores + state[f"{m}.gate.e_score_correction_bias"]).topk(k, dim=-1).indices
    w = scores.gather(1, idx)
    w = w / w.sum(-1, keepdim=True) * c["routed_scaling_factor"]
    ex = f"{m}.experts"
    out = torch.zeros_like(h)
    limit = c["swiglu_limit"]
    for e in idx.unique().tolist():
        w13 = fp4_weight(state[f"{ex}.w13_weight"][e], state[f"{ex}.w13_weight_scale_inv"][e])
        w2 = fp4_weight(state[f"{ex}.w2_weight"][e], state[f"{ex}.w2_weight_scale_inv"][e])
        gate, up = (h @ w13.T).chunk(2, dim=-1)
        y = (F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)) @ w2.T
        out += y * (w * (idx == e)).sum(-1, keepdim=True)
    gate, up = linear_fp8(h, state, f"{m}.shared_experts.gate_up_proj", fp8_act).chunk(2, dim=-1)
    return out + linear_fp8(F.silu(gate) * up, state, f"{m}.shared_experts.down_proj", fp8_act)


def forward(state: dict, c: dict, ids: torch.Tensor, hc_pre_impl, zero_attention: bool = False,
            attention_out=None, fp8_act: bool = False) -> dict:
    """{'stream_rms': [per layer, after attention and after the MoE], 'logits': [T, vocab]};
    attention_out(o, layer_prefix) -> o, if given, replaces each layer's attention output (before wo);
    fp8_act rounds the input of every FP8 linear as the server does (fp8_activations)."""
    x = state["model.embed_tokens.weight"][ids].float()
    X = x.unsqueeze(1).expand(-1, c["hc_mult"], -1).contiguous()
    stream_rms = []
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        y, post, comb = _hc_pre(X, state, f"{p}.hc_attn", c, hc_pre_impl)
        out = _attention(rms_norm(y, state[f"{p}.input_layernorm.weight"]), state, f"{p}.self_attn", c,
                         zero_attention, attention_out, fp8_act)
        X = _hc_post(out, X, post, comb)
        stream_rms.append(rms(X))
        y, post, comb = _hc_pre(X, state, f"{p}.hc_ffn", c, hc_pre_impl)
        out = _moe(rms_norm(y, state[f"{p}.post_attention_layernorm.weight"]), state, f"{p}.mlp", c, ids, fp8_act)
        X = _hc_post(out, X, post, comb)
        stream_rms.append(rms(X))
    mixes = rms_norm(X.flatten(1)) @ state["model.hc_head_fn"].T
    pre = torch.sigmoid(mixes * state["model.hc_head_scale"] + state["model.hc_head_base"]) + c["hc_eps"]
    y = (pre.unsqueeze(-1) * X).sum(1)
    logits = rms_norm(y, state["model.norm.weight"]) @ state["lm_head.weight"].float().T
    return {"stream_rms": stream_rms, "logits": logits}
