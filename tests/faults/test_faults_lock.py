"""One writer at a time, per target and per repository rebase state (issue #16, failures 2 and 7).

A first command is paused inside its write window (PATCHKIT_TEST_FAULT=...:pause:N, patchkit/faults.py);
a second one meanwhile must refuse (PATCHKIT_LOCK_WAIT=0) or wait, never interleave. A lock left by a
killed process is taken over with a message.
"""
from __future__ import annotations

import subprocess
import sys

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import (cli, data_snapshot, demo_repo, demo_target, finish_paused, one_line_error,
                                  start_paused)


def test_second_writer_on_a_target_is_refused_while_the_first_is_writing(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    first, flag = start_paused(repo, env, tmp_path, "apply", "--target", str(site), point="write:pause:1")
    try:
        for cmd in ("revert", "apply"):
            proc = cli(repo, cmd, "--target", str(site), env=env)
            assert one_line_error(proc) and "locked by pid" in proc.stderr and str(first.pid) in proc.stderr, proc.stderr
    finally:
        rc, out, err = finish_paused(first, flag)
    assert rc == 0, err
    proc = cli(repo, "status", "--target", str(site), env=env)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith(": applied"), proc.stdout
    assert not (site / ".patchkit-lock").exists()


def test_second_writer_waits_for_the_first_then_finds_nothing_to_do(tmp_path):
    import os
    import time

    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    first, flag = start_paused(repo, env, tmp_path, "apply", "--target", str(site), point="write:pause:1")
    log = tmp_path / "second.err"
    with open(log, "w") as err_fh:
        second = subprocess.Popen([sys.executable, str(repo / "apply.py"), "apply", "--target", str(site)],
                                  env={k: v for k, v in {**os.environ, **env, "PATCHKIT_LOCK_WAIT": "60"}.items() if v is not None},
                                  stdout=subprocess.PIPE, stderr=err_fh, text=True)
    try:
        deadline = time.monotonic() + 30
        while "waiting for pid" not in log.read_text() and time.monotonic() < deadline and second.poll() is None:
            time.sleep(0.05)
        assert "waiting for pid" in log.read_text() and second.poll() is None, log.read_text()
    finally:
        rc, _, err = finish_paused(first, flag)
    out2 = second.communicate(timeout=120)[0]
    assert rc == 0, err
    assert second.returncode == 0 and "nothing to do" in out2, (out2, log.read_text())


def test_stale_lock_of_a_dead_process_is_taken_over_with_a_message(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (site / ".patchkit-lock").write_text(f"{dead.pid} apply\n")
    proc = cli(repo, "apply", "--target", str(site), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "stale lock" in proc.stderr and f"pid {dead.pid}" in proc.stderr and "no longer running" in proc.stderr
    assert not (site / ".patchkit-lock").exists()


def test_killed_apply_leaves_a_lock_the_next_command_takes_over(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    killed = cli(repo, "apply", "--target", str(site), env={**env, "PATCHKIT_TEST_FAULT": "kill:1"})
    assert killed.returncode == 137
    proc = cli(repo, "revert", "--target", str(site), env=env)
    assert proc.returncode == 0 and "stale lock" in proc.stderr, proc.stderr
    assert snapshot(site) == before


def test_two_rebases_never_interleave_and_abort_waits_for_the_running_one(tmp_path, demo):
    """Two rebases at once: the one reporting success had deleted overlay/**; --abort found nothing to abort.
    `export` (which rewrites patches/) waits for the same lock."""
    repo, env = demo
    assert cli(repo, "worktree", "demo", env=env).returncode == 0
    first, flag = start_paused(repo, env, tmp_path, "rebase", "--to", "1.1", point="replay:pause:1")
    try:
        for args in (["rebase", "--to", "1.1"], ["rebase", "--abort"], ["rebase", "--continue"], ["export", "demo"]):
            proc = cli(repo, *args, env=env)
            assert one_line_error(proc) and "rebase state" in proc.stderr and "locked by pid" in proc.stderr, (args, proc.stderr)
    finally:
        rc, out, err = finish_paused(first, flag)
    assert rc == 0, err + out
    assert (repo / "overlay" / "1.0" / "demo" / "extra.py").is_file()
    after = data_snapshot(repo)
    assert b'version = "1.1"' in after["pin.lock"]
    proc = cli(repo, "check", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_status_while_another_apply_holds_the_lock_names_it_running_with_its_pid_not_interrupted(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    first, flag = start_paused(repo, env, tmp_path, "apply", "--target", str(site), point="write:pause:1")
    try:
        assert (site / ".patchkit-journal.json").is_file()      # mid-write: its journal is there, as after a kill
        proc = cli(repo, "status", "--target", str(site), env=env)
        said = proc.stdout
        assert f"pid {first.pid}" in said and "running" in said, said
        assert "interrupted" not in said and "run apply or revert" not in said, said
        assert proc.returncode == 1 and said.rstrip().endswith(f"apply running (pid {first.pid})"), said
    finally:
        rc, out, err = finish_paused(first, flag)
    assert rc == 0, err
    proc = cli(repo, "status", "--target", str(site), env=env)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith(": applied"), proc.stdout


def test_status_after_a_killed_apply_still_calls_it_interrupted(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    killed = cli(repo, "apply", "--target", str(site), env={**env, "PATCHKIT_TEST_FAULT": "kill:1"})
    assert killed.returncode == 137
    proc = cli(repo, "status", "--target", str(site), env=env)
    assert "interrupted apply" in proc.stdout and "run apply or revert" in proc.stdout, proc.stdout
    assert "running" not in proc.stdout, proc.stdout
