"""Undo a finished rebase: its backup is kept in build/rebase-done/ until the next rebase finishes.

`keep_undo` moves the verified backup there with a record (WRITTEN.json) of what the refresh wrote;
`undo` (`rebase --abort` with no rebase in progress) restores the backup, but only while pin.lock,
patches/ and overlay/ still hold exactly what the rebase wrote: later edits are never overwritten.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .. import PatchkitError, jsonio
from ..fsio import atomic_write
from ..hashing import sha256_file
from .backup import _data_files, backup_problem, restore

WRITTEN = "WRITTEN.json"


def done_dir(engine) -> Path:
    return engine.build_root / "rebase-done"


def _digests(repo: Path) -> dict[str, str]:
    return {rel: sha256_file(f) for rel, f in sorted(_data_files(repo).items())}


def keep_undo(repo: Path, base: Path, done: Path) -> None:
    """Replace build/rebase-done with this rebase's backup and the record of what it wrote; remove `base`."""
    staged = base / "undo"
    staged.mkdir()
    (base / "backup").replace(staged / "backup")
    atomic_write(staged / WRITTEN, json.dumps({"format": 1, "files": _digests(repo)}, indent=1).encode())
    if done.exists():
        shutil.rmtree(done)
    staged.replace(done)
    shutil.rmtree(base)


def _written_problem(data) -> str | None:
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return "expected a 'files' table (path -> sha256), found none"
    return None


def undo(repo: Path, done: Path) -> int:
    if not done.exists():
        print("rebase --abort: no rebase in progress, and no finished rebase to undo")
        return 0
    problem = backup_problem(done / "backup")
    if problem:
        raise PatchkitError(f"rebase --abort: the finished rebase's backup is not complete ({problem}); nothing "
                            f"restored: undo it from version control (git checkout -- pin.lock patches overlay)")
    try:
        written = jsonio.read(done / WRITTEN, "the record of a finished rebase", _written_problem)
    except PatchkitError as exc:
        raise PatchkitError(f"rebase --abort: {exc}; nothing restored") from None
    if written is None:
        raise PatchkitError(f"rebase --abort: {done / WRITTEN} is missing; nothing restored")
    written = written["files"]
    now = _digests(repo)
    changed = sorted(k for k in set(now) | set(written) if now.get(k) != written.get(k))
    if changed:
        raise PatchkitError(f"rebase --abort: expected pin.lock, patches/ and overlay/ as the finished rebase wrote "
                            f"them, found {changed[0]} changed since; nothing restored (the backup is in "
                            f"{done / 'backup'})")
    restore(repo, done / "backup")
    shutil.rmtree(done)
    print(f"rebase --abort: undid the finished rebase: pin.lock, patches/ and overlay/ restored from its verified "
          f"backup; removed {done}")
    return 0
