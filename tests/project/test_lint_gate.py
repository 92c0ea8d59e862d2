"""The lint gate of `make check` (lint/gate.py): green on the shipped overlay files and patches, red on a copy
with a mis-formatted line or a misspelling, in an overlay file or in a line a patch adds, and silent on
upstream's own lines. Needs the lint venv (`make check` creates .venv-lint; .ci/run runs make check).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lint.gate import TOOL_EXE, load_settings
from tests.conftest import REPO

TOOLS = REPO / ".venv-lint" / "bin"
needs_tools = pytest.mark.skipif(
    not all((TOOLS / exe).is_file() for exe in set(TOOL_EXE.values())),
    reason="no lint venv (.venv-lint/bin: isort, ruff, codespell); `make check` creates it",
)
MMA = "sglang/srt/layers/attention/flash_mla_sm120_mma.py"
INDEXER_PATCH = "0004-dsv4-indexer-score-only-each-row-s-real-length-on-sm.patch"


def gate(repo: Path, *extra: str) -> subprocess.CompletedProcess:
    """The gate as `make check` runs it, from the checkout's lint package, in the repository it lints."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "lint.gate", "--tools", str(TOOLS), "--repo", str(repo), *extra],
                          cwd=repo, env=env, capture_output=True, text=True)


def copy_of_the_set(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy2(REPO / "pin.lock", repo / "pin.lock")
    for d in ("patches", "overlay"):
        shutil.copytree(REPO / d, repo / d)
    return repo


def test_requirements_pin_the_versions_settings_name():
    pinned = dict(re.findall(r"^([a-z]+)==(\S+)$", (REPO / "requirements-lint.txt").read_text(), re.M))
    assert pinned == load_settings()["tools"]


@needs_tools
def test_shipped_files_pass():
    proc = gate(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lint: 0 finding(s)" in proc.stdout


@needs_tools
def test_misformatted_line_and_misspelling_in_an_overlay_file_fail(tmp_path):
    repo = copy_of_the_set(tmp_path)
    kernel = repo / "overlay" / "0.5.14" / MMA
    lines = kernel.read_text().splitlines(keepends=True)
    lines.append("_SHAPES = [1,2 ,3]\n")
    lines.append("# the combine kernel will recieve every split\n")
    kernel.write_text("".join(lines))
    proc = gate(repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    n = len(lines)
    assert f"{MMA}:{n - 1}: ruff-format would change lines {n - 1}-{n - 1}" in proc.stdout
    assert f"{MMA}:{n}: codespell: recieve ==> receive" in proc.stdout


@needs_tools
def test_misspelling_in_a_line_a_patch_adds_fails(tmp_path):
    repo = copy_of_the_set(tmp_path)
    patch = repo / "patches" / "0.5.14" / "sglang" / INDEXER_PATCH
    text = patch.read_text()
    added = "+    # SGLANG_SM120_INDEXER_TRITON=0 restores the upstream torch fallback.\n"
    assert text.count(added) == 1
    patch.write_text(text.replace(added, added.replace("restores", "seperately restores")))
    proc = gate(repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"^sglang/srt/layers/attention/dsv4/indexer\.py:\d+: codespell: seperately ==> separately$",
                     proc.stdout, re.M), proc.stdout


@needs_tools
def test_a_pr_test_file_under_patches_is_linted_and_fix_formats_the_whole_files(tmp_path):
    repo = copy_of_the_set(tmp_path)
    demo = repo / "patches" / "0.5.14" / "sglang" / "upstream-tests" / "test_demo.py"
    demo.parent.mkdir(exist_ok=True)
    demo.write_text("SHAPES = [1,2 ,3]\n")
    kernel = repo / "overlay" / "0.5.14" / MMA
    kernel.write_text(kernel.read_text() + "_SHAPES = [1,2 ,3]\n")
    proc = gate(repo)
    assert proc.returncode == 1 and "patches/0.5.14/sglang/upstream-tests/test_demo.py:1: ruff-format" in proc.stdout, proc.stdout
    untouched = {f: f.read_bytes() for f in (repo / "patches" / "0.5.14" / "flashinfer").rglob("*") if f.is_file()}
    stray = repo / "stray.py"     # in the working directory, in no series: --fix must leave it alone
    stray.write_text("y = [1,2 ,3]\n")
    proc = gate(repo, "--fix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"formatted overlay/0.5.14/{MMA}" in proc.stdout and "formatted patches/0.5.14/sglang/upstream-tests/test_demo.py" in proc.stdout
    assert demo.read_text() == "SHAPES = [1, 2, 3]\n" and kernel.read_text().endswith("\n_SHAPES = [1, 2, 3]\n")
    assert stray.read_text() == "y = [1,2 ,3]\n" and all(f.read_bytes() == b for f, b in untouched.items())


def test_missing_tools_are_a_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lint.gate", "--tools", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: expected ") and proc.stdout == ""
