"""Shared fixtures: the real pinned upstream trees, pristine and patched.

Every test reads upstream code from the wheels pinned in pin.lock (fetched once into the
patchkit cache and verified by sha256), never from a hand-written imitation.
"""
from __future__ import annotations

import os



def _nvidia_gpu_present() -> bool:
    """An NVIDIA GPU the driver exposes (checked without importing torch/triton, which read the switch below)."""
    return os.path.exists("/dev/nvidia0") or os.path.isdir("/proc/driver/nvidia/gpus")


# CPU runs: Triton kernels run under the interpreter. Set before any test module (tests/gpu included) imports
# triton, so the interpreter choice never depends on collection order. Never on a GPU machine: there the GPU
# tests must run the compiled kernels, and servers started by tests inherit this environment.
if not _nvidia_gpu_present():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

from patchkit.lockfile import load_lock  # noqa: E402
from patchkit.fetch import fetch  # noqa: E402
from patchkit.pristine import Pristine  # noqa: E402

LOCK = load_lock(REPO / "pin.lock")


def pristine_wheel(name: str) -> Pristine:
    up = LOCK.upstream(name)
    return Pristine(fetch(up, log=lambda *_: None))


@pytest.fixture(scope="session")
def pristine_root(tmp_path_factory) -> Path:
    """A site-packages-like directory holding every pinned upstream, unpatched."""
    root = tmp_path_factory.mktemp("pristine")
    for name, up in LOCK.upstreams.items():
        pristine_wheel(name).unpack(root, root=up.root)
    return root


@pytest.fixture(scope="session")
def patched_root(pristine_root, tmp_path_factory) -> Path:
    """The same trees with the whole series and overlay applied by the engine."""
    from patchkit.engine import Engine

    root = tmp_path_factory.mktemp("patched") / "site"
    shutil.copytree(pristine_root, root)
    Engine.from_repo(REPO).apply(root, log=lambda *_: None)
    return root


@pytest.fixture
def poisoned_empty(monkeypatch):
    """torch.empty returns NaN-filled float tensors: an output element a kernel never writes shows up."""
    import torch

    real_empty = torch.empty

    def empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", empty)


@pytest.fixture
def demo(tmp_path):
    """A crafted upstream `demo` (tests/fault_fixtures.py): (repo, env) with pip pointed at an index serving 1.0 and 1.1."""
    from tests.fault_fixtures import RELEASES, demo_repo, file_index, make_wheel, pip_env

    wheels = [make_wheel(tmp_path / "wheels-index", v, files) for v, files in RELEASES.items()]
    repo, env = demo_repo(tmp_path)
    return repo, {**env, **pip_env(tmp_path / "pip", PIP_INDEX_URL=file_index(tmp_path / "index", wheels))}
