"""Issue 28, classes 1 and 2: nothing patchkit keeps for itself follows a link out of the tree.

Class 1: the lock files (`TARGET/.patchkit-lock`, `build/site-1.0/.patchkit-lock`, `build/.patchkit-repo-lock`)
were opened with O_CREAT and truncated: a symlink there (even one committed to a repository) overwrote any
file the user could write. Class 2: temp and bookkeeping names with a dangling link were written through,
and stale-temp cleanup skipped dangling links. Each is now refused with one line naming the path, or (a
temp name) replaced without being followed; a target file that is a link is refused too.
"""
from __future__ import annotations

import os

import pytest

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import PACKAGE, cli, demo_repo, demo_target, one_line_error

PRECIOUS = "precious\n"


def _victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    return victim


# -- class 1: lock files ---------------------------------------------------------------------------
@pytest.mark.parametrize("dangling", [False, True])
def test_class1_symlink_at_the_target_lock_is_refused_and_its_file_untouched(tmp_path, dangling):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text(PRECIOUS)
    os.symlink(victim, site / ".patchkit-lock")
    before = snapshot(site)
    for cmd in ("apply", "revert"):
        proc = cli(repo, cmd, "--target", str(site), env=env)
        assert one_line_error(proc) and ".patchkit-lock" in proc.stderr and "found a symlink" in proc.stderr, proc.stderr
    assert snapshot(site) == before and os.path.islink(site / ".patchkit-lock")
    assert (victim.read_text() == PRECIOUS) if not dangling else not victim.exists()


def test_class1_tracked_symlink_at_build_site_lock_never_overwrites_the_file_next_to_the_checkout(tmp_path):
    """`ln -s ../../../victim.txt build/site-1.0/.patchkit-lock` in a commit; the victim clones and runs apply."""
    repo, env = demo_repo(tmp_path / "r")
    victim = tmp_path / "r" / "victim.txt"            # next to the checkout (repo = tmp/r/repo)
    victim.write_text(PRECIOUS)
    (repo / "build" / "site-1.0").mkdir(parents=True)
    os.symlink("../../../victim.txt", repo / "build" / "site-1.0" / ".patchkit-lock")
    proc = cli(repo, "apply", env=env)
    assert one_line_error(proc) and "build/site-1.0/.patchkit-lock" in proc.stderr and "found a symlink" in proc.stderr, proc.stderr
    assert victim.read_text() == PRECIOUS
    assert not (repo / "build" / "site-1.0" / PACKAGE).exists()


def test_class1_symlink_at_the_repository_lock_is_refused_by_export(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    assert cli(repo, "worktree", PACKAGE, env=env).returncode == 0
    victim = _victim(tmp_path)
    os.symlink(victim, repo / "build" / ".patchkit-repo-lock")
    before = {p.name: p.read_bytes() for p in (repo / "patches" / "1.0" / PACKAGE).iterdir()}
    proc = cli(repo, "export", PACKAGE, env=env)
    assert one_line_error(proc) and ".patchkit-repo-lock" in proc.stderr and "found a symlink" in proc.stderr, proc.stderr
    assert victim.read_text() == PRECIOUS
    assert {p.name: p.read_bytes() for p in (repo / "patches" / "1.0" / PACKAGE).iterdir()} == before


def test_class1_lock_file_of_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a file of another user needs root")
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    lock = site / ".patchkit-lock"
    lock.write_text("")
    os.chown(lock, 65534, 65534)
    before = snapshot(site)
    proc = cli(repo, "apply", "--target", str(site), env=env)
    assert one_line_error(proc) and ".patchkit-lock" in proc.stderr and "owned by uid" in proc.stderr, proc.stderr
    assert snapshot(site) == before


# -- class 2: temp and bookkeeping names -----------------------------------------------------------
@pytest.mark.parametrize("rel", [f"{PACKAGE}/.util.py.patchkit-tmp", ".patchkit-journal.json.patchkit-tmp",
                                 ".patchkit-written.json.patchkit-tmp", ".patchkit-attestation.json.patchkit-tmp"])
def test_class2_dangling_link_at_a_temp_name_is_reported_removed_and_never_written_through(tmp_path, rel):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    outside = tmp_path / "outside.bin"                 # where the link points: must never appear
    os.symlink(outside, site / rel)
    status = cli(repo, "status", "--target", str(site), env=env)
    assert rel in status.stdout, status.stdout       # stale-temp detection sees a dangling link too
    proc = cli(repo, "apply", "--target", str(site), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "removed 1 temp file" in proc.stdout and rel in proc.stdout, proc.stdout
    assert not outside.exists() and not os.path.lexists(site / rel)
    assert not (site / PACKAGE / "util.py").is_symlink()
    status = cli(repo, "status", "--target", str(site), env=env)
    assert status.returncode == 0 and status.stdout.rstrip().endswith(": applied"), status.stdout


@pytest.mark.parametrize("name", [".patchkit-journal.json", ".patchkit-written.json"])
def test_class2_bookkeeping_file_that_is_a_link_is_a_one_line_error(tmp_path, name):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    assert cli(repo, "apply", "--target", str(site), env=env).returncode == 0
    real = tmp_path / "elsewhere.json"
    real.write_bytes((site / name).read_bytes() if (site / name).exists() else b'{"op": "apply", "files": []}')
    if (site / name).exists():
        (site / name).unlink()
    os.symlink(real, site / name)
    before = snapshot(site)
    for cmd in ("status", "apply", "revert"):
        proc = cli(repo, cmd, "--target", str(site), env=env)
        assert one_line_error(proc) and name in proc.stderr and "found a symlink" in proc.stderr, (cmd, proc.stderr)
    assert snapshot(site) == before


def test_class2_target_file_that_is_a_link_out_of_the_tree_is_refused(tmp_path):
    """util.py a link to a file outside holding the pinned bytes: apply read through it (and replaced the link)."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    outside = tmp_path / "outside.py"
    outside.write_bytes((site / PACKAGE / "util.py").read_bytes())
    (site / PACKAGE / "util.py").unlink()
    os.symlink(outside, site / PACKAGE / "util.py")
    before = snapshot(site)
    for cmd in ("apply", "status"):
        proc = cli(repo, cmd, "--target", str(site), env=env)
        assert one_line_error(proc) and "util.py" in proc.stderr and "found a symlink" in proc.stderr, (cmd, proc.stderr)
    assert snapshot(site) == before and (site / PACKAGE / "util.py").is_symlink()


@pytest.mark.parametrize("dangling", [False, True])
def test_class2_symlink_at_the_attestation_manifest_is_refused_and_its_target_untouched(tmp_path, dangling):
    """The manifest is one of the target's own files (bookkeeping.TargetFiles): apply and revert refuse a link at
    its name before their first write, status reports it unreadable; the link's target is never read or written."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    assert cli(repo, "apply", "--target", str(site), env=env).returncode == 0
    manifest = site / ".patchkit-attestation.json"
    victim = tmp_path / "victim.json"
    if not dangling:
        victim.write_text(PRECIOUS)
    manifest.unlink()
    os.symlink(victim, manifest)
    before = snapshot(site)
    for cmd in ("apply", "revert"):
        proc = cli(repo, cmd, "--target", str(site), env=env)
        assert one_line_error(proc) and str(manifest) in proc.stderr and "found a symlink" in proc.stderr, (cmd, proc.stderr)
    status = cli(repo, "status", "--target", str(site), env=env)
    assert f"attestation: unreadable: {manifest}: expected an attestation manifest" in status.stdout, status.stdout
    assert "found a symlink" in status.stdout and not status.stderr, status.stderr
    assert snapshot(site) == before and os.path.islink(manifest)
    assert (victim.read_text() == PRECIOUS) if not dangling else not os.path.lexists(victim)


def test_a_symlinked_pin_lock_in_a_cloned_repository_is_refused_in_one_line(tmp_path):
    """`ln -s ../elsewhere/pin.lock pin.lock` in a commit: the pins must be the repository's own file, not whatever
    the link reaches (read with fsio's no-follow reader, as every other file patchkit reads)."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / "pin.lock").rename(elsewhere / "pin.lock")
    os.symlink(os.path.relpath(elsewhere / "pin.lock", repo), repo / "pin.lock")
    pins = (elsewhere / "pin.lock").read_bytes()
    before = snapshot(site)
    for cmd in ("status", "apply"):
        proc = cli(repo, cmd, "--target", str(site), env=env)
        assert one_line_error(proc) and "pin.lock" in proc.stderr and "found a symlink" in proc.stderr, (cmd, proc.stderr)
    assert snapshot(site) == before and (elsewhere / "pin.lock").read_bytes() == pins


@pytest.mark.parametrize("linked", ["overlay", "patches", "patches/1.0"])
def test_a_symlinked_data_directory_is_refused_like_overlay_line(tmp_path, linked):
    """`overlay/`, `patches/` or `patches/<line>/` committed as a link to a directory elsewhere: check passed and
    apply wrote bytes from outside the repository (a link at overlay/<line> was already refused)."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    assert cli(repo, "worktree", PACKAGE, env=env).returncode == 0     # made before the link: export's source
    elsewhere = tmp_path / "elsewhere"
    (repo / linked).rename(elsewhere)
    os.symlink(os.path.relpath(elsewhere, (repo / linked).parent), repo / linked)
    outside = snapshot(elsewhere)
    before = snapshot(site)
    for args in (["check"], ["status", "--target", str(site)], ["apply", "--target", str(site)]):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc) and f"{repo / linked}: expected a directory of the repository, found a symlink" \
            in proc.stderr, (args, proc.stdout + proc.stderr)
    assert snapshot(site) == before
    proc = cli(repo, "export", PACKAGE, env=env)
    assert one_line_error(proc) and "found a symlink" in proc.stderr, proc.stderr
    assert snapshot(elsewhere) == outside
