""".ci/test_tmp.py: CI's make test keeps pytest's temporary files in a RAM-backed folder named after the checkout
where the machine has room, else in the checkout's build/pytest-tmp, and make test takes the folder it is given."""
from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.project.test_make_test import make_free_env

SCRIPT = REPO / ".ci" / "test_tmp.py"


def _module():
    spec = importlib.util.spec_from_file_location("ci_test_tmp", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mounts(tmpfs: bool) -> list[Path]:
    fields = [l.split() for l in Path("/proc/mounts").read_text().splitlines()] if Path("/proc/mounts").is_file() else []
    return [Path(f[1]) for f in fields if len(f) >= 3 and (f[2] == "tmpfs") == tmpfs]


def test_a_tmpfs_mount_is_ram_backed_and_a_disk_folder_is_not(tmp_path):
    ci = _module()
    tmpfs, others = _mounts(tmpfs=True), _mounts(tmpfs=False)
    if not tmpfs or not others:
        pytest.skip("this machine mounts no tmpfs, or nothing else (/proc/mounts)")
    assert ci.ram_backed(tmpfs[0])
    # a mount point of another file system, and folders that are no mount point at all
    assert not ci.ram_backed(others[0]) and not ci.ram_backed(REPO) and not ci.ram_backed(tmp_path / "shm")


def test_without_room_it_is_the_checkouts_own_build_folder():
    ci = _module()
    assert ci.folder_for(REPO, 10**9) == "build/pytest-tmp"


def test_with_room_each_checkout_gets_its_own_ram_backed_folder(tmp_path):
    ci = _module()
    if not ci.ram_backed(ci.RAM_FS):
        pytest.skip(f"{ci.RAM_FS} is not a tmpfs here")
    mine, other = ci.folder_for(REPO, 0.001), ci.folder_for(tmp_path, 0.001)
    assert Path(mine).parent == ci.RAM_FS and Path(other).parent == ci.RAM_FS
    assert mine != other and mine == ci.folder_for(REPO, 0.001)


@pytest.mark.parametrize("args", [(), ("six",), ("1", "2")], ids=["none", "not-a-number", "two"])
def test_a_bad_argument_says_what_was_expected_in_one_line(args):
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "expected one number" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert proc.stdout == ""


def test_ci_gives_make_test_the_folder_and_make_test_uses_then_removes_it(tmp_path):
    lines = [l for l in (REPO / ".ci" / "run").read_text().splitlines() if l.startswith("make test ")]
    assert len(lines) == 1 and 'PYTEST_TMP="$(python3 .ci/test_tmp.py ' in lines[0], lines
    folder = tmp_path / "ram" / "pytest"
    proc = subprocess.run(["make", "-n", "test", f"PYTEST_TMP={folder}"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=make_free_env())
    commands = [shlex.split(l) for l in proc.stdout.splitlines() if l.strip()]
    run = next(i for i, c in enumerate(commands) if c[1:3] == ["-m", "pytest"])
    assert f"--basetemp={folder}" in commands[run] and commands[run + 1] == ["rm", "-rf", str(folder)], commands
