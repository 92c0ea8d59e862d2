"""sm_120 sparse-MLA decode with SGLANG_SM120_FLASHMLA_BACKEND=mma, through its entry point.

flash_mla_with_kvcache_sm120 reads the backend once, at import: this file sets mma before importing it, so every
call below takes the mma branch (the head-group MMA kernel of flash_mla_sm120_mma.py) at every row count,
including above SM120_DECODE_MAX_TOKENS, where the flashinfer backend switches to its prefill kernel. Its output
is compared with the module's PyTorch fallback over the same FP8 KV pages (DeepSeek-V4 layout: per token 448
fp8-e4m3 values, 64 bf16 rope values and 7 UE8M0 scale bytes). MqaAttentionBase._kernel_num_heads must give
mma a TP rank's real heads (the kernel takes any head count) and leave the other backends as they were.
"""

import math
import os
import unittest
from types import SimpleNamespace
from unittest import mock

import torch

# Read by flash_mla_sm120 when it is imported: set before that import.
os.environ["SGLANG_SM120_FLASHMLA_BACKEND"] = "mma"

from sglang.kernels.ops.attention import flash_mla_sm120
from sglang.kernels.ops.attention.flash_mla_sm120 import (
    SM120_DECODE_MAX_TOKENS,
    _sm120_sparse_decode_fwd,
    flash_mla_with_kvcache_sm120,
)
from sglang.srt.environ import envs
from sglang.srt.models import deepseek_v4
from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=60, stage="base-b", runner_config="1-gpu-small")

NOPE, ROPE, D = 448, 64, 512


def _kv_pool(pages: int, page_size: int, gen: torch.Generator) -> torch.Tensor:
    """[pages, page_size, 1, 584] fp8 view of a uint8 pool: token t's 576 data bytes at t*576, its
    scale bytes after all tokens' data (8 per token, 7 used)."""
    n = pages * page_size
    nope = (
        (torch.randn(n, NOPE, generator=gen) * 100)
        .clamp(-440, 440)
        .to(torch.float8_e4m3fn)
    )
    rope = torch.randn(n, ROPE, generator=gen).to(torch.bfloat16)
    scales = torch.randint(116, 122, (n, 7), generator=gen, dtype=torch.uint8)
    page_bytes = math.ceil(page_size * 584 / 576) * 576
    pool = torch.zeros(pages, page_bytes, dtype=torch.uint8)
    body = pool[:, : page_size * 576].view(pages, page_size, 576)
    body.copy_(
        torch.cat([nope.view(torch.uint8), rope.view(torch.uint8)], 1).view(
            pages, page_size, 576
        )
    )
    foot = pool[:, page_size * 576 : page_size * 584].reshape(pages, page_size, 8)
    foot[..., :7] = scales.view(pages, page_size, 7)
    return pool.view(torch.float8_e4m3fn)[:, : page_size * 584].view(
        pages, page_size, 1, 584
    )


def _case(batch, heads, topk, extra_topk, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    cache = _kv_pool(4, 64, gen)
    extra = _kv_pool(4, 64, gen) if extra_topk else None
    q = (torch.randn(batch, 1, heads, D, generator=gen) * 2).to(torch.bfloat16)
    idx = torch.randint(0, 256, (batch, 1, topk), generator=gen, dtype=torch.int32)
    idx[torch.rand(batch, 1, topk, generator=gen) < 0.1] = -1
    lengths = torch.randint(1, topk + 1, (batch,), generator=gen, dtype=torch.int32)
    extra_idx = extra_len = None
    if extra_topk:
        extra_idx = torch.randint(
            0, 256, (batch, 1, extra_topk), generator=gen, dtype=torch.int32
        )
        extra_len = torch.randint(
            0, extra_topk + 1, (batch,), generator=gen, dtype=torch.int32
        )
    sink = torch.randn(heads, generator=gen) * 2
    to = lambda t: None if t is None else t.to(device)  # noqa: E731
    return (
        to(q),
        to(cache),
        to(idx),
        to(lengths),
        to(sink),
        D,
        D**-0.5,
        to(extra),
        to(extra_idx),
        to(extra_len),
    )


def _entry_point(
    q, k_cache, indices, lens, sink, head_dim_v, scale, extra, extra_idx, extra_len
):
    return flash_mla_with_kvcache_sm120(
        q=q,
        k_cache=k_cache,
        indices=indices,
        topk_length=lens,
        attn_sink=sink,
        head_dim_v=head_dim_v,
        softmax_scale=scale,
        extra_k_cache=extra,
        extra_indices_in_kvcache=extra_idx,
        extra_topk_length=extra_len,
    )


class TestFlashMLASm120MMA(unittest.TestCase):
    @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")
    def test_entry_point_with_mma_matches_the_fallback(self):
        self.assertEqual(flash_mla_sm120._sm120_default_backend, "mma")
        for heads in (8, 16, 64):
            for batch in (1, 16, 64, 2 * SM120_DECODE_MAX_TOKENS):
                with self.subTest(heads=heads, batch=batch):
                    args = _case(batch, heads, 128, 512, "cuda")
                    out, lse = _entry_point(*args)
                    ref_out, ref_lse = _sm120_sparse_decode_fwd(*args)
                    self.assertEqual(out.shape, ref_out.shape)
                    self.assertEqual(out.dtype, torch.bfloat16)
                    rel = (
                        out.double() - ref_out.double()
                    ).norm() / ref_out.double().norm()
                    # bf16 q, probabilities and output: about 2^-8 relative each
                    self.assertLess(rel.item(), 1.2e-2)
                    # the kernel's lse counts the attention sink; the fallback's does not
                    sink = args[4].double().view(1, -1, 1)
                    want = torch.logaddexp(ref_lse.double(), sink)
                    finite = torch.isfinite(want)
                    self.assertTrue(torch.equal(finite, torch.isfinite(lse)))
                    self.assertLess(
                        (lse.double()[finite] - want[finite]).abs().max().item(), 1e-3
                    )

    def test_kernel_num_heads_gives_mma_the_ranks_heads(self):
        attn = deepseek_v4.MqaAttentionBase.__new__(deepseek_v4.MqaAttentionBase)
        attn.attn_tp_size, attn.n_local_heads, attn.n_heads = 4, 16, 64
        sm120 = SimpleNamespace(is_sm120=True)
        with mock.patch.object(deepseek_v4, "get_platform", return_value=sm120):
            for tokens in (1, SM120_DECODE_MAX_TOKENS, 2 * SM120_DECODE_MAX_TOKENS):
                with envs.SGLANG_SM120_FLASHMLA_BACKEND.override("mma"):
                    self.assertEqual(attn._kernel_num_heads(tokens), 16)
            # the other fallbacks keep their padded decode width
            with envs.SGLANG_SM120_FLASHMLA_BACKEND.override("triton"):
                self.assertEqual(attn._kernel_num_heads(1), 64)


if __name__ == "__main__":
    unittest.main()
