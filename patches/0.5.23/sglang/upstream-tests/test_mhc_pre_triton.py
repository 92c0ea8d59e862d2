"""DeepSeek-V4 MHC-pre mixes: the fused bf16 Triton op against a float64 reference.

mixes[t, n] = rsqrt(mean_k x[t, k]^2 + eps) * sum_k x[t, k] * hc_fn[n, k]. The bound per mix is
2^-8 * rsqrt * sum_k |x * w| (bf16 operands, fp32 accumulation), at the model's K = 4 * 4096. GPU only:
Triton's CPU interpreter does not round bf16 dot operands as the GPU does, so it cannot check this bound.
"""

import unittest

import torch

from sglang.kernels.ops.layernorm.mhc_pre_triton import mhc_pre_mixes_triton
from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=30, stage="base-b", runner_config="1-gpu-small")

EPS = 1e-6


def _check(test, tokens, k, device, route):
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, k, generator=gen).to(torch.bfloat16)
    w = torch.randn(24, k, generator=gen) * 0.02
    got = (
        mhc_pre_mixes_triton(x.to(device), w.to(device), EPS, route=route)
        .cpu()
        .double()
    )
    xd, wd = x.double(), w.double()
    rsqrt = torch.rsqrt(xd.square().mean(-1, keepdim=True) + EPS)
    want = (xd @ wd.T * rsqrt).unsqueeze(1)
    bound = 2.0**-8 * rsqrt * (xd.abs() @ wd.abs().T)
    test.assertEqual(got.shape, (tokens, 1, 24))
    test.assertTrue(bool(((got - want).abs().squeeze(1) <= bound).all()))


class TestMhcPreTriton(unittest.TestCase):
    @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")
    def test_gpu_model_shape(self):
        for tokens in (1, 16, 128, 1024):
            for route in ("one-launch", "graph"):
                with self.subTest(tokens=tokens, route=route):
                    _check(self, tokens=tokens, k=4 * 4096, device="cuda", route=route)


if __name__ == "__main__":
    unittest.main()
