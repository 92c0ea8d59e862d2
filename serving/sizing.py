"""Memory sizing of DeepSeek-V4-Flash and V4.1-Flash computed from their config.json (COMPUTED, NOT MEASURED).

    python -m serving.sizing [--config serving/dsv4_flash_config.json] [--tp 8] [--gpu-gib 96]
                             [--mem-fraction 0.85] [--reserve-gib 6] [--context 1048576]
                             [--graph-batch 48] [--verify-rows 7]

What it counts, from the config and the pinned sglang's layer shapes (models/deepseek_v4.py,
layers/attention/dsv4/compressor.py and indexer.py, mxfp4_marlin_moe.py):
  weights   in memory on the sm_120 path: routed experts in MXFP4 (4 bits + one e8m0 scale byte per
            32), the other linears of attention and the shared expert in FP8 (1 byte + a fp32 scale per
            128x128 block) but wo_a in bf16 (SGLANG_OPT_FP8_WO_A_GEMM is off on sm_120), the
            compressors, the indexer's weights_proj, embeddings and head in bf16, the router, mHC and
            sinks in fp32; the MTP layer included (it is in the checkpoint).
  per GPU   at --tp: the routed and shared experts, wq_b / wo_a / wo_b, the embedding and the head split
            --tp ways; wq_a, wkv, the compressors, the indexer, the router and mHC replicated (sglang
            builds them as ReplicatedLinear / plain parameters).
  KV cache  per token, on every rank (one KV head: MQA is not split by TP): each c4 layer keeps one
            584-byte entry (448 fp8 + 64 bf16 + 8 scale bytes, flash_mla_sm120.py) per 4 tokens plus
            its indexer's 132-byte entry (128 fp8 + fp32 scale) per 4 tokens, each c128 layer one
            584-byte entry per 128 tokens; every layer's sliding window adds 584 bytes x window per
            request, not per token. DeepSeek-V4.1 (sglang 0.5.23) adds ratio-1 and ratio-2 layers: only
            the layers in kv_source_layer_ids own their compressed cache (584 bytes per 1 or 2 tokens; the
            layers between read it, deepseek_v4_memory_pool.collect_sources_by_ratio), and those in
            index_source_layer_ids an fp4 index key (index_head_dim / 2 + index_head_dim / 32 bytes per
            compressed token, get_dsv4_indexer_bytes_per_token); off sm_100 the main cache keeps V4's
            584-byte entries (select_dsv4_kv_layout).
  engram    V4.1's n-gram tables, one per engram layer: engram_num_embeddings rows of engram_head_dim fp8
            bytes + one e8m0 scale per 32 (layers/engram.py), rows split over the TP ranks in device
            memory, or all in host memory with SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1 (--engram-host).
  index logits  V4.1's ratio-1/2 index layers on sm_120 score a decode or verify step with DeepGEMM's paged
            fp4 kernel into an fp32 buffer [rows, width] allocated per call outside the static pool: width is
            the captured graph's compressed context (the page table's width at 64-slot index pages, so the
            whole --context at ratio 1), rows the graph batch x the verify rows per request (DSPARK: block
            size + 1). The candidate source adds its block maxima (1/8 of it). One layer's buffer is live at a
            time, and the captured graphs share one pool, so the largest graph's buffer is what is counted.
Real usage differs by page rounding (256-token pages), CUDA-graph pools, activations and NCCL buffers:
--reserve-gib stands for those. Check a real start's log ("KV Cache is allocated", "max_total_num_tokens").
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "dsv4_flash_config.json"
GIB = 1 << 30
KV_ENTRY = 448 + 64 * 2 + 8          # bytes per compressed/window entry of the sm_120 FP8 cache
INDEXER_ENTRY = 128 + 4              # fp8 key + its fp32 scale
ENGRAM_SCALE_BLOCK = 32               # one e8m0 scale byte per 32 fp8 values of an engram row
FP4_BYTES = 0.5 + 1 / 32             # e2m1 + one e8m0 per 32
FP8_BYTES = 1 + 4 / (128 * 128)
INDEX_PAGE = 64                      # slots of a low-ratio index-K page (get_index_k_page_size)
LOGITS_BYTES = 4                     # DeepGEMM's index logits are fp32 off sm_100 (index_logits_dtype)
CANDIDATE_BLOCK = 8                  # the candidate source's block maxima: one fp32 key per 8 logits


def layer_kinds(config: dict) -> list[int]:
    """Compress ratio of every layer, the MTP layers' included (the config lists one more entry)."""
    n = config["num_hidden_layers"] + config.get("num_nextn_predict_layers", 0)
    return list(config["compress_ratios"][:n])


def weight_bytes(config: dict, tp: int = 1) -> dict:
    """{'total': bytes of the whole checkpoint's tensors, 'per_gpu': bytes on one of `tp` ranks, by part}."""
    c = config
    H, heads, hd = c["hidden_size"], c["num_attention_heads"], c["head_dim"]
    q, o, g = c["q_lora_rank"], c["o_lora_rank"], c["o_groups"]
    E, I, hc = c["n_routed_experts"], c["moe_intermediate_size"], c["hc_mult"]
    ih, ihd = c["index_n_heads"], c["index_head_dim"]
    split, repl = {}, {}

    def add(d, key, value):
        d[key] = d.get(key, 0.0) + value

    index_sources = set(c.get("index_source_layer_ids", ()))
    for layer, ratio in enumerate(layer_kinds(c)):
        add(split, "routed experts (MXFP4)", E * 3 * H * I * FP4_BYTES)
        add(split, "shared expert (FP8)", c["n_shared_experts"] * 3 * H * I * FP8_BYTES)
        add(split, "attention wq_b/wo_b (FP8)", (q * heads * hd + g * o * H) * FP8_BYTES)
        # wo_a is bf16 in memory on sm_120 (ServerArgs turns SGLANG_OPT_FP8_WO_A_GEMM off there)
        add(split, "attention wo_a (bf16)", heads * hd // g * g * o * 2)
        add(repl, "attention wq_a/wkv (FP8)", (H * q + H * hd) * FP8_BYTES)
        add(repl, "router, mHC, sinks, norms (fp32)",
            E * H * 4 + 2 * (2 + hc) * hc * hc * H * 4 + heads * 4 + (q + hd + 2 * H) * 4)
        if ratio:
            coff = 2 if ratio == 4 else 1
            add(repl, "compressors (bf16)", (H * 2 * coff * hd + ratio * coff * hd * 2) * 2)
        if ratio == 4 or (ratio in (1, 2) and layer in index_sources):
            add(repl, "indexer (FP8 wq_b, bf16 rest)", q * ih * ihd * FP8_BYTES + H * ih * 2 + H * 2 * 2 * ihd * 2)
    add(split, "embedding + head (bf16)", 2 * c["vocab_size"] * H * 2)
    total = sum(split.values()) + sum(repl.values())
    per_gpu = {k: v / tp for k, v in split.items()} | repl
    return {"total": total, "parts": {**split, **repl}, "per_gpu": per_gpu, "per_gpu_total": sum(per_gpu.values())}


def kv_bytes(config: dict) -> dict:
    """KV bytes per token (all layers) and per request (the windows), on each rank."""
    per_token = per_request = 0.0
    kinds = layer_kinds(config)[: config["num_hidden_layers"]]    # the MTP layer keeps no cache without MTP
    kv_sources = set(config.get("kv_source_layer_ids", ()))
    index_sources = set(config.get("index_source_layer_ids", ()))
    index_fp4 = config.get("index_head_dim", 128) // 2 + config.get("index_head_dim", 128) // 32
    for layer, ratio in enumerate(kinds):
        per_request += config["sliding_window"] * KV_ENTRY
        if ratio == 4:
            per_token += (KV_ENTRY + INDEXER_ENTRY) / 4
        elif ratio in (1, 2):         # V4.1: the sources own the cache and the index keys, the others read them
            per_token += (KV_ENTRY * (layer in kv_sources) + index_fp4 * (layer in index_sources)) / ratio
        elif ratio:
            per_token += KV_ENTRY / ratio
    return {"per_token": per_token, "per_request": per_request,
            "layers": {r: kinds.count(r) for r in sorted(set(kinds))}}


def engram_bytes(config: dict) -> float:
    """V4.1's engram tables, all layers' rows, fp8 with their e8m0 scales (0 without engram layers)."""
    dim = config.get("engram_head_dim", 0)
    rows = sum(config.get("engram_num_embeddings", ()) or ()) if config.get("engram_layer_ids") else 0
    return rows * (dim + dim // ENGRAM_SCALE_BLOCK)


def index_logits_bytes(config: dict, context: int, graph_batch: int, verify_rows: int) -> float:
    """V4.1's per-call fp32 index-logits buffer at the largest captured graph (0 without ratio-1/2 layers)."""
    ratios = [r for r in config.get("compress_ratios", ()) if r in (1, 2)]
    if not ratios:
        return 0.0
    width = -(-context // min(ratios) // INDEX_PAGE) * INDEX_PAGE
    keys = 1 / CANDIDATE_BLOCK if config.get("candidate_topk_blocks", 0) > 0 else 0
    return graph_batch * verify_rows * width * LOGITS_BYTES * (1 + keys)


def plan(config: dict, tp: int, gpu_gib: float, mem_fraction: float, reserve_gib: float, context: int,
         engram_host: bool = False, graph_batch: int = 48, verify_rows: int = 1) -> dict:
    w = weight_bytes(config, tp)
    kv = kv_bytes(config)
    engram = engram_bytes(config)
    engram_gpu = 0.0 if engram_host else engram / tp
    pool = gpu_gib * GIB * mem_fraction - w["per_gpu_total"] - engram_gpu
    tokens = max(pool, 0) / kv["per_token"]
    request = kv["per_token"] * context + kv["per_request"]
    logits = index_logits_bytes(config, context, graph_batch, verify_rows)
    outside = reserve_gib + logits / GIB
    return {"tp": tp, "gpu_gib": gpu_gib, "mem_fraction": mem_fraction, "reserve_gib": reserve_gib,
            "weights_total_gib": w["total"] / GIB, "weights_per_gpu_gib": w["per_gpu_total"] / GIB,
            "kv_per_token_bytes": kv["per_token"], "window_per_request_bytes": kv["per_request"],
            "layers_by_ratio": kv["layers"], "kv_pool_per_gpu_gib": pool / GIB, "kv_tokens": tokens,
            "context": context, "requests_at_context": max(pool, 0) / request,
            "headroom_gib": gpu_gib * (1 - mem_fraction) - outside,
            "graph_batch": graph_batch, "verify_rows": verify_rows, "index_logits_gib": logits / GIB,
            "max_mem_fraction": 1 - outside / gpu_gib,
            "engram_total_gib": engram / GIB, "engram_per_gpu_gib": engram_gpu / GIB, "engram_host": engram_host,
            "parts_gib": {k: v / GIB for k, v in w["parts"].items()}}


def text(p: dict) -> str:
    lines = [f"COMPUTED from config.json, not measured: TP={p['tp']}, {p['gpu_gib']:g} GiB per GPU, "
             f"--mem-fraction-static {p['mem_fraction']:g}",
             f"weights: {p['weights_total_gib']:.1f} GiB in all, {p['weights_per_gpu_gib']:.1f} GiB per GPU"]
    lines += [f"  {k}: {v:.1f} GiB" for k, v in p["parts_gib"].items()]
    if p["engram_total_gib"]:
        where = "in host memory (SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1)" if p["engram_host"] else \
            f"{p['engram_per_gpu_gib']:.1f} GiB per GPU (rows split over the TP ranks)"
        lines.append(f"engram tables: {p['engram_total_gib']:.1f} GiB in all, {where}")
    lines += [f"KV cache: {p['kv_per_token_bytes']:.0f} bytes per token per GPU (layers by compress ratio "
              f"{p['layers_by_ratio']}), + {p['window_per_request_bytes'] / (1 << 20):.1f} MiB per request "
              "(the sliding windows)",
              f"KV pool per GPU: {p['kv_pool_per_gpu_gib']:.1f} GiB = {p['kv_tokens'] / 1e6:.1f} M tokens; "
              f"{p['requests_at_context']:.1f} requests of {p['context']} tokens",
              f"outside the static pool: {p['gpu_gib'] * (1 - p['mem_fraction']):.1f} GiB per GPU for CUDA graphs, "
              f"activations and NCCL (assumed need {p['reserve_gib']:g} GiB"
              + (f" + the index-logits buffer {p['index_logits_gib']:.2f} GiB at {p['graph_batch']} x "
                 f"{p['verify_rows']} rows" if p["index_logits_gib"] else "")
              + f": headroom {p['headroom_gib']:.1f} GiB); --mem-fraction-static at most {p['max_mem_fraction']:.3f}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m serving.sizing", description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--gpu-gib", type=float, default=96.0, help="memory per GPU (RTX PRO 6000: 96 GB)")
    ap.add_argument("--mem-fraction", type=float, default=0.85)
    ap.add_argument("--reserve-gib", type=float, default=6.0)
    ap.add_argument("--context", type=int, default=1 << 20)
    ap.add_argument("--graph-batch", type=int, default=48,
                    help="the largest CUDA-graph batch (with DSPARK, max_running_requests defaults to 48)")
    ap.add_argument("--verify-rows", type=int, default=1,
                    help="rows a request scores per decode step: 1, or DSPARK's block size + 1 (7 at block 6)")
    ap.add_argument("--engram-host", action="store_true",
                    help="V4.1: the engram tables in host memory (SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        config = json.loads(args.config.read_text())
        config = {**config.pop("text_config", {}), **config}     # V4.1 checkpoints nest the text model's fields
        result = plan(config, args.tp, args.gpu_gib, args.mem_fraction, args.reserve_gib, args.context,
                      args.engram_host, args.graph_batch, args.verify_rows)
    except (OSError, ValueError, KeyError) as exc:
        print(f"sizing: expected a DeepSeek-V4 config.json at {args.config}, found {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    print(json.dumps(result, indent=1) if args.json else text(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
