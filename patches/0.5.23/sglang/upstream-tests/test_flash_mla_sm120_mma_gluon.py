"""The Gluon decode kernel of the sm_120 mma backend (flash_mla_sm120_mma_gluon.py), through
flash_mla_with_kvcache_sm120.

pick_config takes the Gluon kernel for up to 16 heads from 16 rows, and only under the Triton releases of
GLUON_TRITON_RELEASES; every other shape and release keeps the Triton kernel of flash_mla_sm120_mma.py (the CPU
test). On a GPU, with SGLANG_SM120_FLASHMLA_BACKEND=mma set before flash_mla_sm120 reads it, the entry point
launches the Gluon kernel at those shapes and its output matches the module's PyTorch fallback over the same FP8
KV pages; with the Gluon kernel ruled out (a Triton release off the list) the same calls launch the Triton kernel
and match too.
"""

import math
import os
import unittest
from unittest import mock

import torch

# Read by flash_mla_sm120 when it is imported: set before that import.
os.environ["SGLANG_SM120_FLASHMLA_BACKEND"] = "mma"

from sglang.kernels.ops.attention import flash_mla_sm120
from sglang.kernels.ops.attention import flash_mla_sm120_mma as mma
from sglang.kernels.ops.attention import flash_mla_sm120_mma_gluon as gluon
from sglang.kernels.ops.attention.flash_mla_sm120 import (
    _sm120_sparse_decode_fwd,
    flash_mla_with_kvcache_sm120,
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


class _LaunchSpy:
    """Stands in for a kernel: records each launch grid and launches the kernel."""

    def __init__(self, kernel):
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]


class TestFlashMLASm120MMAGluon(unittest.TestCase):
    def test_pick_config_takes_gluon_for_few_heads_from_16_rows_on_its_releases(self):
        for release in gluon.GLUON_TRITON_RELEASES:
            version = release + ".0"
            with self.subTest(triton=version):
                self.assertTrue(gluon.gluon_builds(version))
                for heads, rows in ((8, 16), (16, 16), (8, 64), (16, 256)):
                    self.assertEqual(
                        gluon.pick_config(heads, rows, version), gluon.GLUON_CONFIG
                    )
                for heads, rows in ((16, 1), (8, 15), (32, 64), (64, 16)):
                    self.assertEqual(
                        gluon.pick_config(heads, rows, version),
                        mma.pick_triton_config(heads, rows, version),
                    )
        # a release whose Gluon API the kernel was not built against: the Triton kernel everywhere
        self.assertFalse(gluon.gluon_builds("3.5.0"))
        for heads, rows in ((8, 64), (16, 16)):
            self.assertIn(gluon.pick_config(heads, rows, "3.5.0"), mma.MMA_CONFIGS)

    def _check_against_fallback(self, heads, batch):
        args = _case(batch, heads, 128, 512, "cuda", seed=batch)
        out, lse = _entry_point(*args)
        ref_out, _ = _sm120_sparse_decode_fwd(*args)
        self.assertEqual(out.shape, ref_out.shape)
        self.assertEqual(out.dtype, torch.bfloat16)
        rel = (out.double() - ref_out.double()).norm() / ref_out.double().norm()
        # bf16 q, probabilities and output: about 2^-8 relative each
        self.assertLess(rel.item(), 1.2e-2)

    @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")
    def test_entry_point_launches_gluon_and_matches_the_fallback(self):
        self.assertEqual(flash_mla_sm120._sm120_default_backend, "mma")
        if not gluon.gluon_builds():
            self.skipTest("this Triton release takes the Triton kernel only")
        for heads in (8, 16):
            for batch in (16, 64):
                with self.subTest(heads=heads, batch=batch):
                    spy = _LaunchSpy(gluon._gluon_sparse_decode_kernel)
                    triton_spy = _LaunchSpy(mma._mma_sparse_decode_kernel)
                    with mock.patch.object(gluon, "_gluon_sparse_decode_kernel", spy):
                        with mock.patch.object(
                            mma, "_mma_sparse_decode_kernel", triton_spy
                        ):
                            self._check_against_fallback(heads, batch)
                    self.assertEqual(len(spy.grids), 1)
                    self.assertEqual(triton_spy.grids, [])

    @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")
    def test_without_gluon_the_same_calls_take_the_triton_kernel(self):
        for heads, batch in ((8, 64), (16, 16)):
            with self.subTest(heads=heads, batch=batch):
                spy = _LaunchSpy(gluon._gluon_sparse_decode_kernel)
                triton_spy = _LaunchSpy(mma._mma_sparse_decode_kernel)
                with mock.patch.object(gluon, "gluon_builds", return_value=False):
                    with mock.patch.object(gluon, "_gluon_sparse_decode_kernel", spy):
                        with mock.patch.object(
                            mma, "_mma_sparse_decode_kernel", triton_spy
                        ):
                            self._check_against_fallback(heads, batch)
                self.assertEqual(spy.grids, [])
                self.assertEqual(len(triton_spy.grids), 1)


if __name__ == "__main__":
    unittest.main()
