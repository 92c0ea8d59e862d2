"""Issue 23, item 6: a finished rebase says how to undo it, and `rebase --abort` then undoes it from the
backup it kept (build/rebase-done/), but never over edits made since. Runs on the crafted `demo` upstream."""
from __future__ import annotations

from tests.fault_fixtures import cli, data_snapshot, one_line_error


def test_abort_after_a_finished_rebase_restores_the_data(demo):
    repo, env = demo
    before = data_snapshot(repo)
    done = cli(repo, "rebase", "--to", "1.1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "To undo it: python apply.py rebase --abort" in done.stdout, done.stdout
    assert data_snapshot(repo) != before
    proc = cli(repo, "rebase", "--abort", env=env)
    assert proc.returncode == 0 and "undid the finished rebase" in proc.stdout, proc.stdout + proc.stderr
    assert data_snapshot(repo) == before
    again = cli(repo, "rebase", "--abort", env=env)
    assert again.returncode == 0 and "no finished rebase to undo" in again.stdout


def test_abort_after_a_finished_rebase_never_overwrites_later_edits(demo):
    repo, env = demo
    assert cli(repo, "rebase", "--to", "1.1", env=env).returncode == 0
    (repo / "pin.lock").write_text((repo / "pin.lock").read_text() + "# edited\n")
    edited = data_snapshot(repo)
    proc = cli(repo, "rebase", "--abort", env=env)
    assert one_line_error(proc) and "pin.lock changed since" in proc.stderr, proc.stderr
    assert data_snapshot(repo) == edited
