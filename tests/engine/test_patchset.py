"""The patch set's version per release line (pin.lock [patchset."LINE"], CHANGELOG.md) and the LICENSE.

`check` fails when a line's series or overlay changes without a new version whose CHANGELOG entry records the
new series digest; `apply.py --version` and `status` print line, version and digest.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import PatchkitError
from patchkit.engine import Engine
from patchkit.lockfile import load_lock
from patchkit.patchset import changelog_entries
from tests.engine_fixtures import REPO, copy_repo_data
from tests.patchset_fixtures import release

# The 0.5.14 line's current version and the next one (the tests below bump it in a copy of the repository).
CURRENT = load_lock(REPO / "pin.lock", "0.5.14").patchsets["0.5.14"]
NEXT = ".".join(CURRENT.split(".")[:2] + [str(int(CURRENT.split(".")[2]) + 1)])

# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def cli(repo: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(repo / "apply.py"), *args], capture_output=True, text=True,
                          env={**os.environ})


def patch_set_row(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("patch set "))


@pytest.fixture
def repo(tmp_path) -> Path:
    return copy_repo_data(tmp_path / "repo")


def test_license_is_the_full_apache_2_0_text():
    assert hashlib.sha256((REPO / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256


def test_the_shipped_set_is_a_released_version():
    lock = load_lock(REPO / "pin.lock")
    assert lock.line in lock.patchsets, lock.patchsets
    r = cli(REPO, "check")
    assert r.returncode == 0, r.stdout + r.stderr
    row = patch_set_row(r.stdout)
    assert f"{lock.line} {lock.patchsets[lock.line]}" in row and " ok " in row, row


def test_version_prints_line_version_and_the_sha256sum_digest_of_the_series_files():
    r = cli(REPO, "--version")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lock = load_lock(REPO / "pin.lock")
    # the digest, recomputed here as a user would: sha256sum of each series listing, patch and claimed overlay file
    lines = []
    for name in lock.upstreams:
        listing = REPO / "patches" / "0.5.14" / name / "series"
        patches = [n for n in listing.read_text().split() if not n.startswith("#")]
        files = [f"patches/{lock.line}/{name}/series"] + [f"patches/{lock.line}/{name}/{n}" for n in patches]
        claimed = sorted({line.split(": ", 1)[1] for n in patches
                          for line in (REPO / "patches" / "0.5.14" / name / n).read_text().splitlines() if line.startswith("Overlay: ")})
        files += [f"overlay/{lock.line}/{rel}" for rel in claimed]
        lines += [f"{hashlib.sha256((REPO / f).read_bytes()).hexdigest()}  {f}\n" for f in files]
    digest = hashlib.sha256("".join(lines).encode()).hexdigest()
    assert r.stdout.startswith(f"patch set: line {lock.line}, version {lock.patchsets[lock.line]}, series digest {digest} ")
    entries = [e for e in changelog_entries((REPO / "CHANGELOG.md").read_text()) if e[:2] == (lock.line, lock.patchsets[lock.line])]
    assert [e[2] for e in entries] == [digest]


def test_check_is_red_when_a_patch_byte_changes_without_a_bump_green_after_the_bump_and_entry(repo):
    assert cli(repo, "check").returncode == 0
    patch = sorted((repo / "patches" / "0.5.14" / "sglang").glob("*.patch"))[0]
    text = patch.read_text()
    patch.write_text(text.replace("\n\n", "\n\nA changed word.\n\n", 1))    # one more line of message: still applies
    r = cli(repo, "check")
    assert r.returncode == 1
    row = patch_set_row(r.stdout)
    assert "FAIL" in row and f"series or overlay changed since 0.5.14 {CURRENT}" in row, row
    # every other row is still fine: the failure is the missing version, nothing else
    assert [l for l in r.stdout.splitlines()[3:] if " FAIL " in l] == [row]

    # a version bump without a CHANGELOG entry: still red, naming the entry it needs
    lock = repo / "pin.lock"
    lock.write_text(lock.read_text().replace(f'[line."0.5.14".patchset]\nversion = "{CURRENT}"',
                                             f'[line."0.5.14".patchset]\nversion = "{NEXT}"'))
    r = cli(repo, "check")
    assert r.returncode == 1 and f"expected an entry '### {NEXT}' under '## 0.5.14 line', found none" in patch_set_row(r.stdout)

    digest = release(repo, NEXT)
    r = cli(repo, "check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"records series digest {digest[:16]}" in patch_set_row(r.stdout)
    assert f"version {NEXT}" in cli(repo, "--version").stdout


def test_an_overlay_byte_changed_without_a_bump_is_red(repo):
    overlay = sorted((repo / "overlay" / "0.5.14").rglob("*.py"))[0]
    overlay.write_bytes(overlay.read_bytes() + b"\n")
    r = cli(repo, "check")
    assert r.returncode == 1 and "series or overlay changed" in patch_set_row(r.stdout)


def test_a_digest_rewritten_in_place_without_a_new_version_is_red(repo):
    """Bumping only the digest line of the released entry leaves two versions with one number: refused."""
    patch = sorted((repo / "patches" / "0.5.14" / "sglang").glob("*.patch"))[0]
    patch.write_text(patch.read_text().replace("\n\n", "\n\nA changed word.\n\n", 1))
    release(repo, CURRENT)        # a second '### CURRENT' entry under the line
    r = cli(repo, "check")
    assert r.returncode == 1 and f"expected one entry for 0.5.14 {CURRENT}, found 2" in patch_set_row(r.stdout)


def test_a_new_release_line_needs_its_own_version(repo):
    lock = repo / "pin.lock"
    lock.write_text(re.sub(r'\[line\."[^"]+"\.patchset\]\nversion = "[^"]+"\n', '', lock.read_text()))
    r = cli(repo, "check")
    assert r.returncode == 0 and "unversioned" in r.stdout, r.stdout   # no line versioned: a warning
    text = lock.read_text()
    lock.write_text(text + '\n[line."0.5.13".upstream.sglang]\n' + text.split("[line.\"0.5.14\".upstream.sglang]\n")[1]
                    .split("\n\n")[0].replace("0.5.14", "0.5.13") + '\n\n[line."0.5.13".patchset]\nversion = "0.1.0"\n')
    r = cli(repo, "check", "--line", "0.5.14")
    assert r.returncode == 1
    assert ('expected a [line."0.5.14".patchset] version for release line 0.5.14, found none (versioned lines: 0.5.13)'
            in r.stdout), r.stdout


@pytest.mark.parametrize("table, expected", [
    ('[line."0.5.14".patchset]\nversion = 1\n', 'version: expected a string, found an integer 1'),
    ('[line."0.5.14".patchset]\nversion = "0.1.0"\ndigest = "x"\n', "has unknown key 'digest' (expected one of: version)"),
    ('[line."0.5.14".patchset]\n', 'version: expected a version such as "0.1.0", found \'none\''),
    ('[line."a b".patchset]\nversion = "1"\n', "expected a release line such as"),
])
def test_a_malformed_patchset_table_is_refused_in_one_line(repo, table, expected):
    lock = repo / "pin.lock"
    text = lock.read_text()
    lock.write_text(text[:text.index('[line."0.5.14".patchset]')] + table)
    with pytest.raises(PatchkitError, match="^.*pin.lock: .*") as err:
        load_lock(lock)
    assert expected in str(err.value) and "\n" not in str(err.value), err.value
    r = cli(repo, "check")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and expected in r.stderr, r.stderr


def test_status_prints_the_patch_set(tmp_path):
    r = cli(REPO, "status", "--target", str(tmp_path))
    ident = Engine.from_repo(REPO).patch_set()
    assert f"patch set: line {ident.line}, version {ident.version}, series digest {ident.digest[:16]}" in r.stdout
