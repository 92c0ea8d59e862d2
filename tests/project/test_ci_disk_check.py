""".ci/disk_check.py: CI stops at once, in one line, when the disk cannot hold its venvs, and .ci/run asks it
before anything is installed."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = REPO / ".ci" / "disk_check.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO)


def test_enough_disk_passes_silently():
    proc = _run("0")
    assert proc.returncode == 0 and proc.stdout == proc.stderr == ""


def test_too_little_disk_is_one_line_naming_need_and_free():
    proc = _run("1000000000")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs about 1000000000 GiB free" in lines[0] and "found" in lines[0], proc.stderr


@pytest.mark.parametrize("args", [(), ("ten",), ("1", "2")], ids=["none", "not-a-number", "two"])
def test_a_bad_argument_says_what_was_expected_in_one_line(args):
    proc = _run(*args)
    assert proc.returncode == 2 and "expected one number" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_ci_checks_the_disk_before_it_installs_anything():
    lines = [l.strip() for l in (REPO / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    check = next(i for i, l in enumerate(lines) if l.startswith("python3 .ci/disk_check.py"))
    first_make = next(i for i, l in enumerate(lines) if l.startswith("make "))
    assert check < first_make
