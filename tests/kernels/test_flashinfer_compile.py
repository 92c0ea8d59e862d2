"""P5/P6: FlashInfer's CUDA-version check and FP4 module getter under torch.compile.

Red/green against the real pinned flashinfer 0.6.12 sources: every check runs on the pristine
tree (where Dynamo walks into `nvcc` and fails) and on the patched tree. Each run is a fresh
process (tests/flashinfer_probe.py) so the two trees never share an interpreter or a cache.

The only test double is the external tool: a fake `nvcc` that logs each call and prints what
CUDA 12.9's nvcc prints for `--version`, so spawns can be counted and no CUDA install is needed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[1] / "flashinfer_probe.py"

FAKE_NVCC = """#!/bin/sh
echo "$*" >> "{log}"
cat <<'EOF'
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Tue_May_27_02:21:03_PDT_2025
Cuda compilation tools, release 12.9, V12.9.86
Build cuda_12.9.r12.9/compiler.36037853_0
EOF
"""


@dataclass
class Tree:
    root: Path
    patched: bool


@pytest.fixture(params=["pristine", "patched"])
def tree(request) -> Tree:
    return Tree(request.getfixturevalue(f"{request.param}_root"), request.param == "patched")


@pytest.fixture
def toolkit(tmp_path) -> Path:
    """A CUDA_HOME whose bin/nvcc is the logging fake."""
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(log=tmp_path / "nvcc.log"))
    nvcc.chmod(0o755)
    return home


def nvcc_spawns(toolkit: Path) -> int:
    log = toolkit.parent / "nvcc.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def probe(tree: Tree, scenario: str, *args: str, cuda_home: Path, workdir: Path, extra_env=None) -> dict:
    env = dict(os.environ)
    env.pop("CUDA_PATH", None)
    env.update(
        PYTHONPATH=os.pathsep.join([str(tree.root)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        CUDA_HOME=str(cuda_home),                   # get_cuda_path() prefers it over `which nvcc`
        FLASHINFER_WORKSPACE_BASE=str(workdir),     # JIT cache and locks stay in the test's tmp dir
        TORCHINDUCTOR_CACHE_DIR=str(workdir / "inductor"),
        **(extra_env or {}),
    )
    proc = subprocess.run([sys.executable, str(PROBE), scenario, *args], env=env, cwd=workdir,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"probe {scenario} crashed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def is_dynamo_refusal(outcome: dict) -> bool:
    err = outcome.get("error") or {}
    return (not outcome["ok"] and err["module"].startswith("torch._dynamo")
            and err["type"] == "Unsupported")


def test_cuda_version_check_compiles_with_fullgraph(tree, toolkit, tmp_path):
    out = probe(tree, "version", cuda_home=toolkit, workdir=tmp_path)
    assert out["eager"] == [True, False]            # fake nvcc reports 12.9
    if not tree.patched:
        # Red: Dynamo traces through functools.cache into the nvcc subprocess.
        first = out["compiled_first"]
        assert is_dynamo_refusal(first), first
        assert "Attempted to call function marked as skipped" in first["error"]["message"]
        assert is_dynamo_refusal(out["compiled_second"]), "a warm cache does not help: Dynamo ignores it"
        return
    assert out["compiled_first"] == {"ok": True, "value": True}, out["compiled_first"]
    assert out["compiled_second"] == {"ok": True, "value": False}, out["compiled_second"]
    assert nvcc_spawns(toolkit) == 1                # asked once, for tracing and eager calls alike


def test_fallbacks_without_nvcc_are_unchanged(pristine_root, patched_root, tmp_path):
    """No nvcc -> torch.version.cuda; neither -> the same RuntimeError as before."""
    no_nvcc = tmp_path / "no-cuda"                  # a CUDA_HOME without bin/nvcc
    no_nvcc.mkdir()
    before = probe(Tree(pristine_root, False), "no_toolkit", cuda_home=no_nvcc, workdir=tmp_path)
    after = probe(Tree(patched_root, True), "no_toolkit", cuda_home=no_nvcc, workdir=tmp_path)
    same = lambda r: {k: v for k, v in r.items() if k != "traceback"}  # paths differ, not outcomes
    assert same(after["eager"]) == same(before["eager"])
    if after["torch_cuda"] is None:                 # CPU torch: nothing to fall back to
        assert not after["eager"]["ok"]
        assert after["eager"]["error"]["type"] == "RuntimeError"
        assert "nvcc not found and PyTorch is not built with CUDA support" in after["eager"]["error"]["message"]
        # Compiled, the same RuntimeError surfaces (raised while Dynamo evaluates the constant).
        assert not after["compiled"]["ok"]
        assert "nvcc not found and PyTorch is not built with CUDA support" in after["compiled"]["traceback"]
    else:
        assert after["eager"] == {"ok": True, "value": after["torch_cuda"]}
        assert after["compiled"] == {"ok": True, "value": True}


def test_compiled_caller_runs_fp4_getter_eagerly(tree, toolkit, tmp_path):
    """A compiled (non-fullgraph) function reaching get_fp4_quantization_module.

    No CUDA toolchain exists here, so FLASHINFER_DISABLE_JIT=1 (upstream's switch for "never
    build") makes the getter stop at its build step with MissingJITCacheError: reaching that
    error proves the getter ran to the end of its Python path. What differs between the trees
    is who ran it: Dynamo (pristine: it is handed the getter's frame and breaks inside it) or
    plain Python behind one graph break (patched: torch.compiler.disable).
    """
    out = probe(tree, "getter", "100", cuda_home=toolkit, workdir=tmp_path,
                extra_env={"FLASHINFER_DISABLE_JIT": "1", "FLASHINFER_CUDA_ARCH_LIST": "10.0"})
    assert not out["ok"] and out["error"]["type"] == "MissingJITCacheError", out
    assert "FLASHINFER_DISABLE_JIT" in out["error"]["message"]
    if not tree.patched:
        assert out["getter_frame_compiled_by_dynamo"], "expected Dynamo to trace into the pristine getter"
        return
    assert not out["getter_frame_compiled_by_dynamo"]
    assert nvcc_spawns(toolkit) == 1                # the getter's version checks, asked once
