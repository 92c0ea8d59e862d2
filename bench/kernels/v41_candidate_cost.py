"""What DeepSeek-V4.1-Flash's candidate layers cost per decode step on sm_12x, COMPUTED from bytes (nothing is
measured here): the release's generic path, the per-real-length path, and a sparse-table kernel for comparison.

    python3 -m bench.kernels.v41_candidate_cost --computed          # the tables, labelled COMPUTED
    python3 -m bench.kernels.v41_candidate_gpu RESULTS_DIR --slice build/carry-slice-0.5.23   # the GPU timing

The three paths, per candidate layer, read from SGLang 0.5.23's sources (layers/attention/dsv4/v41_indexer/):
- generic: what the release runs off sm_90 without DeepGEMM's sparse table (`scoring.decode_scores`' torch branch,
  then `dense_blocks.DenseBlocksBackend`): int64 slots and a bool mask of [rows, W] built by torch ops, the Triton
  `fp4_index_logits_decode` (keys read for each row's real length, fp32 logits written for all W columns),
  then torch top-k: `select_candidate_block_ids` and `topk(512)` over [rows, W] at the source, `topk_among_blocks`
  at a consumer. W is the captured graph's width (`max_compressed_seq_len`), not the request's length.
- real length: each row's real length L scored by DeepGEMM's paged fp4 MQA logits (fp32 logits on sm_12x,
  `index_logits_dtype`; the rows of one request share its key reads: next_n), the release's top-k v2 for the
  index top-k and `amax_topk_blocks` for the block top-k at the source, `topk_among_blocks` at a consumer.
- sparse table (no sm_12x kernel exists; what one would save): the source as above, each consumer row scores only
  its candidate_topk_blocks x candidate_block_size published positions (`fp8_fp4_paged_sparse_mqa_logits`), then
  `topk_transform_sparse`.

Assumptions (printed with the tables): DeepSeek-V4.1-Flash's config as public ports read it; the candidate
layers are the index-source layers from candidate_source_layer_id on; every rank runs the indexer for every row
(its projections are replicated, attention not data-parallel), so TP 8 does not divide this work; every tensor
an op reads or writes counts as DRAM traffic (no L2 reuse) except that one request's rows share its key reads in
both scoring kernels; a top-k reads its input once (a lower bound: radix selects make several passes); query
projection, RoPE and quantisation (the same in every path, a few KB) are left out.
"""
from __future__ import annotations

import argparse
import platform
import sys
from dataclasses import dataclass

# DeepSeek-V4.1-Flash's text config as public ports of its config.json read it (an mlx-lm port's test fixture
# naming revision deepseek-ai/DeepSeek-V4.1-Flash@dba1be0a, a vllm-gaudi test; they agree on every field here).
V41_FLASH = {
    "num_hidden_layers": 40,
    "hidden_size": 5120,
    "compress_ratios": [0, 0] + [2] * 18 + [1] * 20,
    "index_source_layer_ids": [2, 8, 14, 20, 24, 28, 32, 36],
    "index_n_heads": 32,
    "index_head_dim": 128,
    "index_topk": 512,
    "candidate_source_layer_id": 20,
    "candidate_topk_blocks": 2048,
    "candidate_block_size": 8,
}
BANDWIDTH = 1.8e12              # bytes/s: RTX PRO 6000 Blackwell's datasheet memory bandwidth
STEP_MS = 9.0                   # a V4.1-Flash decode step at concurrency 1, no speculation, 8 cards (field reports)
STEP_SOURCE = "sgl-project/sglang#40877, vllm-project/vllm#56700 (public field reports, about 9 ms)"
TP = 8
CONTEXTS = (131072, 1048576)    # 128K and 1M tokens
BATCHES = (1, 2, 4, 8, 16, 32, 48, 64)
VERIFY_TOKENS = 7               # DSPARK block 6 + the target's own token: block + 1 rows per request
PAGE = 64                       # index-K pool page (slots) DeepGEMM's page table walks
CHUNK = 2048                    # the recipe's chunked-prefill size
FP4_FLOPS = 2.0e15              # FLOP/s: half the RTX PRO 6000 datasheet's 4 PFLOPS FP4 (a figure with sparsity)
PROMPTS = (131072, 1048576)


def key_bytes(cfg: dict = V41_FLASH) -> int:
    """One fp4 index key: e2m1 payload + one e8m0 scale per 32 (get_dsv4_indexer_bytes_per_token)."""
    return cfg["index_head_dim"] // 2 + cfg["index_head_dim"] // 32


def candidate_layers(cfg: dict = V41_FLASH) -> tuple[int, list[int]]:
    """(source, consumers): the index-source layers from candidate_source_layer_id on (dsv41_sparse.py:
    is_candidate_source, uses_candidates; only index-source layers run an indexer)."""
    src = cfg["candidate_source_layer_id"]
    layers = [i for i in cfg["index_source_layer_ids"] if i >= src]
    assert layers and layers[0] == src, f"expected the source {src} among the index sources, found {layers}"
    return src, layers[1:]


@dataclass(frozen=True)
class Shape:
    context: int        # W: the graph's width (compressed positions; ratio 1)
    real: int           # L: each request's real length
    requests: int       # N
    rows: int           # R: N for decode, N x 7 for DSPARK verify
    kind: str           # "decode" or "verify"

    @property
    def label(self) -> str:
        return f"B{self.requests}" + (f"x{VERIFY_TOKENS}" if self.kind == "verify" else "")


def shapes(contexts=CONTEXTS, batches=BATCHES, real=None) -> list[Shape]:
    """Every (context, decode B / verify Bx7) of the tables; the real length is the context unless given."""
    out = []
    for w in contexts:
        for kind, per in (("decode", 1), ("verify", VERIFY_TOKENS)):
            out += [Shape(w, real or w, b, b * per, kind) for b in batches]
    return out


def _topk_out(rows: int, k: int) -> int:
    return rows * k * (4 + 8)               # torch.topk: fp32 values + int64 indices


def generic_scores(s: Shape, cfg: dict = V41_FLASH) -> int:
    """decode_scores' torch branch: slots and mask over [R, W] by torch ops, then fp4_index_logits_decode."""
    R, W, L, N = s.rows, s.context, min(s.real, s.context), s.requests
    b = 8 * W                                   # j = arange(W)
    b += 8 * W + R * W                          # valid = j < lens: reads j, writes bool [R, W]
    b += 8 * W + 8 * W                          # j * ratio
    b += 8 * W + 4 * R * W + 4 * R * W          # req_to_token[req, j * ratio]: int32 gathered and written
    b += 4 * R * W + 8 * R * W                  # .to(int64)
    b += 8 * R * W + 8 * R * W                  # // ratio
    b += R * W + R * W                          # ~valid
    b += 8 * R * W + R * W + 8 * R * W          # masked_fill(~valid, 0)
    b += 8 * R * L + key_bytes(cfg) * N * L     # the kernel: slots and keys of visible tiles (a request's rows share keys)
    b += 4 * R * W                              # fp32 logits, -inf past L: all W columns written
    return b


def generic_source_select(s: Shape, cfg: dict = V41_FLASH) -> int:
    """select_candidate_block_ids (block max, newest block kept, topk 2048) and topk(512) over [R, W]."""
    R, W, blk = s.rows, s.context, cfg["candidate_block_size"]
    nb = W // blk
    b = 4 * R * W + 4 * R * nb                  # unflatten(...).amax(-1)
    b += R * nb                                 # arange(nb) == last: bool [R, nb]
    b += 4 * R * nb + R * nb + 4 * R * nb       # masked_fill(.., inf)
    b += 4 * R * nb + _topk_out(R, min(cfg["candidate_topk_blocks"], nb))
    b += 4 * R * W + _topk_out(R, cfg["index_topk"])        # select_decode: d.scores.topk(512)
    return b


def among_blocks(s: Shape, cfg: dict = V41_FLASH) -> int:
    """topk_among_blocks(scores, lens, blocks, 512): gather of [R, n, 8], its mask, topk(512) of R x n*8."""
    R = s.rows
    C = min(cfg["candidate_topk_blocks"] * cfg["candidate_block_size"], s.context)
    b = 4 * R * C + 4 * R * C                   # by_block.gather: read, write candidates
    b += R * C + 2 * R * C + R * C              # offsets >= room, | (blocks < 0): bool [R, n, 8]
    b += R * C + 4 * R * C + 4 * R * C          # masked_fill_
    b += 4 * R * C + _topk_out(R, cfg["index_topk"])
    return b


def deepgemm_logits(s: Shape, cfg: dict = V41_FLASH) -> int:
    """DeepGEMM's paged fp4 MQA logits over each row's real length: a request's keys read once for its next_n
    rows, its page table, fp32 logits written up to L (clean_logits off)."""
    L = min(s.real, s.context)
    return key_bytes(cfg) * s.requests * L + 4 * s.requests * -(-L // PAGE) + 4 * s.rows * L


def real_source_select(s: Shape, cfg: dict = V41_FLASH) -> int:
    """Top-k v2 of 512 over L, amax_topk_blocks: block maxima of L, top-k v2 of 2048 over L / 8."""
    R, L, blk = s.rows, min(s.real, s.context), cfg["candidate_block_size"]
    nb = -(-L // blk)
    b = 4 * R * L + 4 * R * cfg["index_topk"]                   # index top-k (int32 out)
    b += 4 * R * L + 4 * R * nb                                  # amax8_varlen
    b += 4 * R * nb + 4 * R * min(cfg["candidate_topk_blocks"], nb)     # block top-k
    return b


def sparse_consumer(s: Shape, cfg: dict = V41_FLASH) -> int:
    """A consumer row scores its own published positions only (keys per row), fp32 logits, topk_transform_sparse."""
    R = s.rows
    C = min(cfg["candidate_topk_blocks"] * cfg["candidate_block_size"], min(s.real, s.context))
    return key_bytes(cfg) * R * C + 4 * R * C + 4 * R * C + 4 * R * cfg["index_topk"]


def layer_bytes(s: Shape, cfg: dict = V41_FLASH) -> dict[str, int]:
    """Bytes per call of the source and of one consumer layer, per path."""
    return {
        "generic source": generic_scores(s, cfg) + generic_source_select(s, cfg),
        "generic consumer": generic_scores(s, cfg) + among_blocks(s, cfg),
        "real source": deepgemm_logits(s, cfg) + real_source_select(s, cfg),
        "real consumer": deepgemm_logits(s, cfg) + among_blocks(s, cfg),
        "sparse consumer": sparse_consumer(s, cfg),
    }


def step_bytes(s: Shape, cfg: dict = V41_FLASH) -> dict[str, int]:
    """Bytes per decode step over all candidate layers (one source, the consumers), per path."""
    _, consumers = candidate_layers(cfg)
    n, lb = len(consumers), layer_bytes(s, cfg)
    return {
        "generic": lb["generic source"] + n * lb["generic consumer"],
        "real length": lb["real source"] + n * lb["real consumer"],
        "sparse table": lb["real source"] + n * lb["sparse consumer"],
    }


def prefill(prompt: int, cfg: dict = V41_FLASH, chunk: int = CHUNK) -> dict[str, dict[str, float]]:
    """One prompt's prefill through the candidate layers, chunk by chunk (each row i sees i + 1 positions):
    FLOPs (2 x heads x dim per row and position scored) and bytes (keys once per chunk: every visible key for a
    dense scorer, the union of the rows' blocks for a sparse one, at most every visible key; fp32 logits written, read back by the source's two top-ks, by a consumer only at its
    candidates), per path: 'dense' scores every visible position at every candidate layer (the release's DeepGEMM
    prefill on sm_12x, and the real-length path), 'sparse' has the consumers score only their published
    positions. Time = max(bytes / bandwidth, FLOPs / FP4_FLOPS) summed over chunks and layers (a floor)."""
    _, consumers = candidate_layers(cfg)
    per_pos = 2 * cfg["index_n_heads"] * cfg["index_head_dim"]
    span = cfg["candidate_topk_blocks"] * cfg["candidate_block_size"]
    kb = key_bytes(cfg)
    out = {"dense": dict(flop=0.0, bytes=0.0, s=0.0), "sparse": dict(flop=0.0, bytes=0.0, s=0.0)}
    for start in range(0, prompt, chunk):
        rows = min(chunk, prompt - start)
        pairs = rows * start + rows * (rows + 1) // 2             # sum of (start + i + 1) over the chunk's rows
        sparse_pairs = sum(min(start + i + 1, span) for i in range(rows)) if start < span else rows * span
        end = start + rows
        src = (per_pos * pairs, kb * end + 12 * pairs)             # written, then read by both top-ks
        dense_cons = (per_pos * pairs, kb * end + 4 * pairs + 2 * 4 * rows * min(span, end))
        sparse_cons = (per_pos * sparse_pairs, kb * min(end, rows * span) + 2 * 4 * sparse_pairs)
        for path, cons in (("dense", dense_cons), ("sparse", sparse_cons)):
            for flop, nbytes in (src, *[cons] * len(consumers)):
                o = out[path]
                o["flop"] += flop
                o["bytes"] += nbytes
                o["s"] += max(nbytes / BANDWIDTH, flop / FP4_FLOPS)
    return out


def live_token_floor(cfg: dict = V41_FLASH) -> float:
    """ms per decode step per million live tokens that the consumers' key reads cost on the real-length path
    (a consumer reads every live token's key; the sparse table reads 16384 a row instead)."""
    _, consumers = candidate_layers(cfg)
    return ms(len(consumers) * key_bytes(cfg) * 1_000_000)


def ms(nbytes: int) -> float:
    return nbytes / BANDWIDTH * 1e3


def _tokens(n: int) -> str:
    return f"{n >> 20}M" if n % (1 << 20) == 0 else f"{n >> 10}K"


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:,.1f}"


def table(rows: list[Shape], cfg: dict = V41_FLASH) -> list[str]:
    out = ["| context | step | rows | generic src MB | generic cons MB | real src MB | real cons MB | sparse cons MB "
           "| generic ms | real ms | sparse ms | generic % | real % | sparse % |",
           "|---|---|---:|" + "---:|" * 11]
    for s in rows:
        lb, sb = layer_bytes(s, cfg), step_bytes(s, cfg)
        t = {k: ms(v) for k, v in sb.items()}
        ctx = _tokens(s.context) + ("" if s.real == s.context else f" (real {_tokens(s.real)})")
        out.append(f"| {ctx} | {s.label} | {s.rows} | {_mb(lb['generic source'])} | {_mb(lb['generic consumer'])} "
                   f"| {_mb(lb['real source'])} | {_mb(lb['real consumer'])} | {_mb(lb['sparse consumer'])} "
                   f"| {t['generic']:.3f} | {t['real length']:.3f} | {t['sparse table']:.3f} | "
                   + " | ".join(f"{100 * t[k] / STEP_MS:.1f}" for k in ("generic", "real length", "sparse table"))
                   + " |")
    return out


def assumptions(cfg: dict = V41_FLASH) -> list[str]:
    src, consumers = candidate_layers(cfg)
    ratios = {cfg["compress_ratios"][i] for i in (src, *consumers)}
    return [
        f"candidate layers: source {src}, consumers {consumers} (index sources from candidate_source_layer_id on), "
        f"compress ratio {sorted(ratios)}: one index key per token, so W and L are tokens",
        f"index keys: fp4, {key_bytes(cfg)} B per position ({cfg['index_head_dim']} e2m1 + e8m0 per 32); "
        f"index heads {cfg['index_n_heads']} (q and weights left out: a few KB a row)",
        f"index_topk {cfg['index_topk']}, candidate_topk_blocks {cfg['candidate_topk_blocks']} x block "
        f"{cfg['candidate_block_size']} = {cfg['candidate_topk_blocks'] * cfg['candidate_block_size']} positions a consumer reads",
        f"TP {TP}, attention not data-parallel: each card runs the indexer for every row (replicated projections); "
        "per-card bytes = per-step bytes",
        f"time = bytes / {BANDWIDTH / 1e12:.1f} TB/s (RTX PRO 6000 datasheet), no launch or latency floor; "
        f"% = of a {STEP_MS:g} ms decode step ({STEP_SOURCE}); a batch-64 or verify step is longer than that, "
        "so % overstates the share there",
        "DRAM traffic: every tensor an op reads or writes, no L2 reuse, except a request's rows sharing its key reads; "
        "a top-k reads its input once (a lower bound)",
        f"decode: B rows; DSPARK verify: B x {VERIFY_TOKENS} rows (block 6 + 1); the drafter has no candidate layer",
    ]


def computed_report(cfg: dict = V41_FLASH) -> str:
    from bench.command import command_line
    from patchkit.lockfile import load_lock
    from serving import REPO

    sglang = load_lock(REPO / "pin.lock", "0.5.23").upstream("sglang")
    lines = [f"COMPUTED, NOT MEASURED: {command_line()}",
             f"python {platform.python_version()}; model: the v41_indexer sources of sglang {sglang.version} "
             f"({sglang.artifact}, sha256 {sglang.sha256[:12]}); config: DeepSeek-V4.1-Flash as public ports read it"]
    lines += [f"assumption: {a}" for a in assumptions(cfg)]
    lines += ["", "## per layer (MB a call) and per decode step over all candidate layers (ms at 1.8 TB/s, % of "
              f"{STEP_MS:g} ms), real length = context", ""]
    lines += table(shapes(), cfg)
    lines += ["", "## the graph's width against the real length: a 1M-token graph serving 128K-token requests", ""]
    lines += table(shapes(contexts=(1048576,), real=131072), cfg)
    lines += ["", f"## prefill through the candidate layers, {CHUNK}-token chunks (a floor: max of bytes at "
              f"{BANDWIDTH / 1e12:.1f} TB/s and FLOPs at {FP4_FLOPS / 1e15:g} PFLOP/s fp4, per chunk and layer)", "",
              "| prompt | dense PFLOP | dense GB | dense s | sparse PFLOP | sparse GB | sparse s |", "|---|" + "---:|" * 6]
    for p in PROMPTS:
        r = prefill(p, cfg)
        lines.append(f"| {_tokens(p)} | " + " | ".join(
            f"{r[k]['flop'] / 1e15:,.2f} | {r[k]['bytes'] / 1e9:,.1f} | {r[k]['s']:,.2f}" for k in ("dense", "sparse")) + " |")
    lines += ["", f"consumers' key reads on the real-length path: {live_token_floor(cfg):.3f} ms per decode step per "
              "million live tokens (the sum of N x L over the batch; the KV pool bounds it) COMPUTED"]
    worst = shapes(contexts=(1048576,), batches=(1,))[0]
    saved = step_bytes(worst, cfg)["real length"] - step_bytes(worst, cfg)["sparse table"]
    lines += ["", f"sparse table vs real length at 1M, B1: {_mb(saved)} MB = {ms(saved):.3f} ms a step "
              f"({100 * ms(saved) / STEP_MS:.1f} % of {STEP_MS:g} ms) COMPUTED"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--computed", action="store_true", required=True, help="print the computed tables (no GPU)")
    ap.parse_args(argv)
    print(computed_report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
