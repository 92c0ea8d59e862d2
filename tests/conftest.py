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
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

from patchkit.lockfile import load_lock  # noqa: E402
from patchkit.fetch import fetch  # noqa: E402
from patchkit.pristine import Pristine  # noqa: E402

# A test of one line lives in tests/line_NAME/, whose conftest.py sets its own PATCH_LINE. This one is the line of a
# test in tests/<concern>/ that reads a line's trees without naming one: the engine tests that use a real line's
# trees as data, the serving tests (written for the line whose runtime the GPU machine has), and the shared modules
# tests/line_NAME/ re-collects (test_export_pr.py, test_flashinfer_compile.py). Line-neutral tests ignore it.
PATCH_LINE = "0.5.14"
LOCK = load_lock(REPO / "pin.lock", PATCH_LINE)


def pristine_wheel(name: str, line: str = PATCH_LINE) -> Pristine:
    up = (LOCK if line == PATCH_LINE else load_lock(REPO / "pin.lock", line)).upstream(name)
    return Pristine(fetch(up, log=lambda *_: None))


def line_of(test_path: Path) -> str:
    """PATCH_LINE of the conftest.py nearest the test file (this one's unless a sub-package sets its own)."""
    conftests = {Path(getattr(m, "__file__", "") or "").resolve(): m for m in list(sys.modules.values())
                 if (getattr(m, "__file__", "") or "").endswith("conftest.py")}
    for d in Path(test_path).resolve().parents:
        if d == REPO:
            break
        mod = conftests.get(d / "conftest.py")
        if mod is None and (d / "conftest.py").is_file():     # not collected in this run: read it all the same
            import importlib.util

            spec = importlib.util.spec_from_file_location(f"_conftest_of_{d.name}", d / "conftest.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        if mod is not None and hasattr(mod, "PATCH_LINE"):
            return mod.PATCH_LINE
    return PATCH_LINE


_TREES: dict[tuple[str, str], Path] = {}


@pytest.fixture(autouse=True)
def _default_line(request, monkeypatch):
    """Code under test that picks the default line (Engine.from_repo, apply.py without --line) gets the test's
    line: PATCHKIT_LINE, as a user's shell would set it."""
    monkeypatch.setenv("PATCHKIT_LINE", line_of(Path(str(request.node.fspath))))


def _line_or_skip(request) -> str:
    from patchkit.lockfile import lock_lines

    line = line_of(request.path)
    if line not in lock_lines(REPO / "pin.lock"):
        pytest.skip(f"line {line} is not in pin.lock yet (lines: {', '.join(lock_lines(REPO / 'pin.lock'))})")
    return line


@pytest.fixture(scope="module")
def pristine_root(request, tmp_path_factory) -> Path:
    """A site-packages-like directory holding every upstream the test's line pins, unpatched (one per line)."""
    line = _line_or_skip(request)
    if ("pristine", line) not in _TREES:
        root = tmp_path_factory.mktemp(f"pristine-{line}")
        for name, up in load_lock(REPO / "pin.lock", line).upstreams.items():
            pristine_wheel(name, line).unpack(root, root=up.root)
        _TREES["pristine", line] = root
    return _TREES["pristine", line]


@pytest.fixture(scope="module")
def patched_root(request, pristine_root, tmp_path_factory) -> Path:
    """The same trees with the line's whole series and overlay applied by the engine."""
    from patchkit.engine import Engine

    line = _line_or_skip(request)
    if ("patched", line) not in _TREES:
        root = tmp_path_factory.mktemp(f"patched-{line}") / "site"
        shutil.copytree(pristine_root, root)
        Engine.from_repo(REPO, line=line).apply(root, log=lambda *_: None)
        _TREES["patched", line] = root
    return _TREES["patched", line]


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


@pytest.hookimpl(tryfirst=True)   # before xdist's worker reads the groups
def pytest_collection_modifyitems(config, items):
    if getattr(config.option, "loadgroup", False):   # an xdist worker under --dist loadgroup (make test)
        from tests.long_setups_first import group_long_setups

        group_long_setups(items)


@pytest.hookimpl(optionalhook=True)   # a hook of pytest-xdist, which the GPU machine need not have
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` (make test): the units and order of tests/long_setups_first.py."""
    if config.getvalue("dist") == "loadgroup":
        from tests.long_setups_first import LongSetupsFirst

        return LongSetupsFirst(config, log)
    return None
