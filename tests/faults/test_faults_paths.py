"""Paths that come from data are confined to their root: crafted patch headers and diffs, crafted wheels
(zip-slip) and forged bookkeeping files are refused with a one-line error, and nothing is written.

Issue #16, failures 3, 4 and 5. Runs on the crafted `demo` upstream (tests/fault_fixtures.py).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import (PACKAGE, RELEASES, cli, demo_repo, demo_target, make_wheel, one_line_error,
                                  pin_lock)
from patchkit.hashing import sha256_bytes, sha256_file


def _add_trailer(patch, line: str) -> None:
    """One more line in the trailer block (the paragraph before the diff), as a pull request would add it."""
    head, sep, rest = patch.read_text().partition("\n\ndiff --git ")
    patch.write_text(head + "\n" + line + sep + rest)


def test_overlay_header_that_climbs_out_is_refused_and_nothing_is_read_or_written(tmp_path):
    """`Overlay: demo/../../../x` passed `check`; apply read x from outside overlay/ and wrote it outside the target."""
    repo, env = demo_repo(tmp_path / "r")
    secret = tmp_path / "r" / "x"          # what overlay/demo/../../../x names
    secret.write_text("read from outside overlay/\n")
    patch = sorted((repo / "patches" / "1.0" / PACKAGE).glob("0001-*.patch"))[0]
    _add_trailer(patch, f"Overlay: {PACKAGE}/../../../x")
    site = demo_target(tmp_path / "t" / "sub")
    escaped = tmp_path / "t" / "x"          # what site/demo/../../../x names
    before = snapshot(site)
    for args in (["check"], ["apply", "--target", str(site)], ["status", "--target", str(site)]):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc), (args, proc.stdout, proc.stderr)
        assert "Overlay" in proc.stderr and "demo/../../../x" in proc.stderr, proc.stderr
    assert not escaped.exists() and snapshot(site) == before


def test_diff_path_that_climbs_out_is_refused(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    patch = sorted((repo / "patches" / "1.0" / PACKAGE).glob("0002-*.patch"))[0]
    patch.write_text(patch.read_text().replace("a/demo/util.py", "a/demo/../../util.py")
                     .replace("b/demo/util.py", "b/demo/../../util.py"))
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    proc = cli(repo, "apply", "--target", str(site), env=env)
    assert one_line_error(proc) and "diff path" in proc.stderr and "demo/../../util.py" in proc.stderr, proc.stderr
    assert snapshot(site) == before


@pytest.mark.parametrize("entry", [f"{PACKAGE}/../../../../f", "/tmp/patchkit-zip-slip-absolute"])
def test_zip_slip_wheel_entry_is_refused_before_anything_is_unpacked(tmp_path, entry):
    """A wheel entry that climbs out of build/site-0.5.14 (or is absolute) is refused; nothing is unpacked at all."""
    repo, env = demo_repo(tmp_path / "r")
    evil = make_wheel(tmp_path / "evil", "1.0", RELEASES["1.0"], extra={entry: b"escaped\n"})
    shutil.copy2(evil, tmp_path / "r" / "cache" / "artifacts" / evil.name)
    (repo / "pin.lock").write_text(pin_lock(evil, "1.0"))
    proc = cli(repo, "apply", env=env)
    escaped = [p for p in [*tmp_path.rglob("*"), Path(entry)]
               if p.is_file() and p.stat().st_size == 8 and p.read_bytes() == b"escaped\n"]
    assert escaped == [], "the crafted entry was written"
    assert one_line_error(proc) and "wheel entry" in proc.stderr and entry in proc.stderr, proc.stderr
    site = repo / "build" / "site-1.0"
    assert not (site / PACKAGE).exists() and [p.name for p in site.iterdir()] == []


def _applied(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    assert cli(repo, "apply", "--target", str(site), env=env).returncode == 0
    return repo, env, site


def _forge_digest(site, rel: str, digest: str) -> None:
    """Add `digest` to the record of what patchkit wrote at `rel`, whichever format the record has."""
    record = site / ".patchkit-written.json"
    data = json.loads(record.read_text())
    if "format" in data:
        data["files"].setdefault(rel, {"sha256": [], "stat": None})["sha256"].append(digest)
    else:
        data.setdefault(rel, []).append(digest)
    record.write_text(json.dumps(data))


def test_record_from_before_16_still_vouches_for_files_unchanged_since(tmp_path):
    """A tree applied by an older patchkit (record without stat) is still refreshed by a changed series;
    a file edited after that record was written is not taken for ours."""
    import os

    repo, env, site = _applied(tmp_path)
    record = site / ".patchkit-written.json"
    data = json.loads(record.read_text())
    if "format" in data:   # write it as patchkit did before #16: path -> digests
        record.write_text(json.dumps({rel: e["sha256"] for rel, e in data["files"].items()}))
    util = site / f"{PACKAGE}/util.py"
    old_final = util.read_bytes()
    patch = sorted((repo / "patches" / "1.0" / PACKAGE).glob("0002-*.patch"))[0]
    patch.write_text(patch.read_text().replace("+U7 = 70", "+U7 = 700"))   # the series moves on
    proc = cli(repo, "status", "--target", str(site), env=env)
    assert "outdated" in proc.stdout, proc.stdout + proc.stderr
    util.write_bytes(old_final + b"# local edit\n")
    future = record.stat().st_mtime_ns + 10**9
    os.utime(util, ns=(future, future))
    _forge_digest(site, f"{PACKAGE}/util.py", sha256_file(util))
    os.utime(record, ns=(future - 10**6, future - 10**6))   # the record predates the edit
    proc = cli(repo, "apply", "--target", str(site), env=env)
    assert one_line_error(proc) and "util.py" in proc.stderr, proc.stderr
    util.write_bytes(old_final)
    os.utime(util, ns=(future - 10**9, future - 10**9))
    proc = cli(repo, "apply", "--target", str(site), env=env)
    assert proc.returncode == 0 and b"U7 = 700" in util.read_bytes(), proc.stderr
    assert '"format": 2' in record.read_text()


def test_forged_record_cannot_make_revert_delete_outside_the_target(tmp_path):
    repo, env, site = _applied(tmp_path)
    victim = tmp_path / "victim.txt"         # site/demo/../../victim.txt
    victim.write_text("a user's file\n")
    _forge_digest(site, f"{PACKAGE}/../../victim.txt", sha256_file(victim))
    before = snapshot(site)
    for cmd in ("revert", "apply", "status"):
        proc = cli(repo, cmd, "--target", str(site), env=env)
        assert one_line_error(proc) and ".patchkit-written.json" in proc.stderr, (cmd, proc.stderr)
    assert victim.read_text() == "a user's file\n" and snapshot(site) == before


def test_forged_digest_cannot_make_apply_overwrite_a_local_edit(tmp_path):
    """A record claiming a locally edited file's bytes as patchkit's would let apply overwrite the edit."""
    repo, env, site = _applied(tmp_path)
    for rel in (f"{PACKAGE}/util.py", f"{PACKAGE}/__init__.py"):   # a patched file, and one the series never touches
        edited = (site / rel).read_text() + "# local edit\n"
        (site / rel).write_text(edited)
        _forge_digest(site, rel, sha256_bytes(edited.encode()))
        before = snapshot(site)
        for cmd in ("apply", "revert"):
            proc = cli(repo, cmd, "--target", str(site), env=env)
            assert one_line_error(proc) and rel in proc.stderr and "expected sha256" in proc.stderr, (rel, cmd, proc.stderr)
        assert (site / rel).read_text() == edited and snapshot(site) == before
        (site / rel).write_text(edited.replace("# local edit\n", ""))


@pytest.mark.parametrize("journal", [
    "[]", '{"op": 1}', '{"op": "apply", "files": [{"path": 5}]}',
    '{"op": "apply", "files": [{"path": "demo/../../x", "before": null, "after": null}]}',
    '{"op": "apply", "files": "demo/util.py"}', "{not json",
])
def test_journal_of_the_wrong_shape_reads_as_interrupted_and_recovers(tmp_path, journal):
    """Valid JSON of the wrong shape raised a traceback in every command until deleted by hand."""
    repo, env, site = _applied(tmp_path)
    (site / ".patchkit-journal.json").write_text(journal)
    proc = cli(repo, "status", "--target", str(site), env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "interrupted" in proc.stdout and "malformed" in proc.stdout, proc.stdout
    proc = cli(repo, "revert", "--target", str(site), env=env)
    assert proc.returncode == 0, proc.stderr
    assert not (site / ".patchkit-journal.json").exists()
    assert cli(repo, "status", "--target", str(site), env=env).stdout.rstrip().endswith(": pristine")


@pytest.mark.parametrize("name", [".patchkit-journal.json", ".patchkit-written.json"])
def test_bookkeeping_file_that_is_a_directory_is_a_one_line_error(tmp_path, name):
    repo, env, site = _applied(tmp_path)
    if (site / name).exists():
        (site / name).unlink()
    (site / name).mkdir()
    before = snapshot(site)
    for cmd in ("status", "apply", "revert"):
        proc = cli(repo, cmd, "--target", str(site), env=env)
        assert one_line_error(proc) and name in proc.stderr and "directory" in proc.stderr, (cmd, proc.stderr)
    assert snapshot(site) == before


@pytest.mark.parametrize("edit,says", [
    (lambda t: t.replace('[line."1.0".upstream.demo]', '[line."1.0".upstreams.demo]'), 'unknown table [line."1.0".upstreams]'),
    (lambda t: t + '\n[upstram.other]\nroot = "x"\n', "unknown table [upstram]"),
    (lambda t: t.replace('[line."1.0".upstream.demo]', '[upstream.demo]'), "unknown table [upstream]"),
    (lambda t: t.replace('root = "demo"', 'rot = "demo"'), "unknown key 'rot'"),
    (lambda t: t.replace('version = "1.0"', "version = 1.0"), "version: expected a string, found a number"),
    (lambda t: t.replace('root = "demo"', "root = 5"), "root: expected a string, found an integer"),
    (lambda t: t.replace('root = "demo"', 'root = "../demo"'), "root"),
    (lambda t: t.replace('artifact = "', 'artifact = "../../'), "artifact"),
    (lambda t: t + '\n[line."1.0".runtime]\ntorch = [2]\n', "torch: expected a string"),
    # the package index left pin.lock for pip's own configuration (#15)
    (lambda t: t + '\n[index]\nurl = "x"\n', "no [index] table, found one: remove it; the package index is pip's"),
])
def test_pin_lock_is_checked_against_its_schema(tmp_path, edit, says):
    """A misspelt table dropped an upstream's patches silently; wrong value types raised tracebacks."""
    repo, env = demo_repo(tmp_path / "r")
    (repo / "pin.lock").write_text(edit((repo / "pin.lock").read_text()))
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    for args in (["status", "--target", str(site)], ["apply", "--target", str(site)], ["check"]):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc) and says in proc.stderr and "pin.lock" in proc.stderr, (args, proc.stderr)
    assert snapshot(site) == before

