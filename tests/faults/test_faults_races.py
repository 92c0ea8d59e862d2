"""Issue 28, class 6: races and waits.

A cached wheel swapped after its sha256 check was unpacked (check, then use by name); a cached wheel that
is a FIFO hung; PATCHKIT_LOCK_WAIT=nan waited forever; a user's edit landing inside apply's write window
was overwritten, rc 0. Now the wheel is hashed and read through one handle, a cache entry that is not a
regular file is refused, lock waits are finite non-negative numbers, and apply re-checks each file just
before replacing it (rolling back if it changed).
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import (PACKAGE, RELEASES, cli, demo_repo, demo_target, finish_paused, make_wheel,
                                  one_line_error, start_paused, wheel_name)


def test_class6_cached_wheel_swapped_after_its_check_is_never_unpacked(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    cached = tmp_path / "r" / "cache" / "artifacts" / wheel_name("1.0")
    evil_files = {**RELEASES["1.0"], "demo/util.py": "import os  # swapped in after the check\n"}
    evil = make_wheel(tmp_path / "evil", "1.0", evil_files)
    proc, flag = start_paused(repo, env, tmp_path, "apply", point="fetched:pause:0")
    try:
        os.replace(evil, cached)                   # the swap lands between the check and the unpack
    finally:
        rc, out, err = finish_paused(proc, flag)
    assert rc == 0, err
    util = repo / "build" / "site-1.0" / PACKAGE / "util.py"
    assert b"swapped in" not in util.read_bytes()
    assert b"U7 = 70" in util.read_bytes()         # the genuine wheel's bytes, patched


def test_class6_cached_wheel_that_is_a_fifo_is_refused_at_once(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    cached = tmp_path / "r" / "cache" / "artifacts" / wheel_name("1.0")
    cached.unlink()
    os.mkfifo(cached)
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    proc = cli(repo, "apply", "--target", str(site), env=env)     # cli() times out after 120 s
    assert one_line_error(proc) and wheel_name("1.0") in proc.stderr and "found a FIFO" in proc.stderr, proc.stderr
    assert snapshot(site) == before


def test_class6_cached_wheel_that_is_a_link_is_refused(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    cached = tmp_path / "r" / "cache" / "artifacts" / wheel_name("1.0")
    shutil.move(cached, tmp_path / "elsewhere.whl")
    os.symlink(tmp_path / "elsewhere.whl", cached)
    proc = cli(repo, "apply", "--target", str(demo_target(tmp_path / "t")), env=env)
    assert one_line_error(proc) and wheel_name("1.0") in proc.stderr and "found a symlink" in proc.stderr, proc.stderr


@pytest.mark.parametrize("wait", ["nan", "inf", "-1", "soon"])
def test_class6_lock_wait_must_be_a_finite_non_negative_number(tmp_path, wait):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    proc = cli(repo, "apply", "--target", str(site), env={**env, "PATCHKIT_LOCK_WAIT": wait})
    assert one_line_error(proc) and "PATCHKIT_LOCK_WAIT" in proc.stderr and "finite" in proc.stderr, proc.stderr
    assert snapshot(site) == before


def test_class6_an_edit_inside_the_write_window_is_never_overwritten(tmp_path):
    """Paused after the first file is written, a user edits the next one: apply rolls back and names it."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    pristine = snapshot(site)
    proc, flag = start_paused(repo, env, tmp_path, "apply", "--target", str(site), point="write:pause:1")
    try:
        journal = json.loads((site / ".patchkit-journal.json").read_text())
        victim = site / journal["files"][1]["path"]
        edited = (victim.read_bytes() if victim.exists() else b"") + b"# the user's edit\n"
        victim.write_bytes(edited)
    finally:
        rc, out, err = finish_paused(proc, flag)
    assert rc == 1 and "Traceback" not in err and journal["files"][1]["path"] in err and "changed while this run was working" in err, err
    assert victim.read_bytes() == edited                          # the edit is kept
    rel = victim.relative_to(site).as_posix()
    after = snapshot(site)
    assert {k: v for k, v in after.items() if k != rel} == {k: v for k, v in pristine.items() if k != rel}
