"""The CUDA version check is traceable by torch.compile(fullgraph=True).

get_cuda_version() asks nvcc (or torch.version.cuda) once per process; Dynamo must not walk into that
subprocess. It runs wherever a CUDA version can be found (nvcc on PATH, or a CUDA build of torch).
"""

import pytest
import torch

from flashinfer.jit.cpp_ext import get_cuda_version, is_cuda_version_at_least


def _cuda_version_known() -> bool:
    try:
        get_cuda_version()
        return True
    except RuntimeError:
        return False


@pytest.mark.skipif(
    not _cuda_version_known(), reason="no nvcc on PATH and no CUDA build of torch"
)
@pytest.mark.parametrize("version", ["11.0", "12.8", "99.0"])
def test_version_check_under_fullgraph_compile(version):
    def branch(x):
        return x + 1 if is_cuda_version_at_least(version) else x - 1

    eager = branch(torch.zeros(3))
    torch._dynamo.reset()
    compiled = torch.compile(branch, fullgraph=True, backend="eager")
    assert torch.equal(compiled(torch.zeros(3)), eager)


@pytest.mark.skipif(
    not _cuda_version_known(), reason="no nvcc on PATH and no CUDA build of torch"
)
def test_cache_clear_still_resets_the_query():
    first = get_cuda_version()
    get_cuda_version.cache_clear()
    assert get_cuda_version() == first
