"""What `make test` runs, besides the suite.

pytest's temporary files stay bounded: a `make test` used to leave about 13 GB in about 540,000 files in the
system's temporary directory (issue 54), and pytest kept the last three runs, so a small temporary disk filled
after a few. Now a passed test's tmp_path goes as soon as it passes, `make test` keeps the run's files inside the
checkout's build/ (replaced by the next run, as pytest does with --basetemp) and removes them after a green run.
And it builds the lint venv, so the lint gate's tests run as they do in CI (docs/testing.md)."""
from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from tests.conftest import REPO


def test_a_passed_tests_temporary_directory_is_removed_and_failed_ones_are_kept_for_one_run_only(request):
    # the values pytest itself read from the checkout's pytest.ini for this very session
    assert request.config.getini("tmp_path_retention_policy") == "failed"
    assert int(request.config.getini("tmp_path_retention_count")) <= 1


def make_free_env() -> dict:
    """This environment less what a `make` that runs the suite passes down (its command-line variables travel in
    MAKEFLAGS: CI's `make test PYTEST_TMP=...` would otherwise reach the `make -n` below)."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL")}


def _make_n(*args: str) -> list[list[str]]:
    """The commands `make -n test ARGS` would run (nothing is run), each split as the shell would."""
    proc = subprocess.run(["make", "-n", "test", *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=make_free_env())
    assert proc.returncode == 0, proc.stderr
    return [shlex.split(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("args", [(), ("LINE=0.5.23",)], ids=["all", "one-line"])
def test_make_test_keeps_the_runs_temporary_files_in_build_and_removes_them_after_a_green_run(args):
    commands = _make_n(*args)
    runs = [i for i, c in enumerate(commands) if c[1:3] == ["-m", "pytest"]]
    assert len(runs) == 1, commands
    pytest_run = commands[runs[0]]
    given = [a.split("=", 1)[1] for a in pytest_run if a.startswith("--basetemp=")]
    assert len(given) == 1 and given[0].startswith("build/") and ".." not in given[0], pytest_run
    # the next command (make stops before it when pytest fails, so a red run's files stay to be read)
    assert commands[runs[0] + 1:runs[0] + 2] == [["rm", "-rf", given[0]]], commands


def test_make_test_builds_the_lint_venv_so_the_lint_gate_tests_run_as_in_ci(tmp_path):
    """tests/project/test_lint_gate.py skips without .venv-lint; `make test` alone never made it, so those tests
    skipped on a fresh clone while CI (which runs make check first) ran them."""
    lint_venv = tmp_path / "lint-venv"                  # absent: make would build it first
    commands = _make_n(f"LINT_VENV={lint_venv}")
    made = [i for i, c in enumerate(commands) if c[-3:] == ["-m", "venv", str(lint_venv)]]
    run = next(i for i, c in enumerate(commands) if c[1:3] == ["-m", "pytest"])
    assert made and made[0] < run, commands
    assert any("requirements-lint.txt" in c for c in commands[made[0]:run]), commands
