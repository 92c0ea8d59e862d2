"""export-pr onto a checkout whose release is older than the newest line's pin: upstream's main has moved on.

The checkout is a 0.5.14 wheel checkout (`apply.py wheel-checkout`: the release's files, one commit on branch
main tagged v0.5.14), exported onto with the 0.5.14 line while pin.lock's newest line pins a later sglang. A
patch the newest line retired (its retired.toml) is refused without --force, naming both releases and the
recorded reason; with --force it is exported, warned. A patch the newest line still carries is exported with a
warning that names the newest line. Before: P3, P4 and the P7 stack exported with `gh pr create --base main`
and no word of either.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.lockfile import load_lock, lock_lines
from patchkit.pr.export import default_branch
from patchkit.pr.retired import load_records
from tests.conftest import REPO
from tests.pr.test_export_pr import IDENTITY, cli, delete_branches, git, named
from tests.rebase_cases import repo_copy

OLD = "0.5.14"
NEWEST = lock_lines(REPO / "pin.lock")[-1]


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return repo_copy(tmp_path_factory.mktemp("old-release") / "repo")


@pytest.fixture(scope="module")
def main_0514(copy, tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("sglang-0514") / "sglang"
    proc = cli(copy, "wheel-checkout", "sglang", "--dir", str(repo), "--line", OLD)
    assert proc.returncode == 0, proc.stderr
    git(repo, "config", "user.name", IDENTITY[0])
    git(repo, "config", "user.email", IDENTITY[1])
    return repo


def labelled(copy: Path, label: str):
    return named(copy, "sglang", label, OLD)


def test_p3_on_a_0_5_14_main_is_refused_naming_both_releases_and_why(copy, main_0514):
    assert NEWEST != OLD
    newest_pin = load_lock(REPO / "pin.lock", NEWEST).upstream("sglang").version
    p3 = labelled(copy, "P3")
    (record,) = [r for r in load_records(REPO / "patches", "sglang") if r.line == NEWEST and r.label == "P3"]
    proc = cli(copy, "export-pr", "P3", "--repo", str(main_0514), "--line", OLD)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert p3.name in line and "0.5.14" in line and newest_pin in line and record.reason in line, line
    assert "pass --force" in line, line
    assert git(main_0514, "branch", "--list", "pr/*") == ""
    proc = cli(copy, "export-pr", "P3", "--repo", str(main_0514), "--line", OLD, "--force")
    try:
        assert proc.returncode == 0, proc.stderr
        assert "warning" in proc.stderr and newest_pin in proc.stderr and "0.5.14" in proc.stderr, proc.stderr
    finally:
        delete_branches(main_0514, default_branch(p3))


@pytest.mark.parametrize("label,extra", [("P4", []), ("P7", ["--series"])])
def test_what_the_newest_line_replaced_is_refused_on_an_old_main(copy, main_0514, label, extra):
    proc = cli(copy, "export-pr", label, "--repo", str(main_0514), "--line", OLD, *extra)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert f"line {NEWEST}" in line and "pass --force" in line, line
    assert git(main_0514, "branch", "--list", "pr/*") == ""


def test_what_the_newest_line_still_carries_exports_with_a_warning(copy, main_0514):
    p1 = labelled(copy, "P1")
    proc = cli(copy, "export-pr", "P1", "--repo", str(main_0514), "--line", OLD)
    try:
        assert proc.returncode == 0, proc.stderr
        warning = [l for l in proc.stderr.splitlines() if "warning" in l]
        assert warning and "0.5.14" in warning[0] and f"line {NEWEST}" in warning[0], proc.stderr
    finally:
        delete_branches(main_0514, default_branch(p1))
