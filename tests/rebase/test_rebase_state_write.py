"""Issue 23, item 7: the rebase state (build/rebase/state.json), the backup and pin.lock are written through
the one atomic writer (patchkit/fsio.py). A kill inside the state write leaves the previous state whole, and
`rebase --continue` finishes the rebase exactly as an uninterrupted one does.

Runs on the crafted `demo` upstream (tests/fault_fixtures.py): the property is the engine's, not SGLang's.
"""
from __future__ import annotations

import json
import shutil

from tests.fault_fixtures import cli, data_snapshot


def test_kill_inside_the_state_write_then_continue_finishes_the_rebase(demo, tmp_path):
    repo, env = demo
    reference = tmp_path / "reference"
    shutil.copytree(repo, reference)
    done = cli(reference, "rebase", "--to", "1.1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    # state writes: 0 = the plan, 1 = after the first patch; the kill comes after the temp file is
    # written and before its rename, i.e. inside the write
    killed = cli(repo, "rebase", "--to", "1.1", env={**env, "PATCHKIT_TEST_FAULT": "state:kill:1"})
    assert killed.returncode == 137, killed.stdout + killed.stderr
    state_file = repo / "build" / "rebase" / "state.json"
    state = json.loads(state_file.read_text())          # whole: the previous state, not a truncated one
    assert state["upstreams"][0]["next"] == 0
    proc = cli(repo, "rebase", "--continue", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert data_snapshot(repo) == data_snapshot(reference)
    assert not (repo / "build" / "rebase" / "state.json").exists()


def test_rebase_writes_leave_no_temp_files(demo):
    repo, env = demo
    assert cli(repo, "rebase", "--to", "1.1", env=env).returncode == 0
    assert not [p for p in repo.rglob("*.patchkit-tmp")]
