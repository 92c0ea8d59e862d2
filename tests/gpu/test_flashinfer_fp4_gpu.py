"""P5/P6 on a GPU: a real flashinfer.fp4_quantize inside a compiled function.

On the patched pinned flashinfer 0.6.12, with the machine's own nvcc: the compiled function
graph-breaks around the FP4 module getter, which runs eagerly and JIT-builds the module for
this GPU; the result must equal eager bit for bit. The red/green checks of the version check
and the getter live in tests/kernels/test_flashinfer_compile.py (run them here too: they need no GPU).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.kernels.test_flashinfer_compile import Tree, probe

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def real_cuda_home() -> Path:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH: FlashInfer cannot JIT-build the FP4 module")
    return Path(nvcc).resolve().parents[1]


def test_fp4_quantize_in_compiled_function_matches_eager(patched_root, tmp_path):
    out = probe(Tree(patched_root, True), "fp4_quantize", cuda_home=real_cuda_home(), workdir=tmp_path)
    print(out)                                     # device, versions and outcome, for the GPU record
    assert out["compiled"]["ok"], out["compiled"]
    assert out["eager"]["ok"], out["eager"]
    assert not out["getter_frame_compiled_by_dynamo"]   # the getter ran eagerly, behind one graph break
    assert out["equal"], "compiled fp4_quantize differs from eager"
    assert out["nonzero_bytes"] > 0                # random input: the packed FP4 output is not empty
