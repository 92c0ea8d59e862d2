"""Journaled, all-or-nothing file writes into a target directory.

Before the first write a journal names every file and the hash it goes from and to. Each file is
replaced atomically (write to a temp file, rename). An error restores every file already written; a
killed process leaves the journal behind, which `status` reports and the next apply/revert finishes.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from . import PatchkitError
from .pristine import sha256_bytes

JOURNAL = ".patchkit-journal.json"
WRITTEN = ".patchkit-written.json"   # every digest this tool has written per file, so a later series can replace them


@dataclass
class Change:
    path: str                 # relative to the target
    before: bytes | None      # None = absent
    after: bytes | None


def journal_path(target: Path) -> Path:
    return Path(target) / JOURNAL


def read_journal(target: Path) -> dict | None:
    path = journal_path(target)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"op": "unknown", "files": []}


def _atomic_write(path: Path, data: bytes, mode: int | None) -> None:
    tmp = path.with_name(f".{path.name}.patchkit-tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def _fault_hook(done: int) -> None:
    """Fault injection for the recovery tests: PATCHKIT_TEST_FAULT=kill:N or raise:N."""
    spec = os.environ.get("PATCHKIT_TEST_FAULT")
    if not spec:
        return
    kind, _, count = spec.partition(":")
    if done == int(count or 0):
        if kind == "kill":
            os._exit(137)
        raise OSError(f"injected fault after {done} writes")


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
            _fault_hook(len(done))
            _set(target, c.path, c.after, created_dirs)
            done.append(c)
        _fault_hook(len(done))
    except Exception as exc:
        for c in reversed(done):
            _set(target, c.path, c.before, [])
        for d in reversed(created_dirs):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        jpath.unlink(missing_ok=True)
        where = changes[len(done)].path if len(done) < len(changes) else "journal"
        raise PatchkitError(f"{op} failed while writing {where} ({exc}); target restored to its previous state") from None
    jpath.unlink()


def written_by_us(target: Path) -> dict[str, set[str]]:
    """path -> digests this tool wrote there (recorded after each apply, plus an interrupted journal's)."""
    out: dict[str, set[str]] = {}
    path = Path(target) / WRITTEN
    if path.exists():
        try:
            for rel, digests in json.loads(path.read_text()).items():
                out.setdefault(rel, set()).update(digests)
        except (OSError, ValueError):
            pass
    journal = read_journal(target)
    for f in (journal or {}).get("files", []):
        if f.get("after"):
            out.setdefault(f["path"], set()).add(f["after"])
    return out


def record_written(target: Path, changes: list[Change], replace: bool) -> None:
    """Remember what apply wrote; a revert (replace=True, no changes) forgets everything."""
    path = Path(target) / WRITTEN
    if replace and not changes:
        path.unlink(missing_ok=True)
        return
    known = {k: sorted(v) for k, v in written_by_us(target).items()} if not replace else {}
    for c in changes:
        digests = set(known.get(c.path, [])) | {sha256_bytes(c.after)}
        known[c.path] = sorted(digests)
    _atomic_write(path, json.dumps(known, indent=1, sort_keys=True).encode(), None)
