"""Kill points across apply, revert and rebase (backup, replay, refresh), a full disk during rollback, and
temp files left by interrupted writes (issue #16, failures 1, 9 and 10).

Each process is killed with os._exit (as SIGKILL would: no cleanup) at a named point (patchkit/faults.py);
the next command must recover byte for byte, or refuse with a one-line error that says what to do.
"""
from __future__ import annotations

import json
import shutil

import pytest

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import cli, data_snapshot, demo_repo, demo_target, one_line_error


# -- apply / revert ------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_kill_between_a_temp_file_and_its_rename_is_reported_and_cleaned(tmp_path, op):
    """Interrupted writes left `.<name>.patchkit-tmp` files that nothing reported or removed."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    pristine = snapshot(site)
    ref = demo_target(tmp_path / "t", "reference")
    assert cli(repo, "apply", "--target", str(ref), env=env).returncode == 0
    applied = snapshot(ref)
    if op == "revert":
        assert cli(repo, "apply", "--target", str(site), env=env).returncode == 0
    # temp file 0 is the journal's, 1 is the first file's
    proc = cli(repo, op, "--target", str(site), env={**env, "PATCHKIT_TEST_FAULT": "tmp:kill:1"})
    assert proc.returncode == 137
    temps = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.patchkit-tmp"))
    assert len(temps) == 1
    status = cli(repo, "status", "--target", str(site), env=env)
    assert status.returncode == 1 and f"interrupted {op}" in status.stdout
    assert f"temp file left by an interrupted run: {temps[0]}" in status.stdout, status.stdout
    finish = cli(repo, op, "--target", str(site), env=env)
    assert finish.returncode == 0 and "removed 1 temp file" in finish.stdout, finish.stdout + finish.stderr
    assert not list(site.rglob("*.patchkit-tmp"))
    want = applied if op == "apply" else pristine
    got = {k: v for k, v in snapshot(site).items() if ".patchkit-written.json" not in k}
    assert got == {k: v for k, v in want.items() if ".patchkit-written.json" not in k}


def test_kill_while_writing_the_journal_leaves_a_temp_file_and_no_journal(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    assert cli(repo, "apply", "--target", str(site), env={**env, "PATCHKIT_TEST_FAULT": "tmp:kill:0"}).returncode == 137
    status = cli(repo, "status", "--target", str(site), env=env)
    assert ".patchkit-journal.json.patchkit-tmp" in status.stdout, status.stdout
    assert cli(repo, "revert", "--target", str(site), env=env).returncode == 0
    assert snapshot(site) == before


def test_full_disk_during_rollback_is_a_one_line_error_and_the_tree_recovers(tmp_path):
    """A write fails, then putting the first file back fails too (ENOSPC): no traceback, journal kept."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    proc = cli(repo, "apply", "--target", str(site), env={**env, "PATCHKIT_TEST_FAULT": "raise:2,rollback:enospc:0"})
    assert one_line_error(proc), proc.stderr
    assert "No space left" in proc.stderr and "journal is kept" in proc.stderr
    status = cli(repo, "status", "--target", str(site), env=env)
    assert status.returncode == 1 and "interrupted apply" in status.stdout
    assert cli(repo, "revert", "--target", str(site), env=env).returncode == 0
    assert snapshot(site) == before


# -- rebase ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("point", ["backup:kill:2", "replay:kill:1", "refresh:kill:1", "refresh:kill:2"])
def test_killed_rebase_then_abort_restores_the_data_byte_for_byte(demo, point):
    """Kill points in the backup, the replay and the refresh (after patches/, after overlay/ are rewritten)."""
    repo, env = demo
    before = data_snapshot(repo)
    killed = cli(repo, "rebase", "--to", "1.1", env={**env, "PATCHKIT_TEST_FAULT": point})
    assert killed.returncode == 137, killed.stdout + killed.stderr
    if point.startswith("refresh"):
        assert data_snapshot(repo) != before, "the kill point is meant to fall inside the rewrite"
    proc = cli(repo, "rebase", "--abort", env=env)
    assert proc.returncode == 0, proc.stderr
    assert data_snapshot(repo) == before
    assert not (repo / "build" / "rebase").exists()
    assert cli(repo, "check", env=env).returncode == 0


def test_abort_after_a_kill_in_the_backup_never_deletes_patches_or_overlay(demo):
    """A backup directory holding only pin.lock made --abort delete patches/ and overlay/ and print 'restored'."""
    repo, env = demo
    before = data_snapshot(repo)
    backup = repo / "build" / "rebase" / "backup"
    backup.mkdir(parents=True)
    shutil.copy2(repo / "pin.lock", backup / "pin.lock")
    proc = cli(repo, "rebase", "--abort", env=env)
    assert proc.returncode == 0 and "restored" not in proc.stdout and "never written" in proc.stdout, proc.stdout
    assert data_snapshot(repo) == before


@pytest.mark.parametrize("damage", ["manifest", "file"])
def test_abort_refuses_a_backup_its_manifest_does_not_vouch_for(demo, damage):
    """Killed mid-refresh with a damaged backup: --abort restores nothing, deletes nothing, says what to do."""
    repo, env = demo
    assert cli(repo, "rebase", "--to", "1.1", env={**env, "PATCHKIT_TEST_FAULT": "refresh:kill:1"}).returncode == 137
    backup = repo / "build" / "rebase" / "backup"
    if damage == "manifest":
        (backup / "MANIFEST.json").unlink()
    else:
        victim = sorted((backup / "patches").rglob("*.patch"))[0]
        victim.write_text(victim.read_text() + "tampered\n")
    half = data_snapshot(repo)
    proc = cli(repo, "rebase", "--abort", env=env)
    assert one_line_error(proc) and "not complete" in proc.stderr and "git checkout" in proc.stderr, proc.stderr
    assert data_snapshot(repo) == half and backup.is_dir()
    again = cli(repo, "rebase", "--to", "1.1", env=env)
    assert one_line_error(again) and "already in progress" in again.stderr


def test_failed_refresh_whose_restore_fails_too_keeps_the_backup_and_says_so(demo):
    """The refresh fails, then putting the data back fails (a full disk): one line, backup kept, abort finishes."""
    repo, env = demo
    before = data_snapshot(repo)
    proc = cli(repo, "rebase", "--to", "1.1", env={**env, "PATCHKIT_TEST_FAULT": "refresh:raise:1,restore:enospc:0"})
    assert one_line_error(proc) and "No space left" in proc.stderr and "rebase --abort" in proc.stderr, proc.stderr
    assert (repo / "build" / "rebase" / "backup").is_dir()
    proc = cli(repo, "rebase", "--abort", env=env)
    assert proc.returncode == 0 and "restored" in proc.stdout, proc.stdout + proc.stderr
    assert data_snapshot(repo) == before


def test_forged_rebase_state_is_refused_on_continue(demo):
    repo, env = demo
    assert cli(repo, "rebase", "--to", "1.1", env={**env, "PATCHKIT_TEST_FAULT": "replay:kill:1"}).returncode == 137
    state_file = repo / "build" / "rebase" / "state.json"
    state = json.loads(state_file.read_text())
    state["stopped"] = {"upstream": "demo", "index": 0, "head": "0", "files": ["../../../pin.lock"]}
    state_file.write_text(json.dumps(state))
    before = data_snapshot(repo)
    proc = cli(repo, "rebase", "--continue", env=env)
    assert one_line_error(proc) and "../../../pin.lock" in proc.stderr, proc.stderr
    assert data_snapshot(repo) == before


@pytest.mark.parametrize("fault,where", [("unpack:enospc:2", "build/site-1.0/demo/"), ("tmp:enospc:0", "journal"),
                                         ("tmp:enospc:1", "site/demo/"), ("write:enospc:1", "site/demo/")])
def test_a_full_disk_names_the_path_it_was_writing(tmp_path, fault, where):
    """ENOSPC (injected through faults.py) said `[Errno 28] No space left on device` with no path: the user could
    not tell which disk to free. Each write path names its file, and the tree is left as it was."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    target = [] if fault.startswith("unpack") else ["--target", str(site)]
    before = snapshot(site)
    proc = cli(repo, "apply", *target, env={**env, "PATCHKIT_TEST_FAULT": fault})
    assert one_line_error(proc) and "No space left on device" in proc.stderr and "free space" in proc.stderr, proc.stderr
    path = repo / "build" / "site-1.0" if fault.startswith("unpack") else site
    named = proc.stderr.split("error: ", 1)[1]
    assert str(path) in named and (where if where != "journal" else ".patchkit-journal.json") in named, proc.stderr
    assert "[Errno" not in proc.stderr, proc.stderr
    assert snapshot(site) == before
    if fault.startswith("unpack"):         # all or nothing: the next run unpacks and applies
        assert not (repo / "build" / "site-1.0" / "demo").exists()
    assert cli(repo, "apply", *target, env=env).returncode == 0
