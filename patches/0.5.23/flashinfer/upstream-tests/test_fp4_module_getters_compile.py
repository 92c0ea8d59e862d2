"""The FP4 JIT module getters stay out of torch.compile's tracing.

Dynamo ignores functools.cache and would trace a getter into JIT source generation, nvcc and file locks.
The getters are torch.compiler.disable'd under the cache: the check of that marker runs anywhere; with
CUDA, fp4_quantize inside a compiled (non-fullgraph) function must give eager's bytes.
"""

import pytest
import torch

import flashinfer
import flashinfer.quantization.fp4_quantization as fp4

GETTERS = [
    "get_fp4_quantization_module",
    "get_fp4_kv_quantization_module",
    "get_fp4_kv_dequantization_module",
]


@pytest.mark.parametrize("name", GETTERS)
def test_getter_is_cached_and_not_traced(name):
    getter = getattr(fp4, name)
    assert hasattr(getter, "cache_clear"), (
        "functools.cache must stay outermost: an eager hit costs nothing"
    )
    assert getattr(getter.__wrapped__, "_torchdynamo_disable", False), (
        "Dynamo must not trace the getter"
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fp4_quantize_in_a_compiled_function_matches_eager():
    torch.manual_seed(0)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    global_scale = (448.0 * 6.0) / x.abs().amax().float().reshape(1)

    def quantize(inp, scale):
        return flashinfer.fp4_quantize(inp, scale)

    torch._dynamo.reset()
    cq, cs = torch.compile(quantize, backend="eager")(x, global_scale)
    eq, es = quantize(x, global_scale)
    assert torch.equal(cq.view(torch.uint8), eq.view(torch.uint8))
    assert torch.equal(cs.view(torch.uint8), es.view(torch.uint8))
