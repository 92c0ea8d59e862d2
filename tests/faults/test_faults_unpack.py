"""The unpack of a pristine tree is atomic and verified against the wheel's RECORD (issue #16, failure 6).

Killing the first `make apply` while it unpacked the wheels left a tree missing hundreds of files that
was then reported `applied`. The kill test runs on the real pinned wheels and checks the recovered tree
against their own RECORD files; the RECORD-mismatch tests use small crafted wheels.
"""
from __future__ import annotations

import csv
import io
import shutil

import pytest

from tests.engine_fixtures import copy_repo_data
from tests.fault_fixtures import PACKAGE, RELEASES, cli, demo_repo, make_wheel, one_line_error, pin_lock
from patchkit.hashing import record_digest
from patchkit.lockfile import load_lock

STAGE_PREFIX = ".patchkit-unpack-"   # patchkit.pristine.STAGE_PREFIX: where an unpack in progress lives


def _record_mismatches(site, wheel, root) -> list[str]:
    """Files the wheel's RECORD lists under root/ and its dist-info that are missing or differ in site."""
    info = wheel.dist_info()
    rows = csv.reader(io.StringIO(wheel.read(f"{info}/RECORD").decode()))
    bad = []
    for name, digest, _size in rows:
        if not name.startswith((root + "/", info + "/")) or not digest:
            continue
        f = site / name
        if not f.is_file() or record_digest(f.read_bytes()) != digest:
            bad.append(name)
    return bad


def test_killed_unpack_of_the_real_wheel_is_never_taken_for_a_tree(tmp_path):
    from tests.conftest import pristine_wheel

    repo = copy_repo_data(tmp_path / "repo")
    lock = load_lock(repo / "pin.lock")
    first = next(iter(lock.upstreams.values()))
    site = repo / "build" / f"site-{lock.line}"
    killed = cli(repo, "apply", env={"PATCHKIT_TEST_FAULT": "unpack:kill:1500"})
    assert killed.returncode == 137, killed.stderr
    assert not (site / first.root).exists(), "a half-unpacked package root must never appear"
    staging = [p.name for p in site.iterdir() if p.name.startswith(STAGE_PREFIX)]
    assert staging, "the interrupted unpack's staging directory is where the files went"

    status = cli(repo, "status")
    assert status.returncode == 1 and "applied" not in status.stdout.splitlines()[-1], status.stdout
    assert f"{first.name}" in status.stdout and "(not in target)" in status.stdout
    assert any(s in status.stdout for s in staging), "status reports the staging directory left behind"

    again = cli(repo, "apply")
    assert again.returncode == 0, again.stderr
    assert not [p for p in site.iterdir() if p.name.startswith(STAGE_PREFIX)]
    assert cli(repo, "status").stdout.rstrip().endswith(": applied")
    assert cli(repo, "revert").returncode == 0
    for name, up in lock.upstreams.items():
        assert _record_mismatches(site, pristine_wheel(name), up.root) == [], name


@pytest.mark.parametrize("damage", ["digest", "unlisted", "missing"])
def test_wheel_that_disagrees_with_its_record_is_not_unpacked(tmp_path, damage):
    repo, env = demo_repo(tmp_path / "r")
    files = dict(RELEASES["1.0"])
    if damage == "digest":
        wheel = make_wheel(tmp_path / "w", "1.0", files,
                           record_override={f"{PACKAGE}/util.py": f"{PACKAGE}/util.py,sha256=AAAA,3"})
    elif damage == "unlisted":
        wheel = make_wheel(tmp_path / "w", "1.0", files, extra={f"{PACKAGE}/sneaky.py": b"x = 1\n"})
    else:
        full = make_wheel(tmp_path / "full", "1.0", files)
        import zipfile
        with zipfile.ZipFile(full) as src, zipfile.ZipFile(tmp_path / "w.whl", "w") as dst:
            for info in src.infolist():
                if info.filename != f"{PACKAGE}/core.py":
                    dst.writestr(info, src.read(info))
        (tmp_path / "w").mkdir()
        wheel = shutil.move(tmp_path / "w.whl", tmp_path / "w" / full.name)
    shutil.copy2(wheel, tmp_path / "r" / "cache" / "artifacts" / wheel.name)
    (repo / "pin.lock").write_text(pin_lock(wheel, "1.0"))
    proc = cli(repo, "apply", env=env)
    assert one_line_error(proc) and "RECORD" in proc.stderr, proc.stderr
    site = repo / "build" / "site-1.0"
    assert [p.name for p in site.iterdir()] == [], "nothing unpacked, no staging directory left"
