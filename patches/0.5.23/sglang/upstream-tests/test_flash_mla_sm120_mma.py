"""sm_120 sparse-MLA decode: the head-group MMA kernel against the module's PyTorch fallback.

Both compute attention over the same FP8 KV pages (DeepSeek-V4 layout: per token 448 fp8-e4m3 values,
64 bf16 rope values and 7 UE8M0 scale bytes). Without CUDA the Triton kernels run in Triton's interpreter
on small shapes (CPU part), launched by mma_sparse_decode: the op the entry point calls,
torch.ops.sglang.sm120_mma_sparse_decode, is registered for CUDA. With CUDA, the entry point at
decode-sized shapes (GPU part).
"""

import math
import os
import unittest

import torch

if not torch.cuda.is_available():
    # Triton reads this when a kernel is decorated: set before the kernel module is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from sglang.kernels.ops.attention.flash_mla_sm120 import _sm120_sparse_decode_fwd
from sglang.kernels.ops.attention.flash_mla_sm120_mma import (
    flash_mla_sparse_decode_mma,
    mma_sparse_decode,
)
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


def _decode(q, k_cache, indices, lens, sink, head_dim_v, scale, *extra):
    if q.is_cuda:
        return flash_mla_sparse_decode_mma(
            q, k_cache, indices, lens, sink, head_dim_v, scale, *extra
        )
    return mma_sparse_decode(q, k_cache, indices, lens, sink, scale, *extra)


class TestFlashMLASm120MMA(unittest.TestCase):
    def _check(self, batch, heads, topk, extra_topk, device):
        args = _case(batch, heads, topk, extra_topk, device)
        out, lse = _decode(*args)
        ref_out, ref_lse = _sm120_sparse_decode_fwd(*args)
        self.assertEqual(out.shape, ref_out.shape)
        self.assertEqual(out.dtype, torch.bfloat16)
        rel = (out.double() - ref_out.double()).norm() / ref_out.double().norm()
        # bf16 q, probabilities and output: about 2^-8 relative each
        self.assertLess(rel.item(), 1.2e-2)
        # The kernel's lse counts the attention sink (as the per-head Triton kernel's does); the
        # fallback's does not.
        sink = args[4].double().view(1, -1, 1)
        want = torch.logaddexp(ref_lse.double(), sink)
        finite = torch.isfinite(want)
        self.assertTrue(torch.equal(finite, torch.isfinite(lse)))
        self.assertLess((lse.double()[finite] - want[finite]).abs().max().item(), 1e-3)

    @unittest.skipIf(torch.cuda.is_available(), "the interpreter run is the CPU part")
    def test_cpu_interpreter_small(self):
        self._check(batch=2, heads=16, topk=32, extra_topk=32, device="cpu")

    @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")
    def test_gpu_decode_shapes(self):
        for heads in (8, 16, 64):
            for batch in (1, 16, 64):
                with self.subTest(heads=heads, batch=batch):
                    self._check(
                        batch=batch,
                        heads=heads,
                        topk=128,
                        extra_topk=512,
                        device="cuda",
                    )


if __name__ == "__main__":
    unittest.main()
