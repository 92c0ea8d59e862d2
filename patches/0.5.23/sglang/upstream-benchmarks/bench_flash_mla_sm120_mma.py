"""Benchmark DeepSeek-V4's sm_120 sparse-MLA decode: the ``mma`` backend against ``flashinfer``.

Both go through ``flash_mla_with_kvcache_sm120`` with the module's backend set per line, so each line times
what a server with ``SGLANG_SM120_FLASHMLA_BACKEND`` set to it runs (``flashinfer`` switches to its paged
prefill kernel above ``SM120_DECODE_MAX_TOKENS`` rows; ``mma`` does not).

Shape axes:
  - ``heads``: query heads per rank (8: TP=8, 16: TP=4, 32: TP=2, 64: TP=1).
  - ``rows``: query rows (decode tokens) per call.
  - ``kv``: ``win128+ex512`` = 128 sliding-window tokens plus 512 compressed tokens from a second cache;
    ``topk2048`` = 2048 top-k tokens from one cache.

KV layout: DeepSeek-V4's FP8 pool, 256-token pages of 584 bytes per token (448 fp8-e4m3 values, 64 bf16
rope values, 7 UE8M0 scale bytes). Each pool holds exactly the tokens one call reads (every row its own
tokens), and ``do_bench`` clones the pools (``graph_clone_kwargs``): consecutive calls of the captured
graph read different copies, and no copy is read again before L2 is flushed or overrun, so each call's KV
comes from memory, as a decode step's does.

Run: ``python3 test/registered/kernels/benchmark/attention/bench_flash_mla_sm120_mma.py``
"""

import math

import torch

from sglang.kernels.jit.benchmark import marker
from sglang.kernels.jit.benchmark.utils import DEFAULT_DEVICE
from sglang.kernels.ops.attention import flash_mla_sm120
from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(
    est_time=60, stage="base-b-kernel-benchmark", runner_config="1-gpu-large"
)

HEAD_DIM = 512
PAGE = 256
SHAPES = [
    (8, 1, "win128+ex512"),
    (8, 64, "win128+ex512"),
    (16, 16, "win128+ex512"),
    (32, 32, "win128+ex512"),
    (64, 1, "win128+ex512"),
    (64, 64, "win128+ex512"),
    (64, 128, "win128+ex512"),
    (8, 64, "topk2048"),
]


def _pool(tokens: int) -> torch.Tensor:
    pages = tokens // PAGE
    page_bytes = math.ceil(PAGE * 584 / 576) * 576
    raw = torch.randint(
        0, 256, (pages, page_bytes), dtype=torch.uint8, device=DEFAULT_DEVICE
    )
    body = raw[:, : PAGE * 576].view(pages, PAGE, 576)
    # finite fp8 values (no 0x7f / 0xff NaN bytes), bf16 rope, scale exponents near 2^-8
    body[..., :448] &= 0xF7
    body[..., 448:].view(torch.bfloat16).copy_(
        torch.randn(pages, PAGE, 64, device=DEFAULT_DEVICE, dtype=torch.bfloat16)
    )
    raw[:, PAGE * 576 : PAGE * 584] = 119
    return raw.view(torch.float8_e4m3fn)[:, : PAGE * 584].view(pages, PAGE, 1, 584)


def _read_once(rows: int, count: int):
    """A pool of the rows x count tokens one call reads and indices that read each token once."""
    tokens = math.ceil(rows * count / PAGE) * PAGE
    order = torch.randperm(tokens, device=DEFAULT_DEVICE)[: rows * count]
    return _pool(tokens), order.to(torch.int32).view(rows, 1, count)


@marker.parametrize("heads,rows,kv", SHAPES)
@marker.benchmark("backend", ["mma", "flashinfer"])
def benchmark(heads: int, rows: int, kv: str, backend: str):
    torch.manual_seed(0)
    flash_mla_sm120._sm120_default_backend = backend
    q = torch.randn(
        rows, 1, heads, HEAD_DIM, dtype=torch.bfloat16, device=DEFAULT_DEVICE
    )
    sink = torch.randn(heads, dtype=torch.float32, device=DEFAULT_DEVICE)
    full = lambda n: torch.full((rows,), n, dtype=torch.int32, device=DEFAULT_DEVICE)  # noqa: E731
    kwargs = dict(
        q=q, attn_sink=sink, head_dim_v=HEAD_DIM, softmax_scale=HEAD_DIM**-0.5
    )
    if kv == "topk2048":
        cache, indices = _read_once(rows, 2048)
        kwargs.update(k_cache=cache, indices=indices, topk_length=full(2048))
        pools = ["k_cache"]
    else:
        cache, indices = _read_once(rows, 128)
        extra_cache, extra_indices = _read_once(rows, 512)
        kwargs.update(
            k_cache=cache,
            indices=indices,
            topk_length=full(128),
            extra_k_cache=extra_cache,
            extra_indices_in_kvcache=extra_indices,
            extra_topk_length=full(512),
        )
        pools = ["k_cache", "extra_k_cache"]
    return marker.do_bench(
        flash_mla_sm120.flash_mla_with_kvcache_sm120,
        input_kwargs=kwargs,
        # rotate copies of the KV pools across the captured calls: every read is cold
        graph_clone_kwargs=pools,
        memory_args=None,
        memory_output=None,
    )


if __name__ == "__main__":
    benchmark.run()
