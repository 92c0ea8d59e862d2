"""Journaled, all-or-nothing file writes into a target directory.

Before the first write a journal names every file and the hash it goes from and to. Each file is
replaced atomically (write to a temp file, rename). An error restores every file already written; a
killed process leaves the journal behind, which `status` reports and the next apply/revert finishes.

Both bookkeeping files are data, not trusted: the journal only marks a tree as interrupted (recovery
works from the files' own states), and `.patchkit-written.json` names a digest as ours only while the
file still has the size and mtime it had when we wrote it, and only for a path confined to the target.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from . import PatchkitError, faults, fsio
from .paths import clean_relpath
from .hashing import sha256_bytes

JOURNAL = ".patchkit-journal.json"
WRITTEN = ".patchkit-written.json"   # every digest this tool has written per file, so a later series can replace them
TMP_SUFFIX = fsio.TMP_SUFFIX
_DIGEST_RE = re.compile(r"[0-9a-f]{64}")


@dataclass
class Change:
    path: str                 # relative to the target
    before: bytes | None      # None = absent
    after: bytes | None


def journal_path(target: Path) -> Path:
    return Path(target) / JOURNAL


def _bookkeeping_text(path: Path) -> str | None:
    """The text of a bookkeeping file, None if absent; one that is not a regular file is refused."""
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise PatchkitError(f"{path}: expected a patchkit bookkeeping file, found "
                            f"{'a symlink' if path.is_symlink() else 'a directory' if path.is_dir() else 'something else'}; "
                            "remove it if no patchkit command is running; nothing written")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"<unreadable: {exc}>"


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


def read_journal(target: Path) -> dict | None:
    """The journal of an interrupted apply/revert, or None. A malformed one still marks the tree as
    interrupted (op 'unknown', 'malformed' says why); apply/revert replace it, nothing reads paths from it."""
    path = journal_path(target)
    text = _bookkeeping_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {"op": "unknown", "files": [], "malformed": f"not valid JSON ({exc})"}
    problem = _journal_problem(data)
    if problem:
        return {"op": "unknown", "files": [], "malformed": problem}
    return data


def stray_temp_files(target: Path, relpaths) -> list[str]:
    """Temp files (`.<name>.patchkit-tmp`) an interrupted write left beside the files we write."""
    target = Path(target)
    dirs = {target} | {(target / rel).parent for rel in relpaths}
    found = set()
    for d in dirs:
        if d.is_dir():
            found.update(f.relative_to(target).as_posix() for f in d.glob(f".*{TMP_SUFFIX}") if f.is_file())
    return sorted(found)


def _atomic_write(path: Path, data: bytes, mode: int | None) -> None:
    fsio.atomic_write(path, data, mode, fault="tmp")


def _set(target: Path, rel: str, data: bytes | None, created_dirs: list[Path]) -> None:
    path = target / rel
    if data is None:
        if path.exists():
            path.unlink()
        parent = path.parent
        while parent != target and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
        return
    missing = []
    d = path.parent
    while not d.exists():
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        d.mkdir()
        created_dirs.append(d)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    _atomic_write(path, data, mode)


def commit(target: Path, op: str, changes: list[Change]) -> None:
    """Write every change or none. Raises PatchkitError after restoring the target on failure."""
    target = Path(target)
    record = {
        "op": op,
        "files": [
            {"path": c.path,
             "before": sha256_bytes(c.before) if c.before is not None else None,
             "after": sha256_bytes(c.after) if c.after is not None else None}
            for c in changes
        ],
    }
    jpath = journal_path(target)
    _atomic_write(jpath, json.dumps(record, indent=1).encode(), None)
    done: list[Change] = []
    created_dirs: list[Path] = []
    try:
        for c in changes:
            faults.point("write", len(done))
            _set(target, c.path, c.after, created_dirs)
            done.append(c)
        faults.point("write", len(done))
    except Exception as exc:
        where = changes[len(done)].path if len(done) < len(changes) else "journal"
        _roll_back(target, op, where, exc, done, created_dirs)
        jpath.unlink(missing_ok=True)
        raise PatchkitError(f"{op} failed while writing {where} ({exc}); target restored to its previous state") from None
    jpath.unlink()


def _roll_back(target: Path, op: str, where: str, cause: Exception, done: list[Change], created_dirs: list[Path]) -> None:
    """Put back every file already written. If that fails too (a full disk), keep the journal so the
    tree reads as interrupted, and say how to finish: apply and revert both work from any mix of states."""
    try:
        for i, c in enumerate(reversed(done)):
            faults.point("rollback", i)
            _set(target, c.path, c.before, [])
        for d in reversed(created_dirs):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    except OSError as exc:
        raise PatchkitError(f"{op} failed while writing {where} ({cause}) and putting the files back failed too "
                            f"({exc}); the journal is kept: free the space, then run apply or revert to finish") from None


def _stat_key(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _read_written(target: Path) -> dict[str, dict]:
    """path -> {"sha256": [digests], "stat": [size, mtime_ns] or None}, validated; refuses a malformed file."""
    path = Path(target) / WRITTEN
    text = _bookkeeping_text(path)
    if text is None:
        return {}
    bad = lambda why: PatchkitError(f"{path}: {why}; nothing written (remove the file if no patchkit command is "
                                    "running: files it vouched for then read as modified)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise bad(f"expected JSON, found {exc}") from None
    legacy = False
    if isinstance(data, dict) and data.get("format") == 2 and isinstance(data.get("files"), dict):
        entries = data["files"]
    elif isinstance(data, dict) and "format" not in data:
        # written before #16: digests without the file's stat (see written_by_us)
        entries = {rel: {"sha256": digests, "stat": None} for rel, digests in data.items()}
        legacy = True
    else:
        raise bad("expected {\"format\": 2, \"files\": {...}}")
    out = {}
    for rel, entry in entries.items():
        clean_relpath(rel, f"{path}: entry")
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), list)
                and all(isinstance(d, str) and _DIGEST_RE.fullmatch(d) for d in entry["sha256"])
                and (entry.get("stat") is None or (isinstance(entry["stat"], list) and len(entry["stat"]) == 2
                                                   and all(type(v) is int for v in entry["stat"])))):
            raise bad(f"entry {rel!r}: expected {{\"sha256\": [digests], \"stat\": [size, mtime_ns]}}")
        out[rel] = {"sha256": list(entry["sha256"]), "stat": entry.get("stat"), "legacy": legacy}
    return out


def written_by_us(target: Path) -> dict[str, set[str]]:
    """path -> digests this tool wrote there. A path whose file changed since we wrote it (size or mtime)
    maps to no digest: bytes someone else put there are never taken for ours, whatever the record says."""
    out = {}
    record = Path(target) / WRITTEN
    for rel, entry in _read_written(target).items():
        now = _stat_key(Path(target) / rel)
        if entry["legacy"]:   # a record from before #16: trusted for files not changed since it was written
            trusted = now is not None and now[1] <= record.stat().st_mtime_ns
        else:
            trusted = entry["stat"] is not None and entry["stat"] == now
        out[rel] = set(entry["sha256"]) if trusted else set()
    return out


def record_written(target: Path, changes: list[Change], replace: bool) -> None:
    """Remember what apply wrote, and each file's size and mtime after the write; a revert
    (replace=True, no changes) forgets everything."""
    path = Path(target) / WRITTEN
    if replace and not changes:
        path.unlink(missing_ok=True)
        return
    known = _read_written(target) if not replace else {}
    vouched = written_by_us(target) if any(e["legacy"] for e in known.values()) else {}
    for rel, entry in known.items():   # upgrading a record from before #16: keep what it still vouches for
        if entry.pop("legacy"):
            entry["stat"] = _stat_key(Path(target) / rel) if vouched.get(rel) else None
    for c in changes:
        entry = known.setdefault(c.path, {"sha256": [], "stat": None})
        entry["sha256"] = sorted(set(entry["sha256"]) | {sha256_bytes(c.after)})
        entry["stat"] = _stat_key(Path(target) / c.path)
    _atomic_write(path, json.dumps({"format": 2, "files": known}, indent=1, sort_keys=True).encode(), None)
