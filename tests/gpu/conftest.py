"""Fixtures the GPU tests share."""
from __future__ import annotations

import pytest

from harness.upstream import load_module


@pytest.fixture(scope="module")
def oracle(pristine_root):
    """The pinned release's own sm_120 sparse decode (flash_mla_sm120.py): what P1's kernels must match."""
    mod = load_module(pristine_root / "sglang/srt/layers/attention/flash_mla_sm120.py", "pinned_sm120_gpu")
    return mod._sm120_sparse_decode_fwd
