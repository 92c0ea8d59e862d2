"""Issue 28, class 4: nothing in the data is dropped without a word.

A pin.lock `root` that matches nothing in its wheel applied nothing of that series and said `applied`; a
new file whose name has a space passed `check` and `apply` and was never created; a mode change with
content lost the executable bit. Now each is applied, or refused (one line, nothing written).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import PACKAGE, cli, data_snapshot, demo_repo, demo_target, one_line_error

TRAILERS = "Upstream-Status: Pending\nEvidence: none\nTest: tests/faults/test_faults_drops.py"


def _commit(wt, message: str) -> None:
    from patchkit.gitcmd import git

    git(wt, "add", "-A")
    git(wt, "commit", "-qm", f"{message}\n\nwhy\n\n{TRAILERS}\n")


@pytest.mark.parametrize("root", ["dmeo", "demo\u200b"])   # a typo, a zero-width space
def test_class4_pin_lock_root_that_matches_nothing_in_its_wheel_is_an_error(tmp_path, root):
    """A second series whose table's root is misspelt: its patch was skipped and apply said `applied`, rc 0."""
    import shutil

    repo, env = demo_repo(tmp_path / "r")
    lock = repo / "pin.lock"
    text = lock.read_text()
    lock.write_text(text + "\n" + text.replace('[line."1.0".upstream.demo]', '[line."1.0".upstream.second]')
                    .replace('root = "demo"', f'root = "{root}"'))
    (repo / "patches" / "1.0" / "second").mkdir()
    patch = sorted((repo / "patches" / "1.0" / PACKAGE).glob("0002-*.patch"))[0]
    shutil.move(patch, repo / "patches" / "1.0" / "second" / patch.name)
    (repo / "patches" / "1.0" / "second" / "series").write_text(patch.name + "\n")
    series = repo / "patches" / "1.0" / PACKAGE / "series"
    series.write_text(series.read_text().replace(patch.name + "\n", ""))
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    for args in (["apply", "--target", str(site)], ["status", "--target", str(site)], ["apply"], ["check"]):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc) and '[line."1.0".upstream.second] root' in proc.stderr and "found no file under" in proc.stderr, (
            args, proc.stdout, proc.stderr)
    assert snapshot(site) == before
    assert not (repo / "build" / "site-1.0").exists() or not any((repo / "build" / "site-1.0").iterdir())


@pytest.mark.parametrize("name", ["new file.py", "caf\u00e9.py", 'quote".py'])
def test_class4_new_file_with_any_legal_name_is_created_and_removed(tmp_path, name):
    """Names with a space (or non-ASCII, or a quote: git quotes those) were never created."""
    repo, env = demo_repo(tmp_path / "r")
    assert cli(repo, "worktree", PACKAGE, env=env).returncode == 0
    wt = repo / "build" / "work" / "1.0" / PACKAGE
    (wt / PACKAGE / name).write_text("X = 1\n")
    _commit(wt, "demo: a new file")
    assert cli(repo, "export", PACKAGE, env=env).returncode == 0
    proc = cli(repo, "check", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = demo_target(tmp_path / "t")
    pristine = snapshot(site)
    proc = cli(repo, "apply", "--target", str(site), env=env)
    assert proc.returncode == 0, proc.stderr
    assert (site / PACKAGE / name).read_text() == "X = 1\n"
    status = cli(repo, "status", "--target", str(site), env=env)
    assert status.returncode == 0 and status.stdout.rstrip().endswith(": applied"), status.stdout
    assert cli(repo, "revert", "--target", str(site), env=env).returncode == 0
    assert snapshot(site) == pristine


def test_class4_name_with_a_newline_is_refused_by_export_and_check(tmp_path):
    from patchkit.gitcmd import git
    from patchkit.worktree import FORMAT_PATCH_ARGS

    repo, env = demo_repo(tmp_path / "r")
    assert cli(repo, "worktree", PACKAGE, env=env).returncode == 0
    wt = repo / "build" / "work" / "1.0" / PACKAGE
    (wt / PACKAGE / "two\nlines.py").write_text("X = 1\n")
    _commit(wt, "demo: a newline")
    before = data_snapshot(repo)
    proc = cli(repo, "export", PACKAGE, env=env)
    assert one_line_error(proc) and "without control characters" in proc.stderr and "two\\nlines.py" in proc.stderr, proc.stderr
    assert data_snapshot(repo) == before
    out = git(wt, *FORMAT_PATCH_ARGS, "-o", str(tmp_path / "out"), "HEAD~1..HEAD").stdout.split()
    (repo / "patches" / "1.0" / PACKAGE / "0003-nl.patch").write_bytes(Path(out[0]).read_bytes())
    with open(repo / "patches" / "1.0" / PACKAGE / "series", "a") as fh:
        fh.write("0003-nl.patch\n")
    proc = cli(repo, "check", env=env)
    assert one_line_error(proc) and "control characters" in proc.stderr, proc.stderr


@pytest.mark.parametrize("what", ["mode change with content", "new executable file"])
def test_class4_modes_are_refused_never_dropped(tmp_path, what):
    repo, env = demo_repo(tmp_path / "r")
    assert cli(repo, "worktree", PACKAGE, env=env).returncode == 0
    wt = repo / "build" / "work" / "1.0" / PACKAGE
    if what == "mode change with content":
        f = wt / PACKAGE / "util.py"
        f.write_text(f.read_text() + "U99 = 99\n")
    else:
        f = wt / PACKAGE / "run.py"
        f.write_text("print(1)\n")
    os.chmod(f, 0o755)
    _commit(wt, "demo: executable")
    before = data_snapshot(repo)
    proc = cli(repo, "export", PACKAGE, env=env)
    assert one_line_error(proc) and f.name in proc.stderr and ("expected no mode change" in proc.stderr
                                                              or "expected a new file of mode 100644" in proc.stderr), proc.stderr
    assert data_snapshot(repo) == before
