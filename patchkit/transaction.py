"""Journaled, all-or-nothing file writes into a target directory.

Before the first write a journal names every file and the hash it goes from and to. Each file is
replaced atomically (write to a temp file, rename), after checking that it still holds the bytes the
run read: an edit that lands while apply works is never overwritten (the run rolls back and says so).
An error restores every file already written; a killed process leaves the journal behind, which
`status` reports and the next apply/revert finishes. The journal, the record of what was written and the
temp files belong to bookkeeping.TargetFiles.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from . import PatchkitError, faults, fsio
from .bookkeeping import TargetFiles
from .hashing import sha256_bytes


@dataclass
class Change:
    path: str                 # relative to the target
    before: bytes | None      # None = absent
    after: bytes | None


class ChangedMeanwhile(PatchkitError):
    """A file no longer holds the bytes the run read: someone wrote it while the run was working."""


def _recheck(target: Path, c: Change) -> None:
    """Just before replacing a file: it still holds the bytes the plan was made from (no link followed)."""
    path = target / c.path
    try:
        now = fsio.read_regular(path, "a target file")
    except PatchkitError as exc:
        raise ChangedMeanwhile(str(exc)) from None
    if now != c.before:
        found = "absent" if now is None else sha256_bytes(now)[:16]
        expected = "absent" if c.before is None else sha256_bytes(c.before)[:16]
        raise ChangedMeanwhile(f"{path} changed while this run was working: expected sha256 {expected} as read, "
                               f"found {found}; the edit is kept")


def _atomic_write(path: Path, data: bytes, mode: int | None) -> None:
    fsio.atomic_write(path, data, mode, fault="tmp")


def _set(target: Path, rel: str, data: bytes | None, created_dirs: list[Path]) -> None:
    path = target / rel
    if data is None:
        if os.path.lexists(path):
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
    try:
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None
    except FileNotFoundError:
        mode = None
    _atomic_write(path, data, mode)


def commit(target: Path, op: str, changes: list[Change]) -> None:
    """Write every change or none. Raises PatchkitError after restoring the target on failure."""
    target = Path(target)
    files = TargetFiles(target)
    files.begin(op, [{"path": c.path,
                      "before": sha256_bytes(c.before) if c.before is not None else None,
                      "after": sha256_bytes(c.after) if c.after is not None else None}
                     for c in changes])
    done: list[Change] = []
    created_dirs: list[Path] = []
    try:
        for c in changes:
            faults.point("write", len(done))
            _recheck(target, c)
            _set(target, c.path, c.after, created_dirs)
            done.append(c)
        faults.point("write", len(done))
    except Exception as exc:
        where = str(target / changes[len(done)].path) if len(done) < len(changes) else "journal"
        _roll_back(target, op, where, exc, done, created_dirs)
        files.end()
        raise PatchkitError(f"{op} failed while writing {where} ({_reason(exc)}); target restored to its previous "
                            "state") from None
    files.end()


def _reason(exc: Exception) -> str:
    """Why a write failed, without repeating the path the message names (a full disk says what to do)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + ("; the disk is full: free space there and run the command again"
                               if exc.errno == errno.ENOSPC else "")
    return str(exc)


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
