"""The FP4 JIT module getters stay out of torch.compile's tracing.

Dynamo ignores functools.cache and would trace a getter into JIT source generation, nvcc and file locks.
A compiled (non-fullgraph) caller must run the getter eagerly, once, and Dynamo must never enter it. That
part runs without a GPU: the module generator is replaced by one that counts its calls through an
assume_constant_result function (Dynamo runs such a function for real while it traces, so every trace into
the getter adds a call) and then stops. With CUDA, fp4_quantize inside a compiled function must give
eager's bytes.
"""

import importlib

import pytest
import torch

import flashinfer
import flashinfer.quantization.fp4_quantization as fp4

# getter, its arguments, and the JIT spec generator it calls first (module, name)
GETTERS = [
    (
        "get_fp4_quantization_module",
        ("90",),
        (
            "flashinfer.quantization.fp4_quantization",
            "gen_fp4_quantization_sm90_module",
        ),
    ),
    (
        "get_fp4_kv_quantization_module",
        (),
        ("flashinfer.jit.fp4_kv_quantization", "gen_fp4_kv_quantization_module"),
    ),
    (
        "get_fp4_kv_dequantization_module",
        (),
        ("flashinfer.jit.fp4_kv_dequantization", "gen_fp4_kv_dequantization_module"),
    ),
]


class _Stop(Exception):
    pass


@pytest.mark.parametrize("name,args,generator", GETTERS, ids=[g[0] for g in GETTERS])
def test_getter_runs_eagerly_in_a_compiled_caller(monkeypatch, name, args, generator):
    calls = []

    @torch.compiler.assume_constant_result
    def count_call() -> bool:
        calls.append(1)
        return True

    def fake_generator(*_args, **_kwargs):
        if count_call():
            raise _Stop

    monkeypatch.setattr(
        importlib.import_module(generator[0]), generator[1], fake_generator
    )
    getter = getattr(fp4, name)
    getter.cache_clear()

    def caller(x):
        getter(*args)
        return x + 1

    torch._dynamo.reset()
    try:
        with pytest.raises(_Stop):
            torch.compile(caller, backend="eager")(torch.zeros(2))
    finally:
        getter.cache_clear()
        torch._dynamo.reset()
    assert len(calls) == 1, (
        f"the getter reached its generator {len(calls)} times: Dynamo traced into it"
    )


@pytest.mark.parametrize("name", [g[0] for g in GETTERS])
def test_getter_stays_cached(name):
    assert hasattr(getattr(fp4, name), "cache_clear"), (
        "functools.cache must stay outermost: an eager hit costs nothing"
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
