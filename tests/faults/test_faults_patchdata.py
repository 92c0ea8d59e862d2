"""Issue 28, class 3: symlinks (and other non-regular entries) in the patch data.

A patch that creates a symlink (mode 120000, made with `worktree` + `export`), or an overlay file committed
as a symlink, passed `check`, and `apply` copied the bytes of whatever the link pointed at into the target;
a symlinked `overlay/` was used as is. Now `export` refuses such a commit before writing, and `check`,
`status` and `apply` refuse such data, each with one line naming the entry.
"""
from __future__ import annotations

import os
import shutil

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import EXTRA, PACKAGE, cli, data_snapshot, demo_repo, demo_target, one_line_error

TRAILERS = "Upstream-Status: Pending\nEvidence: none\nTest: tests/faults/test_faults_patchdata.py"
SECRET = "a private file outside the repository\n"


def _commit(wt, message: str) -> None:
    from patchkit.gitcmd import git

    git(wt, "add", "-A")
    git(wt, "commit", "-qm", f"{message}\n\nwhy\n\n{TRAILERS}\n")


def _commands(site):
    return (["check"], ["status", "--target", str(site)], ["apply", "--target", str(site)])


def test_class3_export_refuses_a_commit_that_creates_a_symlink(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    assert cli(repo, "worktree", PACKAGE, env=env).returncode == 0
    wt = repo / "build" / "work" / "1.0" / PACKAGE
    os.symlink(secret, wt / PACKAGE / "leak.py")
    _commit(wt, "demo: a link")
    before = data_snapshot(repo)
    proc = cli(repo, "export", PACKAGE, env=env)
    assert one_line_error(proc) and "leak.py" in proc.stderr and "found a symlink" in proc.stderr, proc.stderr
    assert data_snapshot(repo) == before


def test_class3_patch_file_that_creates_a_symlink_is_refused_by_check_status_and_apply(tmp_path):
    """The same patch written into patches/ by hand (or by an older export): nothing reads the link's target."""
    from patchkit.gitcmd import git
    from patchkit.worktree import FORMAT_PATCH_ARGS

    repo, env = demo_repo(tmp_path / "r")
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    assert cli(repo, "worktree", PACKAGE, env=env).returncode == 0
    wt = repo / "build" / "work" / "1.0" / PACKAGE
    os.symlink(secret, wt / PACKAGE / "leak.py")
    _commit(wt, "demo: a link")
    out = git(wt, *FORMAT_PATCH_ARGS, "-o", str(tmp_path / "out"), "HEAD~1..HEAD").stdout.split()
    name = "0003-demo-a-link.patch"
    shutil.copy2(out[0], repo / "patches" / "1.0" / PACKAGE / name)
    with open(repo / "patches" / "1.0" / PACKAGE / "series", "a") as fh:
        fh.write(name + "\n")
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    for args in _commands(site):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc) and "leak.py" in proc.stderr and "found a symlink" in proc.stderr, (args, proc.stderr)
    assert snapshot(site) == before and SECRET.encode() not in b"".join(
        p.read_bytes() for p in site.rglob("*") if p.is_file())


def test_class3_overlay_file_that_is_a_symlink_is_refused(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    secret = tmp_path / "secret.py"
    secret.write_text((repo / "overlay" / "1.0" / EXTRA).read_text() + "# " + SECRET)
    (repo / "overlay" / "1.0" / EXTRA).unlink()
    os.symlink(secret, repo / "overlay" / "1.0" / EXTRA)
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    for args in _commands(site):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc) and "extra.py" in proc.stderr and "found a symlink" in proc.stderr, (args, proc.stderr)
    assert snapshot(site) == before


def test_class3_symlinked_overlay_directory_is_refused(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    shutil.move(repo / "overlay" / "1.0", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", repo / "overlay" / "1.0")
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    for args in _commands(site):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc) and "overlay" in proc.stderr and "found a symlink" in proc.stderr, (args, proc.stderr)
    assert snapshot(site) == before


def test_class3_fifo_in_the_patch_data_is_refused_not_read(tmp_path):
    """A FIFO under overlay/ or patches/ would block a reader, or be skipped without a word."""
    for where in ("overlay", "patches"):
        repo, env = demo_repo(tmp_path / where / "r")
        fifo = repo / where / "1.0" / PACKAGE / "x.fifo"
        os.mkfifo(fifo)
        proc = cli(repo, "check", env=env)
        assert one_line_error(proc) and "x.fifo" in proc.stderr and "found a FIFO" in proc.stderr, (where, proc.stderr)
