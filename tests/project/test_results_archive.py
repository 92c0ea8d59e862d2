"""Raw results archived out of the working tree (bench/runs/INDEX.md, "Archived") stay recorded and verifiable:
the commit INDEX.md names holds exactly the files ARCHIVED.sha256 lists for each archived entry, with those hashes.

Needs the repository's history (a full clone, as CI's); a shallow clone fails here with what to do.
"""
from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

from tests.saved_results import ARCHIVED_SUMS, RESULTS, index_parts

REPO = RESULTS.parents[1]
# Where the archived entries lived in the commit that holds them (the run folders were bench/results/ then).
ARCHIVED_AT = "bench/results"


def git(*args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", str(REPO), *args], input=data, capture_output=True, check=True).stdout


def recorded_sums() -> dict[str, str]:
    sums = {}
    for n, line in enumerate(ARCHIVED_SUMS.read_text().splitlines(), 1):
        m = re.fullmatch(rf"([0-9a-f]{{64}})  ({ARCHIVED_AT}/\S+)", line)
        assert m, f"{ARCHIVED_SUMS.name}:{n}: expected '<sha256>  {ARCHIVED_AT}/<path>', found {line!r}"
        sums[m.group(2)] = m.group(1)
    return sums


def archive_commit() -> str:
    found = set(re.findall(rf"git archive ([0-9a-f]{{7,40}}) {ARCHIVED_AT}/", index_parts()[1]))
    assert len(found) == 1, f"bench/runs/INDEX.md: expected one commit in the archive's restore command, found {found}"
    commit = found.pop()
    probe = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    assert probe.returncode == 0, (f"expected commit {commit} (bench/runs/INDEX.md, Archived) in this clone's history, "
                                   "found none: a shallow clone? git fetch --unshallow")
    return commit


def blobs_sha256(commit: str, paths: list[str]) -> dict[str, str]:
    """sha256 of each path's content at `commit`, read in one `git cat-file --batch`."""
    out = git("cat-file", "--batch", data="".join(f"{commit}:{p}\n" for p in paths).encode())
    sums, pos = {}, 0
    for path in paths:
        header_end = out.index(b"\n", pos)
        _, kind, size = out[pos:header_end].decode().split()
        assert kind == "blob", f"{commit}:{path}: expected a file, found {kind}"
        body = out[header_end + 1:header_end + 1 + int(size)]
        sums[path] = hashlib.sha256(body).hexdigest()
        pos = header_end + 1 + int(size) + 1
    return sums


def test_archived_entries_are_in_git_exactly_as_their_sums_record():
    archived = [name.rstrip("/") for name in re.findall(r"^\| `([^`]+)` \|", index_parts()[1], re.M)]
    assert archived, "bench/runs/INDEX.md: expected the Archived table, found no entry"
    sums = recorded_sums()
    by_entry = {name: sorted(p for p in sums if p.startswith(f"{ARCHIVED_AT}/{name}/")) for name in archived}
    assert all(by_entry.values()), f"{ARCHIVED_SUMS.name}: expected files for every archived entry, found none for " \
                                   f"{[n for n, files in by_entry.items() if not files]}"
    assert sorted(sums) == sorted(p for files in by_entry.values() for p in files), \
        f"{ARCHIVED_SUMS.name}: expected only files of archived entries, found others"
    commit = archive_commit()
    in_git = git("ls-tree", "-r", "--name-only", commit, "--", *[f"{ARCHIVED_AT}/{n}" for n in archived]).decode().split()
    assert sorted(in_git) == sorted(sums), f"{commit}: expected exactly the files {ARCHIVED_SUMS.name} lists, found " \
                                           f"{sorted(set(in_git) ^ set(sums))[:3]} differing"
    found = blobs_sha256(commit, sorted(sums))
    wrong = [p for p in sums if found[p] != sums[p]]
    assert not wrong, f"{ARCHIVED_SUMS.name}: expected the recorded sha256 at {commit}, found another for {wrong[:3]}"
