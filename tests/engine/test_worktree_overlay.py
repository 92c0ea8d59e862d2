"""`worktree` holds the overlay (new) files, each in the commit of the patch that claims it, so a change can be
reviewed and edited there whole; `export` writes them back to overlay/LINE/ and round-trips byte for byte.
On the crafted `demo` upstream (tests/fault_fixtures.py: patch 1 claims demo/extra.py); the real series' round
trip is tests/engine/test_engine.py::test_worktree_then_export_reproduces_the_series."""
from __future__ import annotations

from patchkit.gitcmd import git
from tests.fault_fixtures import EXTRA, LINE, PACKAGE, cli, data_snapshot


def _worktree(repo, env, tmp_path):
    wt = tmp_path / "wt"
    proc = cli(repo, "worktree", PACKAGE, "--dir", str(wt), env=env)
    assert proc.returncode == 0, proc.stderr
    return wt, git(wt, "rev-list", "--reverse", "pristine..HEAD").stdout.split()


def test_worktree_commits_the_overlay_file_with_its_patch_and_export_round_trips(demo, tmp_path):
    repo, env = demo
    before = data_snapshot(repo)
    wt, commits = _worktree(repo, env, tmp_path)
    first = git(wt, "diff-tree", "--no-commit-id", "--name-only", "-r", commits[0]).stdout.split()
    assert EXTRA in first, first
    assert git(wt, "show", f"{commits[0]}:{EXTRA}", text=False).stdout == before[f"overlay/{LINE}/{EXTRA}"]
    assert EXTRA not in git(wt, "diff-tree", "--no-commit-id", "--name-only", "-r", commits[1]).stdout.split()
    (repo / "overlay" / LINE / EXTRA).unlink()            # export writes it back, it does not merely leave it
    proc = cli(repo, "export", PACKAGE, "--dir", str(wt), env=env)
    assert proc.returncode == 0, proc.stderr
    assert data_snapshot(repo) == before


def test_an_overlay_edit_in_its_own_commit_is_exported_and_one_elsewhere_is_refused(demo, tmp_path):
    repo, env = demo
    wt, commits = _worktree(repo, env, tmp_path)
    # an edit on top of the series, in a commit that does not claim the file: refused, nothing written
    (wt / EXTRA).write_text("def g(x):\n    return 3 * x\n")
    git(wt, "commit", "-qam", "tweak g\n\nwhy\n\nUpstream-Status: Pending\nEvidence: none\nTest: none\n")
    before = data_snapshot(repo)
    proc = cli(repo, "export", PACKAGE, "--dir", str(wt), env=env)
    line = proc.stderr.strip()
    assert proc.returncode == 1 and "\n" not in line and "Traceback" not in proc.stderr, proc.stderr
    assert f"{EXTRA}: expected changes only in the commit that claims it" in line and "'tweak g'" in line, line
    assert data_snapshot(repo) == before
    # the same edit made in the claiming commit (history rewritten as a developer would): exported
    git(wt, "reset", "-q", "--hard", commits[0])
    (wt / EXTRA).write_text("def g(x):\n    return 3 * x\n")
    git(wt, "commit", "-q", "--amend", "--no-edit", "-a")
    git(wt, "cherry-pick", commits[1])
    proc = cli(repo, "export", PACKAGE, "--dir", str(wt), env=env)
    assert proc.returncode == 0, proc.stderr
    after = data_snapshot(repo)
    assert after[f"overlay/{LINE}/{EXTRA}"] == b"def g(x):\n    return 3 * x\n"
    assert {k: v for k, v in after.items() if k != f"overlay/{LINE}/{EXTRA}"} == \
        {k: v for k, v in before.items() if k != f"overlay/{LINE}/{EXTRA}"}
