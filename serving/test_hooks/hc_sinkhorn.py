"""hc_split_sinkhorn without tilelang, for the GPU-box harness (serving/test_hooks/boxhooks).

SGLang 0.5.14's `sglang.srt.layers.mhc.hc_split_sinkhorn` is a TileLang kernel with no fallback,
and DeepSeek-V4's hc_pre calls it in every layer of every forward whenever the TileLang MHC-pre
path is off (as on sm_120). A machine that cannot carry tilelang (an air-gapped GPU machine) gets this
module instead, bound in by serving/test_hooks/emulate_sm120.py's import hook, for the pinned and the
patched tree alike. It is harness code, not a patch.

Same arithmetic as the TileLang kernel (pinned sglang/srt/layers/mhc.py, hc_split_sinkhorn_kernel),
per row of `mixes` [n, (2 + hc) * hc] in fp32:

    pre[j]     = sigmoid(mixes[j] * scale[0] + base[j]) + eps
    post[j]    = 2 * sigmoid(mixes[hc + j] * scale[1] + base[hc + j])
    comb[j, k] = mixes[2hc + j*hc + k] * scale[2] + base[2hc + j*hc + k]
    comb       = exp(comb - rowmax) / rowsum + eps           # row softmax, then + eps
    comb       = comb / (colsum + eps)
    repeat iters - 1 times: comb /= (rowsum + eps); comb /= (colsum + eps)

On CUDA one Triton program handles a block of rows (the whole Sinkhorn loop in registers, one
launch, CUDA-graph safe), like the single TileLang launch it stands in for. Elsewhere, or with
OVERLAY_HC_SINKHORN=torch, the same arithmetic runs as torch ops (~80 small kernels per call).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BLOCK_ROWS = 32


def _split_shapes(mixes: torch.Tensor, hc_mult: int):
    if mixes.dim() != 3 or mixes.shape[-1] != (2 + hc_mult) * hc_mult:
        raise ValueError(f"hc_split_sinkhorn: expected mixes [b, s, {(2 + hc_mult) * hc_mult}] "
                         f"for hc_mult={hc_mult}, found {list(mixes.shape)}")
    if mixes.dtype != torch.float32:
        raise ValueError(f"hc_split_sinkhorn: expected float32 mixes (as the TileLang kernel), found {mixes.dtype}")
    b, s, _ = mixes.shape
    return b, s


def hc_split_sinkhorn_torch(mixes: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor,
                            hc_mult: int = 4, sinkhorn_iters: int = 20, eps: float = 1e-6):
    """(pre [b,s,hc], post [b,s,hc], comb [b,s,hc,hc]), fp32, by torch ops."""
    b, s = _split_shapes(mixes, hc_mult)
    hc = hc_mult
    m = mixes.reshape(-1, (2 + hc) * hc)
    scale = hc_scale.float()
    base = hc_base.float()
    pre = torch.sigmoid(m[:, :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(m[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
    comb = (m[:, 2 * hc:] * scale[2] + base[2 * hc:]).view(-1, hc, hc)
    comb = torch.exp(comb - comb.amax(dim=2, keepdim=True))
    comb = comb / comb.sum(dim=2, keepdim=True) + eps
    comb = comb / (comb.sum(dim=1, keepdim=True) + eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=2, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=1, keepdim=True) + eps)
    return pre.view(b, s, hc), post.view(b, s, hc), comb.reshape(b, s, hc, hc)


@triton.jit
def _hc_split_sinkhorn_kernel(mix_ptr, scale_ptr, base_ptr, pre_ptr, post_ptr, comb_ptr, n,
                              HC: tl.constexpr, ITERS: tl.constexpr, EPS: tl.constexpr,
                              BLOCK: tl.constexpr):
    MIX: tl.constexpr = (2 + HC) * HC
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rmask = rows < n
    j = tl.arange(0, HC)
    s0 = tl.load(scale_ptr)
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)

    mask2 = rmask[:, None]
    m_pre = tl.load(mix_ptr + rows[:, None] * MIX + j[None, :], mask=mask2, other=0.0)
    pre = tl.sigmoid(m_pre * s0 + tl.load(base_ptr + j)[None, :]) + EPS
    tl.store(pre_ptr + rows[:, None] * HC + j[None, :], pre, mask=mask2)
    m_post = tl.load(mix_ptr + rows[:, None] * MIX + HC + j[None, :], mask=mask2, other=0.0)
    post = 2 * tl.sigmoid(m_post * s1 + tl.load(base_ptr + HC + j)[None, :])
    tl.store(post_ptr + rows[:, None] * HC + j[None, :], post, mask=mask2)

    jk = j[:, None] * HC + j[None, :]                      # [HC, HC] offsets of comb[j, k]
    mask3 = rmask[:, None, None]
    c = tl.load(mix_ptr + rows[:, None, None] * MIX + 2 * HC + jk[None, :, :], mask=mask3, other=0.0)
    c = c * s2 + tl.load(base_ptr + 2 * HC + jk)[None, :, :]
    c = tl.exp(c - tl.max(c, axis=2)[:, :, None])
    c = c / tl.sum(c, axis=2)[:, :, None] + EPS
    c = c / (tl.sum(c, axis=1)[:, None, :] + EPS)
    for _ in range(ITERS - 1):
        c = c / (tl.sum(c, axis=2)[:, :, None] + EPS)
        c = c / (tl.sum(c, axis=1)[:, None, :] + EPS)
    tl.store(comb_ptr + rows[:, None, None] * (HC * HC) + jk[None, :, :], c, mask=mask3)


def hc_split_sinkhorn_triton(mixes: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor,
                             hc_mult: int = 4, sinkhorn_iters: int = 20, eps: float = 1e-6):
    """The same outputs as hc_split_sinkhorn_torch, one Triton launch."""
    b, s = _split_shapes(mixes, hc_mult)
    if hc_mult & (hc_mult - 1):
        raise ValueError(f"hc_split_sinkhorn_triton: hc_mult must be a power of two, found {hc_mult}")
    hc = hc_mult
    m = mixes.reshape(-1, (2 + hc) * hc).contiguous()
    n = m.shape[0]
    pre = mixes.new_empty(b, s, hc)
    post = mixes.new_empty(b, s, hc)
    comb = mixes.new_empty(b, s, hc, hc)
    if n:
        _hc_split_sinkhorn_kernel[(triton.cdiv(n, BLOCK_ROWS),)](
            m, hc_scale.float().contiguous(), hc_base.float().contiguous(), pre, post, comb, n,
            HC=hc, ITERS=sinkhorn_iters, EPS=eps, BLOCK=BLOCK_ROWS)
    return pre, post, comb


def hc_split_sinkhorn(mixes: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor,
                      hc_mult: int = 4, sinkhorn_iters: int = 20, eps: float = 1e-6):
    """Drop-in for sglang.srt.layers.mhc.hc_split_sinkhorn (same signature and outputs)."""
    if mixes.is_cuda and os.environ.get("OVERLAY_HC_SINKHORN", "triton") != "torch":
        return hc_split_sinkhorn_triton(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps)
    return hc_split_sinkhorn_torch(mixes, hc_scale, hc_base, hc_mult, sinkhorn_iters, eps)
