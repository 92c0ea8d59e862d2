"""DeepSeek-V4 sm_120 indexer: the length-bounded FP8 paged MQA logits kernel against float64.

logits[b, t] = kv_scale[t] * sum_h weight[b, h] * relu(q[b, h] . k[t]) for t < seq_lens[b]. A page holds
64 tokens' 128 fp8-e4m3 values, then their 64 fp32 scales (8448 bytes). Without CUDA the kernel runs in
Triton's interpreter on a few pages (CPU part); with CUDA, on a page table as wide as under CUDA graphs.
"""

import os
import unittest

import torch

if not torch.cuda.is_available():
    # Triton reads this when a kernel is decorated: set before the kernel module is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from sglang.srt.layers.attention.dsv4.paged_mqa_logits_triton import (
    fp8_paged_mqa_logits_triton,
)
from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=30, stage="base-b", runner_config="1-gpu-small")

PAGE, DIM, HEADS = 64, 128, 64


def _case(batch, pages, width, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    keys = (
        (torch.randn(pages, PAGE, DIM, generator=gen) * 50)
        .clamp(-440, 440)
        .to(torch.float8_e4m3fn)
    )
    scales = torch.rand(pages, PAGE, generator=gen) + 0.5
    cache = torch.cat(
        [
            keys.view(torch.uint8).reshape(pages, -1),
            scales.view(torch.uint8).reshape(pages, -1),
        ],
        1,
    )
    cache = cache.view(torch.float8_e4m3fn).view(pages, PAGE, 1, DIM + 4)
    q = (torch.randn(batch, 1, HEADS, DIM, generator=gen) * 2).to(torch.float8_e4m3fn)
    weight = torch.randn(batch, HEADS, generator=gen)
    table = torch.stack(
        [torch.randperm(pages, generator=gen)[:width] for _ in range(batch)]
    ).to(torch.int32)
    lens = torch.randint(
        1, width * PAGE + 1, (batch,), generator=gen, dtype=torch.int32
    )
    lens[0] = width * PAGE  # one row as long as the table
    return [t.to(device) for t in (q, cache, weight, lens, table)], (keys, scales)


def _reference(q, weight, lens, table, keys, scales):
    b_rows = []
    for b in range(q.shape[0]):
        n = int(lens[b])
        k = keys[table[b].long()].reshape(-1, DIM)[:n].double()
        s = scales[table[b].long()].reshape(-1)[:n].double()
        qb, wb = q[b, 0].double(), weight[b].double()
        score = torch.relu(qb @ k.T)  # [H, n]
        magnitude = (
            wb.abs() @ (qb.abs() @ k.abs().T)
        ) * s  # what fp32 rounding scales with
        b_rows.append(((wb @ score) * s, magnitude))
    return b_rows


class TestPagedMqaLogitsTriton(unittest.TestCase):
    def _check(self, batch, pages, width, device):
        (q, cache, weight, lens, table), (keys, scales) = _case(
            batch, pages, width, device
        )
        logits = fp8_paged_mqa_logits_triton(
            q, cache, weight, lens, table, width * PAGE
        )
        self.assertEqual(logits.shape, (batch, width * PAGE))
        want = _reference(q.cpu(), weight.cpu(), lens.cpu(), table.cpu(), keys, scales)
        for b, (row, magnitude) in enumerate(want):
            got = logits[b, : row.numel()].cpu().double()
            # exact fp8 products (fp16 MMA operands), fp32 accumulation: 2^-16 of the magnitudes
            self.assertTrue(bool(((got - row).abs() <= 2.0**-16 * magnitude).all()))

    @unittest.skipIf(torch.cuda.is_available(), "the interpreter run is the CPU part")
    def test_cpu_interpreter_small(self):
        self._check(batch=2, pages=4, width=2, device="cpu")

    @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")
    def test_gpu_graph_width_table(self):
        for batch in (1, 16, 64):
            with self.subTest(batch=batch):
                self._check(batch=batch, pages=512, width=256, device="cuda")


if __name__ == "__main__":
    unittest.main()
