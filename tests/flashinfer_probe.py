"""Probe FlashInfer under torch.compile, in a fresh process (run by the tests, not collected).

    python tests/flashinfer_probe.py SCENARIO [ARG]

Each scenario imports the real `flashinfer` found first on PYTHONPATH (a pristine or a patched
tree), so the pristine and the patched copy never meet in one interpreter and every run starts
with empty functools caches. The result is one JSON object on the last line of stdout.

Scenarios:
  version        torch.compile(fullgraph=True) of functions that ask is_cuda_version_at_least(),
                 compiled before and after the eager answer is known.
  no_toolkit     the eager and the compiled answer of get_cuda_version() (run it with no nvcc
                 reachable; the test controls PATH and CUDA_HOME).
  getter ARG     a compiled (non-fullgraph) function that calls get_fp4_quantization_module(ARG):
                 does the call come back, and did Dynamo try to compile the getter's frame?
  fp4_quantize   (GPU) flashinfer.fp4_quantize inside a compiled function against eager.
"""
from __future__ import annotations

import json
import sys
import traceback

import torch
from torch._dynamo.convert_frame import input_codes  # every frame Dynamo was handed


def _error(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "module": type(exc).__module__, "message": str(exc)[:2000]}


def _attempt(fn, *args) -> dict:
    try:
        return {"ok": True, "value": fn(*args)}
    except Exception as exc:  # the outcome is what we report
        return {"ok": False, "error": _error(exc), "traceback": traceback.format_exc()[-4000:]}


def _innermost(fn):
    """The user function under functools.cache / torch.compiler.disable wrappers."""
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _tensor_answer(y: torch.Tensor) -> bool:
    # The compiled functions below return x + 1 for "yes" and x - 1 for "no" (x = 0).
    return bool(y.item() > 0)


def version() -> dict:
    from flashinfer.jit.cpp_ext import is_cuda_version_at_least

    def at_least_12_8(x):
        return x + 1 if is_cuda_version_at_least("12.8") else x - 1

    def at_least_99_0(x):
        return x + 1 if is_cuda_version_at_least("99.0") else x - 1

    x = torch.zeros(())
    # Compiled first: the first question is asked while Dynamo traces, as at server start-up.
    first = _attempt(lambda: _tensor_answer(torch.compile(at_least_12_8, fullgraph=True, backend="eager")(x)))
    eager = [is_cuda_version_at_least("12.8"), is_cuda_version_at_least("99.0")]
    # A second compiled caller, after the eager answer is cached.
    second = _attempt(lambda: _tensor_answer(torch.compile(at_least_99_0, fullgraph=True, backend="eager")(x)))
    return {"compiled_first": first, "compiled_second": second, "eager": eager}


def no_toolkit() -> dict:
    from flashinfer.jit.cpp_ext import get_cuda_version, is_cuda_version_at_least

    def major_is_positive(x):
        # Through the check P6 makes a trace-time constant. (Comparing the Version object
        # itself inside the graph is not covered: torch 2.11's Dynamo rejects it.)
        return x + 1 if is_cuda_version_at_least("1.0") else x - 1

    eager = _attempt(lambda: str(get_cuda_version()))
    compiled = _attempt(lambda: _tensor_answer(
        torch.compile(major_is_positive, fullgraph=True, backend="eager")(torch.zeros(()))))
    return {"eager": eager, "compiled": compiled, "torch_cuda": torch.version.cuda}


def getter(backend: str) -> dict:
    import flashinfer.quantization.fp4_quantization as fp4

    get_module = fp4.get_fp4_quantization_module
    getter_code = _innermost(get_module).__code__

    def quantize_step(x):
        y = x * 2
        get_module(backend)
        return y + 1

    compiled = torch.compile(quantize_step, backend="eager")  # non-fullgraph: breaks are allowed
    outcome = _attempt(lambda: compiled(torch.zeros(4)).tolist())
    outcome["getter_frame_compiled_by_dynamo"] = getter_code in input_codes
    return outcome


def fp4_quantize() -> dict:
    import flashinfer
    import flashinfer.quantization.fp4_quantization as fp4

    getter_code = _innermost(fp4.get_fp4_quantization_module).__code__
    torch.manual_seed(0)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    global_scale = (448.0 * 6.0) / x.abs().amax().float().reshape(1)

    def quantize(inp, scale):
        return flashinfer.fp4_quantize(inp, scale)

    compiled = _attempt(lambda: [t.cpu() for t in torch.compile(quantize, backend="eager")(x, global_scale)])
    result = {"device": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability()),
              "torch": torch.__version__, "torch_cuda": torch.version.cuda,
              "getter_frame_compiled_by_dynamo": getter_code in input_codes,
              "compiled": {k: v for k, v in compiled.items() if k != "value"}}
    eager = _attempt(lambda: [t.cpu() for t in quantize(x, global_scale)])
    result["eager"] = {k: v for k, v in eager.items() if k != "value"}
    if compiled["ok"] and eager["ok"]:
        (cq, cs), (eq, es) = compiled["value"], eager["value"]
        result["shapes"] = [list(eq.shape), str(eq.dtype), list(es.shape), str(es.dtype)]
        result["equal"] = bool(torch.equal(cq.view(torch.uint8), eq.view(torch.uint8))
                               and torch.equal(cs.view(torch.uint8), es.view(torch.uint8)))
        result["nonzero_bytes"] = int((eq.view(torch.uint8) != 0).sum())
    return result


SCENARIOS = {"version": version, "no_toolkit": no_toolkit, "getter": getter, "fp4_quantize": fp4_quantize}

if __name__ == "__main__":
    out = SCENARIOS[sys.argv[1]](*sys.argv[2:])
    sys.stdout.flush()
    print("\n" + json.dumps(out, default=str))
