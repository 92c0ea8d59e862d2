"""Fixtures the GPU tests share."""
from __future__ import annotations

import pytest

from harness.upstream import load_module
from patchkit import PatchkitError
from patchkit.lines import installed_runtime, line_for_runtime
from tests.conftest import REPO, _nvidia_gpu_present

# The GPU tests run on the machine's own torch/triton: the line whose [runtime] they are. A GPU machine whose
# runtime no line pins stops here, in one line; without a GPU (the tests skip) the default line is kept.
try:
    PATCH_LINE = line_for_runtime(REPO / "pin.lock", *installed_runtime())
except PatchkitError as exc:
    if _nvidia_gpu_present():
        raise pytest.UsageError(f"tests/gpu: {exc}") from None
    from tests.conftest import PATCH_LINE


@pytest.fixture(scope="module")
def oracle(pristine_root):
    """The pinned release's own sm_120 sparse decode (flash_mla_sm120.py): what P1's kernels must match."""
    mod = load_module(pristine_root / "sglang/srt/layers/attention/flash_mla_sm120.py", "pinned_sm120_gpu")
    return mod._sm120_sparse_decode_fwd
