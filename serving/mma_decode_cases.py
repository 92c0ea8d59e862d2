"""Random DeepSeek-V4 sparse-decode inputs in the real FP8 page layout, and a float64 reference.

Shared by the decode tests (tests/kernels/test_mma_decode.py, tests/gpu/, the unpadded-heads cases, the 0.5.23 line's
tests), the decode benches (bench/kernels/decode_timing.py) and `apply.py field-check` (serving/field_kernels.py, so
it lives in serving/ and ships with the package): one page layout, one float64 reference, one pass/fail threshold.
Layout (DeepSeekV4SingleKVPool): a page of P tokens is ceil(P*584/576)*576 bytes; token t's
448 fp8-e4m3 values at t*576, its 64 bf16 rope values at t*576+448, its 7 UE8M0 scale bytes
at P*576 + t*8. The decode backend hands kernels a [pages, P, 1, 584] view of the 2-D pool.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

NOPE, ROPE, D = 448, 64, 512
TOKEN_STRIDE, SCALE_STRIDE = 576, 8
# What a decode output must meet against the float64 reference (and a kernel against the release's own): the GPU
# tests' thresholds and field-check's, read from here by both. bf16 output over FP8 KV: 1.2e-2 relative Frobenius
# error; the log-sum-exp, kept in fp32, within 1e-3 absolute where the reference's is finite (and infinite where it is).
REL_TOL = 1.2e-2
LSE_ABS_TOL = 1e-3


def page_bytes(page_size: int) -> int:
    return math.ceil(page_size * 584 / 576) * 576


def make_kv_pool(num_pages: int, page_size: int, gen: torch.Generator, device="cpu") -> torch.Tensor:
    """A 2-D uint8 pool [num_pages, page_bytes] with random fp8 values, scales and bf16 rope."""
    n = num_pages * page_size
    nope = (torch.randn(n, NOPE, generator=gen) * 100).clamp(-440, 440).to(torch.float8_e4m3fn)
    rope = torch.randn(n, ROPE, generator=gen).to(torch.bfloat16)
    # UE8M0 exponents around 2^-9 (typical for |kv| ~ 1 after dividing by the fp8 range).
    scales = torch.randint(116, 122, (n, 7), generator=gen, dtype=torch.uint8)
    data = torch.cat([nope.view(torch.uint8), rope.view(torch.uint8)], dim=1)  # [n, 576]
    pool = torch.zeros(num_pages, page_bytes(page_size), dtype=torch.uint8)
    body = pool[:, : page_size * TOKEN_STRIDE].view(num_pages, page_size, TOKEN_STRIDE)
    body.copy_(data.view(num_pages, page_size, TOKEN_STRIDE))
    foot = pool[:, page_size * TOKEN_STRIDE : page_size * (TOKEN_STRIDE + SCALE_STRIDE)]
    foot = foot.reshape(num_pages, page_size, SCALE_STRIDE)
    foot[..., :7] = scales.view(num_pages, page_size, 7)
    return pool.to(device)


def kernel_view(pool: torch.Tensor, page_size: int) -> torch.Tensor:
    """The view the DSv4 backend passes: pool[:, :P*584].view(pages, P, 1, 584) as fp8."""
    return pool.view(torch.float8_e4m3fn)[:, : page_size * 584].view(pool.shape[0], page_size, 1, 584)


def tokens_f64(pool: torch.Tensor, page_size: int, tokens: torch.Tensor) -> torch.Tensor:
    """Tokens of a 2-D pool (flat ids page * P + offset, any shape) as float64 [..., 512], on the pool's device;
    read from the bytes, independent of the kernels. Only the tokens asked for are read (a bench's pool is GBs)."""
    tokens = tokens.long()
    page, off = tokens // page_size, tokens % page_size
    flat, row = pool.reshape(-1), pool.shape[1]
    body = flat[(page * row + off * TOKEN_STRIDE)[..., None] + torch.arange(TOKEN_STRIDE, device=pool.device)]
    nope = body[..., :NOPE].contiguous().view(torch.float8_e4m3fn).double()
    rope = body[..., NOPE:].contiguous().view(torch.bfloat16).double()
    exps = flat[(page * row + page_size * TOKEN_STRIDE + off * SCALE_STRIDE)[..., None]
                + torch.arange(7, device=pool.device)]
    nope = (nope.view(*nope.shape[:-1], 7, 64) * torch.pow(2.0, exps.double() - 127.0)[..., None]).flatten(-2)
    return torch.cat([nope, rope], dim=-1)


def attention_f64(q: torch.Tensor, kv: torch.Tensor, valid: torch.Tensor, scale: float,
                  sink: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 attention (out [B,H,512], lse [B,H]) of q [B,H,512] over kv [B,T,512] where `valid` [B,T], with the
    sink in the softmax's denominator; a row with no valid token (and no finite lse) reads 0."""
    B, H = q.shape[:2]
    scores = torch.einsum("bhd,btd->bht", q, kv) * scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, -1)
    if sink is not None:
        lse = torch.logaddexp(lse, sink.double()[None, :])
    has = valid.any(1)[:, None].expand(B, H) & torch.isfinite(lse)
    w = torch.exp(scores - torch.where(has, lse, torch.zeros_like(lse))[..., None])
    w = torch.where(has[..., None], w, torch.zeros_like(w))
    return torch.einsum("bht,btd->bhd", w, kv), lse


@dataclass
class Case:
    q: torch.Tensor  # [B,1,H,512] bf16
    pool: torch.Tensor
    page_size: int
    indices: torch.Tensor  # [B,1,topk] int32
    topk_length: Optional[torch.Tensor]
    sink: Optional[torch.Tensor]
    extra_pool: Optional[torch.Tensor] = None
    extra_page_size: int = 0
    extra_indices: Optional[torch.Tensor] = None
    extra_topk_length: Optional[torch.Tensor] = None
    softmax_scale: float = 512 ** -0.5

    def kwargs(self) -> dict:
        """Positional-compatible arguments of flash_mla_sparse_decode_triton."""
        has_extra = self.extra_pool is not None
        return dict(
            q=self.q,
            k_cache=kernel_view(self.pool, self.page_size),
            indices=self.indices,
            topk_length=self.topk_length,
            attn_sink=self.sink,
            head_dim_v=D,
            softmax_scale=self.softmax_scale,
            extra_k_cache=kernel_view(self.extra_pool, self.extra_page_size) if has_extra else None,
            extra_indices=self.extra_indices,
            extra_topk_length=self.extra_topk_length,
        )


def _random_indices(B, topk, num_tokens, gen, invalid_frac):
    # Entries past topk_length stay valid-looking: the kernel must ignore them by length.
    idx = torch.randint(0, num_tokens, (B, 1, topk), generator=gen, dtype=torch.int32)
    drop = torch.rand(B, 1, topk, generator=gen) < invalid_frac
    idx[drop] = -1
    return idx


def make_case(
    B: int,
    H: int,
    topk: int,
    page_size: int = 256,
    extra_topk: int = 0,
    extra_page_size: int = 64,
    seed: int = 0,
    device="cpu",
    invalid_frac: float = 0.1,
    with_lengths: bool = True,
    sink_mode: str = "random",  # random | none | inf (mix of +inf/-inf/finite)
    num_pages: int = 8,
    edge_rows: bool = True,
) -> Case:
    gen = torch.Generator().manual_seed(seed)
    pool = make_kv_pool(num_pages, page_size, gen)
    q = (torch.randn(B, 1, H, D, generator=gen) * 2).to(torch.bfloat16)
    indices = _random_indices(B, topk, num_pages * page_size, gen, invalid_frac)
    lengths = None
    if with_lengths:
        lengths = torch.randint(0, topk + 1, (B,), generator=gen, dtype=torch.int32)
    extra_pool = extra_indices = extra_lengths = None
    if extra_topk:
        extra_pages = max(2, num_pages * page_size // extra_page_size // 2)
        extra_pool = make_kv_pool(extra_pages, extra_page_size, gen)
        extra_indices = _random_indices(
            B, extra_topk, extra_pages * extra_page_size, gen, invalid_frac
        )
        if with_lengths:
            extra_lengths = torch.randint(0, extra_topk + 1, (B,), generator=gen, dtype=torch.int32)
    if edge_rows and B >= 3:
        # Row 0: nothing to attend to (both lengths 0). Row 1: every index invalid.
        if lengths is not None:
            lengths[0] = 0
        else:
            indices[0] = -1
        if extra_lengths is not None:
            extra_lengths[0] = 0
        elif extra_indices is not None:
            extra_indices[0] = -1
        indices[1] = -1
        if extra_indices is not None:
            extra_indices[1] = -1
    sink = None
    if sink_mode == "random":
        sink = torch.randn(H, generator=gen) * 2
    elif sink_mode == "inf":
        sink = torch.randn(H, generator=gen) * 2
        sink[0] = float("inf")
        sink[1 % H] = float("-inf")
    to = lambda t: None if t is None else t.to(device)  # noqa: E731
    return Case(
        q=to(q), pool=to(pool), page_size=page_size, indices=to(indices),
        topk_length=to(lengths), sink=to(sink),
        extra_pool=to(extra_pool), extra_page_size=extra_page_size if extra_topk else 0,
        extra_indices=to(extra_indices), extra_topk_length=to(extra_lengths),
    )


def reference_f64(case: Case):
    """Float64 attention over the valid tokens of both caches with the sink: (out, lse)."""
    q = case.q.cpu().double()[:, 0]  # [B,H,512]
    B = q.shape[0]

    def gather(pool, ps, indices, lengths):
        idx = indices.cpu().reshape(B, -1).long()
        valid = idx >= 0
        if lengths is not None:
            pos = torch.arange(idx.shape[1])[None, :]
            valid &= pos < lengths.cpu().long()[:, None]
        return tokens_f64(pool.cpu(), ps, idx.clamp(min=0)), valid

    kv, valid = gather(case.pool, case.page_size, case.indices, case.topk_length)
    if case.extra_pool is not None:
        kv2, valid2 = gather(case.extra_pool, case.extra_page_size, case.extra_indices, case.extra_topk_length)
        kv, valid = torch.cat([kv, kv2], 1), torch.cat([valid, valid2], 1)
    out, lse = attention_f64(q, kv, valid, case.softmax_scale, None if case.sink is None else case.sink.cpu())
    return out[:, None], lse[..., None]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative Frobenius error of a against b, in float64 on the CPU."""
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()


def lse_error(lse: torch.Tensor, ref_lse: torch.Tensor) -> float:
    """The largest absolute log-sum-exp difference where the reference's is finite; infinity where the two disagree
    on which entries are finite."""
    lse, ref_lse = lse.double().cpu().reshape(ref_lse.shape), ref_lse.double().cpu()
    finite = torch.isfinite(ref_lse)
    if not torch.equal(finite, torch.isfinite(lse)):
        return math.inf
    return (lse[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0


class GraphInputs:
    """Static buffers for a CUDA-graph capture of a decode call, as SGLang keeps them: q, indices, lengths and
    sink copied, the KV pools copied with the kernel views over the copies. `load(case)` writes another case of
    the same shapes into them before a replay."""

    NAMES = ("q", "indices", "topk_length", "attn_sink", "extra_indices", "extra_topk_length")

    def __init__(self, case: Case):
        self.pool, self.extra_pool = case.pool.clone(), case.extra_pool.clone()
        kw = case.kwargs()
        self.kwargs = {k: (v.clone() if k in self.NAMES and isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        self.kwargs["k_cache"] = kernel_view(self.pool, case.page_size)
        self.kwargs["extra_k_cache"] = kernel_view(self.extra_pool, case.extra_page_size)

    def load(self, case: Case) -> None:
        new = case.kwargs()
        for name in self.NAMES:
            self.kwargs[name].copy_(new[name])
        self.pool.copy_(case.pool)
        self.extra_pool.copy_(case.extra_pool)
