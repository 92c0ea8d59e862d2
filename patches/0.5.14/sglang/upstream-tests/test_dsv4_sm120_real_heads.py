"""DeepSeek-V4 decode at TP > 1 on sm_120: a rank's real query heads instead of 64 padded ones.

The head-group MMA kernel tiles any head count itself, so a TP rank's heads go to it unpadded (with the
first n entries of the zero-padded sink). This checks that the dispatcher says so for its default backend,
and that the kernel's output for the real heads equals the padded call's first heads up to rounding.
Without CUDA the kernels run in Triton's interpreter on small shapes (CPU part), launched by
mma_sparse_decode: the op the entry point calls, torch.ops.sglang.sm120_mma_sparse_decode, is registered for
CUDA. With CUDA, the entry point at decode shapes.
"""

import math
import os
import unittest

import torch

if not torch.cuda.is_available():
    # Triton reads this when a kernel is decorated: set before the kernel module is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from sglang.srt.layers.attention import flash_mla_sm120
from sglang.srt.layers.attention.flash_mla_sm120_mma import (
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


def _decode(q, k_cache, indices, lens, sink, head_dim_v, scale, *extra):
    if q.is_cuda:
        return flash_mla_sparse_decode_mma(
            q, k_cache, indices, lens, sink, head_dim_v, scale, *extra
        )
    return mma_sparse_decode(q, k_cache, indices, lens, sink, scale, *extra)


def _padded_vs_real(heads, batch, topk, extra_topk, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    cache, extra = _kv_pool(4, 64, gen), _kv_pool(4, 64, gen)
    q = (torch.randn(batch, 1, 64, D, generator=gen) * 2).to(
        torch.bfloat16
    )  # junk past `heads`
    idx = torch.randint(0, 256, (batch, 1, topk), generator=gen, dtype=torch.int32)
    extra_idx = torch.randint(
        0, 256, (batch, 1, extra_topk), generator=gen, dtype=torch.int32
    )
    lens = torch.full((batch,), topk, dtype=torch.int32)
    extra_lens = torch.full((batch,), extra_topk, dtype=torch.int32)
    sink = torch.zeros(64)
    sink[:heads] = torch.randn(heads, generator=gen)
    dev = lambda t: t.to(device)  # noqa: E731
    common = (dev(cache), dev(idx), dev(lens))
    rest = (D, D**-0.5, dev(extra), dev(extra_idx), dev(extra_lens))
    padded, _ = _decode(dev(q), *common, dev(sink), *rest)
    real, _ = _decode(
        dev(q[:, :, :heads].contiguous()), *common, dev(sink[:heads]), *rest
    )
    return padded[:, :, :heads].double(), real.double()


class TestSm120RealHeads(unittest.TestCase):
    def test_default_backend_takes_real_heads(self):
        self.assertTrue(flash_mla_sm120.sm120_decode_takes_real_heads())

    def _check(self, heads, batch, topk, extra_topk, device):
        padded, real = _padded_vs_real(heads, batch, topk, extra_topk, device)
        self.assertEqual(real.shape, (batch, 1, heads, D))
        # bf16 outputs of two split layouts: rounding only
        self.assertLess(((real - padded).norm() / padded.norm()).item(), 1e-2)

    @unittest.skipIf(torch.cuda.is_available(), "the interpreter run is the CPU part")
    def test_cpu_interpreter_small(self):
        self._check(heads=8, batch=2, topk=32, extra_topk=32, device="cpu")

    @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")
    def test_gpu_tp_ranks(self):
        for heads in (8, 16, 32):
            for batch in (1, 64):
                with self.subTest(heads=heads, batch=batch):
                    self._check(
                        heads=heads,
                        batch=batch,
                        topk=128,
                        extra_topk=512,
                        device="cuda",
                    )


if __name__ == "__main__":
    unittest.main()
