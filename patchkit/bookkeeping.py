"""The files patchkit keeps for itself beside what it patches: one owner per directory.

A target directory holds its lock (`.patchkit-lock`), the journal of a run in progress
(`.patchkit-journal.json`), the record of what patchkit wrote (`.patchkit-written.json`), the attestation
manifest (`.patchkit-attestation.json`, what it says: attestation.py) and, while a write is under way,
`.NAME.patchkit-tmp` files. The repository's `build/` holds the repository lock.
Every one of them is reached only through `OwnedFiles`: written with fsio.atomic_write (never through a
link), read with fsio.read_owned (a regular file of this user, no link followed, size-limited) and
parsed with jsonio (depth-limited, schema-checked). Anything else at one of these names is a one-line
error naming the path. To add a file, add its name to the class's NAMES and read or write it by key.

The journal and the record are data, not trusted: the journal only marks a tree as interrupted
(recovery works from the files' own states), and the record names a digest as ours only while the file
still has the size and mtime it had when we wrote it, and only for a path confined to the target.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from . import PatchkitError, fsio, jsonio
from .hashing import sha256_bytes
from .lock import live_holder, locked
from .paths import clean_relpath

_DIGEST_RE = re.compile(r"[0-9a-f]{64}")


class OwnedFiles:
    """patchkit's own files in one directory, by key (NAMES: key -> file name)."""

    NAMES: dict[str, str] = {}
    WHAT: dict[str, str] = {}        # key -> how messages name the file
    LIMIT = 16 << 20                 # bytes: no bookkeeping file of ours comes near it

    def __init__(self, directory: Path, label: str):
        self.directory = Path(directory)
        self.label = label           # what the lock protects, in messages

    def path(self, key: str) -> Path:
        return self.directory / self.NAMES[key]

    def _what(self, key: str) -> str:
        return self.WHAT.get(key, f"patchkit's {self.NAMES[key]}")

    def read_bytes(self, key: str) -> bytes | None:
        try:
            return fsio.read_owned(self.path(key), self._what(key), limit=self.LIMIT)
        except PatchkitError as exc:
            raise PatchkitError(f"{exc}; nothing written") from None

    def read_json(self, key: str, schema=None):
        """The file's JSON value (None if absent); a malformed one is a PatchkitError."""
        raw = self.read_bytes(key)
        return None if raw is None else jsonio.parse(raw, self.path(key), schema, max_bytes=self.LIMIT)

    def write_json(self, key: str, value) -> None:
        fsio.atomic_write(self.path(key), _encode(value), fault="tmp")

    def refresh_json(self, key: str, value) -> bool:
        """Write `value` unless the file already holds exactly it (a malformed one of ours is replaced; anything
        but a regular file of ours is refused); True if it wrote."""
        if self.read_bytes(key) == _encode(value):
            return False
        self.write_json(key, value)
        return True

    def refuse_if_foreign(self, key: str) -> None:
        """Anything but a regular file of ours (or nothing) at the name is a one-line error: called before a
        command's first write, so a refusal leaves the tree as it was."""
        self.read_bytes(key)

    def remove(self, key: str) -> None:
        """Remove the entry whatever its type (a link is removed, never followed); absent is fine."""
        fsio.remove_stale([self.path(key)])

    def lock(self, command: str, log=None):
        """Hold this directory's lock while `command` runs (lock.locked: flock + holder pid)."""
        kwargs = {"log": log} if log else {}
        return locked(self.path("lock"), self.label, command, **kwargs)

    def live_holder(self) -> tuple[int, str] | None:
        """(pid, command) of another process holding this directory's lock now (lock.live_holder), else None."""
        return live_holder(self.path("lock"))


class RepoFiles(OwnedFiles):
    """The repository's build directory: the lock over its patch data and rebase state."""

    NAMES = {"lock": ".patchkit-repo-lock"}

    def __init__(self, build_root: Path, repo: Path):
        Path(build_root).mkdir(parents=True, exist_ok=True)
        super().__init__(build_root, f"the patch data and rebase state of {repo}")
        self.WHAT = {"lock": f"the lock file of {self.label}"}


class TargetFiles(OwnedFiles):
    """A target directory's lock, journal, written record, attestation manifest and temp files."""

    NAMES = {"lock": ".patchkit-lock", "journal": ".patchkit-journal.json", "written": ".patchkit-written.json",
             "attestation": ".patchkit-attestation.json"}
    WHAT = {"journal": "a patchkit journal", "written": "patchkit's record of written files",
            "attestation": "an attestation manifest"}

    def __init__(self, target: Path):
        super().__init__(target, f"target {target}")
        self.WHAT = {**self.WHAT, "lock": f"the lock file of {self.label}"}

    # -- temp files -------------------------------------------------------------------------
    def stale_temps(self, relpaths) -> list[str]:
        """Temp entries of any type (a dangling link too) an interrupted write left beside our files."""
        dirs = {self.directory} | {(self.directory / rel).parent for rel in relpaths}
        found = set()
        for d in dirs:
            found.update(p.relative_to(self.directory).as_posix() for p in fsio.stale_temp_files(d))
        return sorted(found)

    # -- the journal ------------------------------------------------------------------------
    def journal(self) -> dict | None:
        """The journal of an interrupted apply/revert, or None. A malformed one (bad JSON, too deep, the
        wrong shape) still marks the tree as interrupted (op 'unknown', 'malformed' says why); apply/revert
        replace it, nothing reads paths from it. One that is not a regular file of ours stops everything."""
        raw = self.read_bytes("journal")
        if raw is None:
            return None
        try:
            return jsonio.parse(raw, self.path("journal"), _journal_problem, max_bytes=self.LIMIT)
        except PatchkitError as exc:
            return {"op": "unknown", "files": [], "malformed": str(exc).split(": ", 1)[-1]}

    def begin(self, op: str, files: list[dict]) -> None:
        self.write_json("journal", {"op": op, "files": files})

    def end(self) -> None:
        self.remove("journal")

    # -- the record of what patchkit wrote --------------------------------------------------
    def _stat_key(self, rel: str) -> list[int] | None:
        try:
            st = os.lstat(self.directory / rel)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return [st.st_size, st.st_mtime_ns]

    def _written(self) -> dict[str, dict]:
        """path -> {"sha256": [digests], "stat": [size, mtime_ns] or None, "legacy"}, validated."""
        path = self.path("written")
        raw = self.read_bytes("written")      # not a regular file of ours: its own one-line error
        if raw is None:
            return {}
        try:
            data = jsonio.parse(raw, path, max_bytes=self.LIMIT)
        except PatchkitError as exc:
            raise _bad_record(path, str(exc).split(": ", 1)[-1]) from None
        legacy = False
        if isinstance(data, dict) and data.get("format") == 2 and isinstance(data.get("files"), dict):
            entries = data["files"]
        elif isinstance(data, dict) and "format" not in data:
            # written before #16: digests without the file's stat (see written_by_us)
            entries = {rel: {"sha256": digests, "stat": None} for rel, digests in data.items()}
            legacy = True
        else:
            raise _bad_record(path, "expected {\"format\": 2, \"files\": {...}}")
        out = {}
        for rel, entry in entries.items():
            clean_relpath(rel, f"{path}: entry")
            if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), list)
                    and all(isinstance(d, str) and _DIGEST_RE.fullmatch(d) for d in entry["sha256"])
                    and (entry.get("stat") is None or (isinstance(entry["stat"], list) and len(entry["stat"]) == 2
                                                       and all(type(v) is int for v in entry["stat"])))):
                raise _bad_record(path, f"entry {rel!r}: expected {{\"sha256\": [digests], \"stat\": [size, mtime_ns]}}")
            out[rel] = {"sha256": list(entry["sha256"]), "stat": entry.get("stat"), "legacy": legacy}
        return out

    def written_by_us(self) -> dict[str, set[str]]:
        """path -> digests this tool wrote there. A path whose file changed since we wrote it (size or mtime)
        maps to no digest: bytes someone else put there are never taken for ours, whatever the record says."""
        out = {}
        entries = self._written()
        for rel, entry in entries.items():
            now = self._stat_key(rel)
            if entry["legacy"]:   # a record from before #16: trusted for files not changed since it was written
                trusted = now is not None and now[1] <= os.lstat(self.path("written")).st_mtime_ns
            else:
                trusted = entry["stat"] is not None and entry["stat"] == now
            out[rel] = set(entry["sha256"]) if trusted else set()
        return out

    def record(self, written: list[tuple[str, bytes]], replace: bool) -> None:
        """Remember what apply wrote (path, bytes), and each file's size and mtime after the write; a revert
        (replace=True, nothing written) forgets everything."""
        if replace and not written:
            self.remove("written")
            return
        known = self._written() if not replace else {}
        vouched = self.written_by_us() if any(e["legacy"] for e in known.values()) else {}
        for rel, entry in known.items():   # upgrading a record from before #16: keep what it still vouches for
            if entry.pop("legacy"):
                entry["stat"] = self._stat_key(rel) if vouched.get(rel) else None
        for rel, data in written:
            entry = known.setdefault(rel, {"sha256": [], "stat": None})
            entry["sha256"] = sorted(set(entry["sha256"]) | {sha256_bytes(data)})
            entry["stat"] = self._stat_key(rel)
        self.write_json("written", {"format": 2, "files": known})


def _encode(value) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()


def _bad_record(path: Path, why: str) -> PatchkitError:
    return PatchkitError(f"{path}: {why}; nothing written (remove the file if no patchkit command is "
                         "running: files it vouched for then read as modified)")


def _journal_problem(data) -> str | None:
    if not isinstance(data, dict) or not isinstance(data.get("op"), str) or not isinstance(data.get("files"), list):
        return "expected an object with 'op' (a string) and 'files' (a list)"
    for f in data["files"]:
        if not isinstance(f, dict) or set(f) != {"path", "before", "after"}:
            return "expected each file as {path, before, after}"
        try:
            clean_relpath(f["path"], "path")
        except PatchkitError as exc:
            return str(exc)
        if any(v is not None and not (isinstance(v, str) and _DIGEST_RE.fullmatch(v)) for v in (f["before"], f["after"])):
            return "expected before/after as sha256 digests or null"
    return None
