"""field-check's indexer stage: DeepSeek-V4.1-Flash's ratio-1/2 indexer as the 0.5.23 line runs it on sm_12x.

Per shape of serving/field_rows.py indexer_shapes(), on one set of inputs built as the line builds them (random
bf16 queries and keys through its own fp4 quantiser and index-K store kernel, keys in 64-slot pages behind a
shuffled page table, fp32 head weights), three rows:
- torch reference: the release's own torch scoring (DeepseekV41Indexer.scores over keys the release's pool
  dequantises, queries dequantised the same way) in float32, against the same functions in float64;
- DeepGEMM fp4 paged MQA logits: DeepGEMM's own schedule (get_paged_mqa_logits_metadata) and the line's
  deep_gemm_fp4_paged_mqa_logits, against that float32 reference at every position below each row's length;
- candidate blocks: the line's paged_topk_block_ids and topk_among_blocks (and the positions as pool slots) on
  DeepGEMM's logits where they ran, else on the float32 reference with garbage past each row's length, against
  the float64 sparse-table set (sparse_table_set below: the blocks of 8 with the largest maximum, the newest
  always, then the top-k among their positions).
A row that cannot run says why (not sm_100/sm_12x, kernel missing, not installed on this line, out of memory, the
time budget) and the report goes on. torch is imported when the stage runs, never at import.
"""
from __future__ import annotations

import types
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

from . import field_kernels as K, field_rows as R

REF_F64_TOL = 1e-5            # the float32 reference against float64: fp32 sums of 128 products and 32 heads
# DeepGEMM against the float32 reference, by the logits dtype the line asks for (index_logits_dtype: float32 off
# sm_100; bfloat16 on sm_100, whose rounding alone is 2^-9 relative)
DEEPGEMM_TOL = {"torch.float32": 1e-3, "torch.bfloat16": 1e-2}
GARBAGE = 1e9                 # past a row's length: larger than any score, so a reader past the length picks it
TIMED_ITERS = 10


@dataclass
class IndexerParts:
    """The line's functions the stage calls, wherever they come from (the installed sglang, or a tree)."""
    where: str
    quantize: Callable        # quantize_fp4_indexer_tensor(x [n, 128], rne=) -> (int8 [n, 64], int32 [n])
    store: Callable           # store_fp4_index_k_cache(input=, cache=, loc=, page_size=, rne=)
    dequant: Callable         # (cache, slots, page_size) -> bf16 [n, 128]: the pool's get_index_k_dequant
    scores: Callable          # DeepseekV41Indexer.scores(q [t, H, d], k [n, d], weights [t, H]) -> [t, n] float32
    deep_gemm: Callable       # () -> (schedule, num_sms, logits): imports DeepGEMM, raising where it is missing
    block_ids: Optional[Callable] = None       # dense_blocks.paged_topk_block_ids(logits, seq_lens, topk_blocks)
    among_blocks: Optional[Callable] = None    # candidate_blocks.topk_among_blocks(scores, lens, blocks, k, block_size=)
    to_slots: Optional[Callable] = None        # dense_blocks._positions_to_pool_slots(positions, table, page_size)
    amax8: str = "sglang's amax8_varlen (a JIT CUDA kernel)"
    candidate_missing: Optional[str] = None    # why the candidate rows cannot run here


def pool_dequant(get_index_k_dequant: Callable) -> Callable:
    """The index-K pool's own get_index_k_dequant (unbound) over one buffer: (cache, slots, page_size) -> bf16."""
    def dequant(cache, slots, page_size):
        pool = types.SimpleNamespace(use_fp4_indexer=True, index_k_with_scale_buffer=[cache], start_layer=0,
                                     page_size=page_size, size=cache.shape[0] * page_size)
        return get_index_k_dequant(pool, 0, slots)
    return dequant


def installed_parts() -> IndexerParts:
    """The parts out of the installed sglang (ImportError where the line has no V4.1 indexer)."""
    from sglang.kernels.ops.attention.dsv4 import index_logits
    from sglang.kernels.ops.kvcache.dsv4_fp4_index_k_cache import store_fp4_index_k_cache
    from sglang.kernels.ops.quantization.fp4_indexer_quant import quantize_fp4_indexer_tensor
    from sglang.srt.layers.attention.dsv4.dsv41_sparse import DeepseekV41Indexer
    from sglang.srt.layers.attention.dsv4.v41_indexer import dense_blocks
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool

    def deep_gemm():
        import deep_gemm as dg

        return dg.get_paged_mqa_logits_metadata, dg.get_num_sms, index_logits.deep_gemm_fp4_paged_mqa_logits

    block_ids = getattr(dense_blocks, "paged_topk_block_ids", None)
    return IndexerParts(
        where="the installed sglang", quantize=quantize_fp4_indexer_tensor, store=store_fp4_index_k_cache,
        dequant=pool_dequant(DeepSeekV4IndexerPool.get_index_k_dequant),
        scores=lambda q, k, w: DeepseekV41Indexer.scores(None, q, k, w), deep_gemm=deep_gemm,
        block_ids=block_ids, among_blocks=dense_blocks.topk_among_blocks,
        to_slots=getattr(dense_blocks, "_positions_to_pool_slots", None),
        candidate_missing=None if block_ids else NO_CANDIDATE)


NO_CANDIDATE = ("not installed on this line: its dense_blocks has no paged_topk_block_ids (the line's V4.1 start-up "
                "patch adds the candidate layers' sm_12x path)")


@dataclass(frozen=True)
class Geometry:
    """The indexer's sizes (V4.1-Flash's by default; a CPU test shrinks them)."""
    heads: int = R.V41_INDEX_HEADS
    dim: int = R.V41_INDEX_DIM
    page: int = R.V41_INDEX_PAGE
    topk: int = R.V41_INDEX_TOPK
    topk_blocks: int = R.V41_TOPK_BLOCKS
    block: int = R.V41_BLOCK


# -- inputs ----------------------------------------------------------------------------------------------

@dataclass
class Case:
    lens: object          # int32 [requests, per_request]: the positions each query row sees
    table: object         # int32 [requests, pages]: each request's pages of the pool
    cache: object         # uint8 [pool pages, page * 68]: the index-K pool
    q_fp4: object         # int8 [rows, heads, 64]
    q_sf: object          # int32 [rows, heads]
    weights: object       # float32 [rows, heads]
    q: object             # float32 [rows, heads, dim]: the quantised queries, dequantised
    width: int            # table pages x page: the logits' width (the line's max_compressed_seq_len)


def row_lengths(shape: R.IndexerShape, device):
    """[requests, per_request]: the last request sees `context` positions, the others spread below it; a
    request's verify rows see one position more each."""
    import torch

    b, n, c = shape.requests, shape.per_request, shape.context
    last = torch.tensor([max(n, c * (i + 1) // b) for i in range(b)], dtype=torch.int32, device=device)
    return (last[:, None] - (n - 1) + torch.arange(n, dtype=torch.int32, device=device)[None, :]).contiguous()


def build_case(parts: IndexerParts, shape: R.IndexerShape, geo: Geometry, seed: int) -> Case:
    import torch

    dev = K.DEVICE
    g = torch.Generator(device=dev).manual_seed(seed)
    lens = row_lengths(shape, dev)
    pages = -(-shape.context // geo.page)
    total = shape.requests * pages
    table = torch.randperm(total, generator=g, device=dev).to(torch.int32).view(shape.requests, pages)
    cache = torch.zeros(total, geo.page * 68, dtype=torch.uint8, device=dev)
    chunk = 1 << 20                               # keys written a million slots at a time (memory)
    for start in range(0, total * geo.page, chunk):
        n = min(chunk, total * geo.page - start)
        keys = torch.randn(n, geo.dim, generator=g, device=dev).to(torch.bfloat16)
        parts.store(input=keys, cache=cache, loc=torch.arange(start, start + n, device=dev), page_size=geo.page,
                    rne=True)
    rows = shape.rows
    q = torch.randn(rows * geo.heads, geo.dim, generator=g, device=dev).to(torch.bfloat16)
    q_fp4, q_sf = parts.quantize(q, rne=True)
    # the same queries through the same store, so the pool's own dequantisation reads them back
    q_pool = torch.zeros(-(-rows * geo.heads // geo.page), geo.page * 68, dtype=torch.uint8, device=dev)
    slots = torch.arange(rows * geo.heads, device=dev)
    parts.store(input=q, cache=q_pool, loc=slots, page_size=geo.page, rne=True)
    q_deq = parts.dequant(q_pool, slots, geo.page).float().view(rows, geo.heads, geo.dim)
    # fp32 head weights, at the scale the line gives them (softmax scale x heads^-1/2)
    weights = torch.randn(rows, geo.heads, generator=g, device=dev) * (geo.dim ** -0.5 * geo.heads ** -0.5)
    return Case(lens, table, cache, q_fp4.view(rows, geo.heads, -1), q_sf.view(rows, geo.heads), weights, q_deq,
                pages * geo.page)


def request_slots(case: Case, b: int, length: int, page: int):
    import torch

    pos = torch.arange(length, device=case.table.device)
    return case.table[b, pos // page].to(torch.int64) * page + pos % page


def reference_logits(parts: IndexerParts, case: Case, geo: Geometry, dtype, keys=None):
    """[rows, width] of the release's torch scoring in `dtype`, NaN past each request's longest row."""
    import torch

    b_count, n = case.lens.shape
    out = torch.full((b_count * n, case.width), float("nan"), dtype=torch.float32, device=case.q.device)
    for b in range(b_count):
        length = int(case.lens[b].max())
        k = keys[b] if keys is not None else parts.dequant(case.cache, request_slots(case, b, length, geo.page),
                                                            geo.page)
        rows = slice(b * n, (b + 1) * n)
        out[rows, :length] = parts.scores(case.q[rows].to(dtype), k.to(dtype), case.weights[rows].to(dtype))
    return out


@contextmanager
def ieee_fp32():
    """float32 matmuls in full precision while inside (a runtime may have allowed TF32, whose 10-bit mantissa the
    reference must not inherit), then as they were."""
    import torch

    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def valid_mask(case: Case):
    import torch

    lens = case.lens.reshape(-1, 1)
    return torch.arange(case.width, device=lens.device)[None, :] < lens


# -- the float64 sparse-table set --------------------------------------------------------------------------

def sparse_table_set(scores, length: int, topk_blocks: int, k: int, block: int):
    """float64, one row: (the kept block ids, the chosen positions) of the sparse table's semantics over the row's
    first `length` scores: the `topk_blocks` blocks of `block` with the largest maximum, the newest block always,
    then the `k` largest scores among those blocks' positions below the length."""
    import torch

    row = scores[:length].double()
    nblocks = -(-length // block)
    padded = torch.nn.functional.pad(row, (0, nblocks * block - length), value=-torch.inf)
    keys = padded.view(nblocks, block).amax(-1)
    keys[nblocks - 1] = torch.inf
    kept = keys.topk(min(topk_blocks, nblocks)).indices
    positions = (kept[:, None] * block + torch.arange(block, device=row.device)[None, :]).reshape(-1)
    positions = positions[positions < length]
    best = row[positions].topk(min(k, positions.numel())).indices
    return kept, positions[best]


def _same_choice(values, got, want) -> bool:
    """Equal sets, or sets that differ only among equal values (either tie-break is the selection)."""
    got, want = sorted(got), sorted(want)
    if got == want:
        return True
    return len(got) == len(want) and sorted(values[got].tolist()) == sorted(values[want].tolist())


# -- the rows --------------------------------------------------------------------------------------------

def _candidate(parts: IndexerParts, case: Case, logits, geo: Geometry) -> dict:
    """The line's block selection on `logits` against the float64 sparse-table set, row by row."""
    import torch

    seq_lens = case.lens.reshape(-1).contiguous()
    n = case.lens.shape[1]
    table = case.table.repeat_interleave(n, dim=0)

    def select():
        blocks = parts.block_ids(logits, seq_lens, geo.topk_blocks)
        positions = parts.among_blocks(logits, seq_lens, blocks, geo.topk, block_size=geo.block)
        return blocks, positions, parts.to_slots(positions, table, geo.page)

    blocks, positions, slots = select()
    if K.DEVICE == "cuda":
        torch.cuda.synchronize()
    bad = 0
    for r in range(seq_lens.numel()):
        length = int(seq_lens[r])
        kept, chosen = sparse_table_set(logits[r], length, geo.topk_blocks, geo.topk, geo.block)
        row = logits[r, :length].double()
        keys = torch.nn.functional.pad(row, (0, -length % geo.block), value=-torch.inf).view(-1, geo.block).amax(-1)
        keys[-1] = torch.inf
        got_blocks = blocks[r][blocks[r] >= 0].tolist()
        got = positions[r][positions[r] >= 0].tolist()
        inside = all(x < keys.numel() for x in got_blocks) and all(p < length for p in got)
        if not (inside and _same_choice(keys, got_blocks, kept.tolist()) and _same_choice(row, got, chosen.tolist())):
            bad += 1
    pick = positions.clamp_min(0)
    want_slots = torch.where(positions >= 0, table.gather(1, pick // geo.page).long() * geo.page + pick % geo.page, -1)
    slots_ok = bool(torch.equal(slots.long(), want_slots))
    return {"mismatched_rows": bad, "slots_match": slots_ok, "status": "pass" if bad == 0 and slots_ok else "fail",
            "amax8_varlen": parts.amax8, "ms": K.time_ms(select, TIMED_ITERS)}


def _deep_gemm_logits(dg, case: Case, geo: Geometry):
    """DeepGEMM's schedule and the line's logits call, as the line makes them for this batch: () -> logits."""
    schedule, num_sms, logits = dg
    b_count, n = case.lens.shape
    plan = schedule(case.lens, geo.page, num_sms())
    q = (case.q_fp4.view(b_count, n, geo.heads, -1), case.q_sf.view(b_count, n, geo.heads))
    k_cache = case.cache.view(case.cache.shape[0], geo.page, 1, 68)
    lens = case.lens if n > 1 else case.lens.reshape(-1)      # decode: 1-D, as the line's metadata holds them
    return lambda: logits(q, k_cache, case.weights, lens, case.table, plan, case.width)


def stage_indexer(source, facts: dict, budget: K.Budget, say, shapes=None, geo: Geometry = Geometry()) -> list[dict]:
    """Every indexer row (module doc), shapes smallest first; each that cannot run says why."""
    shapes = R.indexer_shapes() if shapes is None else shapes
    out: list[dict] = []

    def base(shape, kind):
        return {"label": f"{kind} {shape.label}", "kind": kind, "shape": shape.kind, **{
            k: v for k, v in shape.as_dict().items() if k not in ("label", "kind")}}

    dg_off = R.deepgemm_fp4_reason(facts["cc"])      # first: on such a card no other reason matters to its rows
    try:
        parts = source.indexer_parts() if hasattr(source, "indexer_parts") else installed_parts()
    except Exception as exc:   # the line's indexer code is not importable here: every row says so
        why = _unimportable(exc)
        for s in shapes:
            ref_b, dg_b, cand_b = (base(s, kind) for kind in R.INDEXER_KINDS)
            out += [K.skipped(why, **ref_b), K.skipped(dg_off or why, **dg_b), K.skipped(why, **cand_b)]
        say(f"  indexer: every row skipped ({why})")
        return out
    dg = None
    if dg_off is None:
        try:
            dg = parts.deep_gemm()
        except Exception as exc:
            dg_off = K.classify(exc)
    for i, shape in enumerate(shapes):
        ref_b, dg_b, cand_b = (base(shape, kind) for kind in R.INDEXER_KINDS)
        if budget.spent():
            out += [K.skipped(budget.spent(), **b) for b in (ref_b, dg_b, cand_b)]
            continue
        rows = _shape_rows(parts, shape, geo, i, dg, dg_off, ref_b, dg_b, cand_b)
        if K.DEVICE == "cuda":
            import torch

            torch.cuda.empty_cache()        # the next shape's pool, not this one's
        out += rows
        for row in rows:
            say(f"  indexer {row['label']}: {K._brief(row)}")
    return out


def _unimportable(exc: BaseException) -> str:
    """An sglang without the V4.1 indexer's modules (the 0.5.14 line) is not this line's; no sglang at all, or any
    other failure, is the kernel missing."""
    name = getattr(exc, "name", None) or ""
    if isinstance(exc, ModuleNotFoundError) and name.startswith("sglang."):
        return f"not installed on this line: the installed sglang has no {name} (DeepSeek-V4.1's indexer)"
    return K.classify(exc)


def _candidate_off(parts: IndexerParts) -> Optional[str]:
    return parts.candidate_missing or (None if parts.block_ids else NO_CANDIDATE)


def _shape_rows(parts, shape, geo, seed, dg, dg_off, ref_b, dg_b, cand_b) -> list[dict]:
    try:
        with ieee_fp32():
            return _rows_of_case(parts, shape, geo, seed, dg, dg_off, ref_b, dg_b, cand_b)
    except Exception as exc:   # the inputs or the reference could not be built: the shape's rows say why
        why = K.classify(exc)
        return [K.skipped(why, **ref_b), K.skipped(dg_off or why, **dg_b),
                K.skipped(_candidate_off(parts) or why, **cand_b)]


def _rows_of_case(parts, shape, geo, seed, dg, dg_off, ref_b, dg_b, cand_b) -> list[dict]:
    import torch

    from .mma_decode_cases import rel_err

    case = build_case(parts, shape, geo, seed)
    keys = [parts.dequant(case.cache, request_slots(case, b, int(case.lens[b].max()), geo.page), geo.page)
            for b in range(case.lens.shape[0])]
    ref32 = reference_logits(parts, case, geo, torch.float32, keys)
    ref64 = reference_logits(parts, case, geo, torch.float64, keys)
    valid = valid_mask(case)
    err = rel_err(ref32[valid], ref64[valid])
    ref = {**ref_b, "err_f64": K.finite(err), "status": "pass" if err < REF_F64_TOL else "fail",
           "ms": K.time_ms(lambda: reference_logits(parts, case, geo, torch.float32, keys), TIMED_ITERS)}
    del ref64
    logits = None
    if dg_off:
        dgr = K.skipped(dg_off, **dg_b)
    else:
        try:
            call = _deep_gemm_logits(dg, case, geo)
            logits = call()
            if K.DEVICE == "cuda":
                torch.cuda.synchronize()
            err = rel_err(logits[valid].float(), ref32[valid])
            tol = DEEPGEMM_TOL.get(str(logits.dtype), min(DEEPGEMM_TOL.values()))
            dgr = {**dg_b, "err_f32_ref": K.finite(err), "logits_dtype": str(logits.dtype).replace("torch.", ""),
                   "status": "pass" if err < tol else "fail", "ms": K.time_ms(call, TIMED_ITERS)}
        except Exception as exc:
            dgr, logits = K.skipped(K.classify(exc), **dg_b), None
    if _candidate_off(parts):
        cand = K.skipped(_candidate_off(parts), **cand_b)
    else:
        try:
            if logits is None:     # the float32 reference, garbage past each row's length (DeepGEMM leaves it)
                scored = ref32.masked_fill(~valid, GARBAGE).contiguous()
                on = "the float32 torch reference (DeepGEMM did not run)"
            else:
                scored, on = logits, "DeepGEMM's logits"
            cand = {**cand_b, "logits": on, **_candidate(parts, case, scored, geo)}
        except Exception as exc:
            cand = K.skipped(K.classify(exc), **cand_b)
    return [ref, dgr, cand]
