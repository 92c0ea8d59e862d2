"""The 0.5.14 line's files that go upstream are clean for v0.5.14's own formatter: black 24.10.0, the rev its
.pre-commit-config.yaml pins (the newer line formats with ruff format: lint/settings.toml). Checked: every
overlay .py file of the line (new files: the whole file is ours) and the files P1 and P7 change, as the series
leaves them. Needs black 24.10.0: BLACK=/path/to/black, else the lint venv's black if it is that version;
skipped (saying so) without one."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

BLACK_VERSION = "24.10.0"
PATCHED = ["sglang/srt/environ.py", "sglang/srt/layers/attention/flash_mla_sm120.py", "sglang/srt/models/deepseek_v4.py"]


def black_exe() -> str | None:
    for exe in (os.environ.get("BLACK"), str(REPO / ".venv-lint/bin/black"), shutil.which("black")):
        if exe and Path(exe).is_file():
            out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
            if out.split()[1:2] == [BLACK_VERSION] or f"black, {BLACK_VERSION}" in out:
                return exe
    return None


@pytest.fixture(scope="module")
def black() -> str:
    exe = black_exe()
    if exe is None:
        pytest.skip(f"black {BLACK_VERSION} not found (set BLACK=/path/to/black {BLACK_VERSION})")
    return exe


def test_overlay_files_are_black_clean(black):
    files = sorted(str(p) for p in (REPO / "overlay/0.5.14").rglob("*.py"))
    assert files
    proc = subprocess.run([black, "--check", "--diff", "-q", *files], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_files_the_series_changes_stay_black_clean(black, patched_root):
    proc = subprocess.run([black, "--check", "--diff", "-q", *[str(patched_root / p) for p in PATCHED]],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
