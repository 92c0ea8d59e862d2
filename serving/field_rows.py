"""What `apply.py field-check` runs, as data: the stated shape list, each line's own decode call and the release's own
sm_120 path beside it, which stages have run on a GPU here, and the routing rule evaluated on a card's rows.

Nothing here imports torch: the CLI reads it on any machine, the CPU tests check it, serving/field_kernels.py runs it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

WINDOW = 128                   # every layer's sliding window: the main cache's top-k
PAGE = 256                     # the recipes' --page-size (serving/serve_cmd.py)
C4_PAGE = 64                   # the compressed cache's page the decode backend hands the kernel
HEADS_PER_RANK = (8, 16, 32, 64)   # 64 query heads at TP 8 / 4 / 2 / 1
DECODE_B = (1, 2, 4, 8, 16, 32, 64, 128)   # CUDA-graph batch sizes
VERIFY_B = (1, 8, 32)          # DSPARK target verify: B requests x (block + 1 = 7) rows
VERIFY_TOKENS = 7
DRAFT_EXTEND_B = (1, 8, 32)    # DSPARK draft extend: B requests x the 6-token draft block
DRAFT_TOKENS = 6
PREFILL_ROWS = 2048            # a chunked-prefill chunk
MODELS = {"V4-Flash": 512, "V4.1-Flash": 1024}   # the index top-k each reads beside the window
CHECKED_ROWS = 64              # rows above this are checked against float64 at this many sampled rows


@dataclass(frozen=True)
class Row:
    """One P1 correctness row: `rows` query rows of `heads` heads over a window of `topk` tokens (pages of `page`)
    and `extra_topk` compressed tokens (pages of `extra_page`)."""
    label: str
    model: str
    kind: str          # decode | verify | draft-extend | prefill
    rows: int
    heads: int
    topk: int
    extra_topk: int
    page: int
    extra_page: int

    def as_dict(self) -> dict:
        return asdict(self)


def p1_rows() -> list[Row]:
    """The stated shape list, in the order it runs (smallest first, so a card short of memory still reports the
    rows it could run)."""
    out = []
    for model, extra in MODELS.items():
        for heads in HEADS_PER_RANK:
            def add(kind, rows, label, page=PAGE, extra_page=C4_PAGE):
                out.append(Row(f"{model} h{heads} {label}", model, kind, rows, heads, WINDOW, extra, page, extra_page))
            for b in DECODE_B:
                add("decode", b, f"decode B{b}")
            for b in VERIFY_B:
                add("verify", b * VERIFY_TOKENS, f"verify B{b}x{VERIFY_TOKENS}")
            for b in DRAFT_EXTEND_B:
                add("draft-extend", b * DRAFT_TOKENS, f"draft-extend B{b}x{DRAFT_TOKENS}")
            add("prefill", PREFILL_ROWS, f"prefill {PREFILL_ROWS}")
            add("decode", 16, "decode B16 page 64", page=64)   # the other page size the line's tests serve
    return sorted(out, key=lambda r: (r.rows * r.heads, r.label))


# (rows, heads, label): the decode and verify captures replayed with new inputs
GRAPH_ROWS = ((32, 16, "decode B32"), (8 * VERIFY_TOKENS, 16, f"verify B8x{VERIFY_TOKENS}"), (128, 64, "decode B128"))


@dataclass(frozen=True)
class LineCall:
    """A line's sm_120 decode entry point and the switch that picks its backend (read when the module loads)."""
    module: str
    selector: str
    p1: str                    # the selector's value for P1
    release: str               # the selector's value for the release's own sm_120 path
    release_label: str
    release_sm12x_only: bool   # the release's path runs on sm_12x alone (no sm_90 build)
    routes: bool               # the line's dispatcher routes its default by query rows (SM120_DEFAULT_ROUTES)


LINES = {
    "0.5.14": LineCall("sglang.srt.layers.attention.flash_mla_sm120", "SGLANG_SM120_SPARSE_DECODE", "mma", "triton",
                       "the release's per-head Triton kernel", False, False),
    "0.5.23": LineCall("sglang.kernels.ops.attention.flash_mla_sm120", "SGLANG_SM120_FLASHMLA_BACKEND", "mma",
                       "flashinfer", "FlashInfer's sm_120 kernels, as SGLang calls them", True, True),
}

# The indexer DeepSeek-V4.1-Flash reaches on sm_12x (0.5.23): its ratio-1/2 layers score with DeepGEMM's paged fp4
# MQA logits under DeepGEMM's own schedule, and the candidate layers select blocks with the line's functions
# (serving/field_indexer.py runs them). The shape is tests/line_0_5_23/test_v41_startup.py's fixture: 32 index
# heads of dim 128, index top-k 512, 2048 candidate blocks of 8; the keys are fp4 in the index pool's 64-slot pages.
V41_INDEX_HEADS = 32
V41_INDEX_DIM = 128
V41_INDEX_PAGE = 64
V41_INDEX_TOPK = 512
V41_TOPK_BLOCKS = 2048
V41_BLOCK = 8
INDEXER_CONTEXTS = (4096, 65536)     # the compressed positions the longest row of a batch sees
INDEXER_DECODE_B = (1, 8, 48)
INDEXER_VERIFY_B = (1, 8, 48)        # x VERIFY_TOKENS rows, each seeing one position more than the one before
# Each shape's rows, in the order they run: the release's torch scoring in float32 against the same in float64;
# DeepGEMM's logits against that float32 scoring; the candidate selection against the float64 sparse-table set.
INDEXER_KINDS = ("torch reference", "DeepGEMM fp4 paged MQA logits", "candidate blocks")
# DeepGEMM's fp4 paged MQA-logits kernel exists for these capability majors alone (its host code's check,
# `arch_major == 10 or arch_major == 12`, in sgl-deep-gemm 0.2.3.post2's _C.so)
DEEPGEMM_FP4_MAJORS = (10, 12)


@dataclass(frozen=True)
class IndexerShape:
    """`requests` requests of `per_request` query rows each (1: decode; 7: DSPARK verify), the longest seeing
    `context` compressed positions."""
    label: str
    kind: str
    requests: int
    per_request: int
    context: int

    @property
    def rows(self) -> int:
        return self.requests * self.per_request

    def as_dict(self) -> dict:
        return {**asdict(self), "rows": self.rows}


def indexer_shapes(contexts=INDEXER_CONTEXTS) -> list[IndexerShape]:
    """The indexer stage's shapes, smallest context first."""
    out = []
    for context in contexts:
        ctx = f"{context // 1024}K" if context % 1024 == 0 else str(context)
        out += [IndexerShape(f"decode B{b} ctx {ctx}", "decode", b, 1, context) for b in INDEXER_DECODE_B]
        out += [IndexerShape(f"verify B{b}x{VERIFY_TOKENS} ctx {ctx}", "verify", b, VERIFY_TOKENS, context)
                for b in INDEXER_VERIFY_B]
    return out


def deepgemm_fp4_reason(cc: str) -> str | None:
    """Why DeepGEMM's fp4 paged MQA logits cannot run on a card of compute capability `cc` ("9.0"), or None."""
    major = int(cc.split(".")[0])
    if major in DEEPGEMM_FP4_MAJORS:
        return None
    return (f"not run: needs sm_100 or sm_12x (DeepGEMM's fp4 paged MQA-logits kernel is built for those alone; "
            f"this card is sm_{cc.replace('.', '')})")


# The stages in the order they run; and those that have not run on any GPU here (docs/field_check.md and every
# report's header name them). No stage has run on an sm_12x card.
STAGES = ("machine", "p1", "graphs", "release", "routing", "indexer", "server")
NEVER_RAN_HERE = {
    "release": "the release's own sm_120 path on 0.5.23 (FlashInfer's sm_120 kernels as SGLang calls them)",
    "routing": "the routing rule evaluated on a card's own timings",
    "indexer": ("DeepGEMM's fp4 paged MQA logits (sm_100 and sm_12x alone) and the line's candidate blocks with "
                "sglang's own amax8_varlen kernel"),
    "server": "the server stage with a real checkpoint (MODEL=path)",
}
NONE_ON_SM12X = "No stage of field-check has run on an sm_12x card: this report may be the first."


def implied_routes(timings: list[dict], p1: str = "mma", other: str = "flashinfer") -> tuple:
    """SM120_DEFAULT_ROUTES as the rule of README ("The sm_120 default on 0.5.23 is mma") sets it from one card's
    rows: P1 serves a row count where it passed and is not slower than `other`; a row count where `other` passed
    and P1 is slower (or failed) goes to `other`. `timings`: {rows, p1_ms, p1_pass, other_ms, other_pass}, one per
    row count (the slowest P1 among rows of a count decides); rows without both timings are left to P1. Adjacent
    counts routed alike merge into one (first, last, backend) range, ends taken from the counts measured."""
    worst: dict[int, dict] = {}
    for t in timings:
        if t.get("p1_ms") is None or t.get("other_ms") is None:
            continue
        n = t["rows"]
        cur = worst.setdefault(n, {"p1_ms": 0.0, "other_ms": 0.0, "p1_pass": True, "other_pass": True})
        cur["p1_ms"] = max(cur["p1_ms"], t["p1_ms"])
        cur["other_ms"] = max(cur["other_ms"], t["other_ms"])
        cur["p1_pass"] &= bool(t["p1_pass"])
        cur["other_pass"] &= bool(t["other_pass"])
    routes: list[list] = []
    for n in sorted(worst):
        w = worst[n]
        to_other = w["other_pass"] and (not w["p1_pass"] or w["p1_ms"] > w["other_ms"])
        if not to_other:
            continue
        if routes and routes[-1][3] == _previous(sorted(worst), n):
            routes[-1][1], routes[-1][3] = n, n
        else:
            routes.append([n, n, other, n])
    return tuple((first, last, backend) for first, last, backend, _ in routes)


def _previous(counts: list[int], n: int) -> int | None:
    i = counts.index(n)
    return counts[i - 1] if i else None
