"""The repository data a rebase may rewrite (pin.lock, patches/, overlay/): a backup and an exact restore.

The backup is complete only once its manifest (every file and its sha256) is written, last. A restore
first checks the backup against it, so a backup cut short (a killed rebase) is never taken for one.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import PatchkitError, faults, jsonio
from ..fsio import atomic_write
from ..hashing import sha256_file
from ..paths import clean_relpath

MANIFEST = "MANIFEST.json"
DATA_DIRS = ("patches", "overlay")


def _files(root: Path) -> dict[str, Path]:
    if not root.is_dir():
        return {}
    return {f.relative_to(root).as_posix(): f for f in root.rglob("*")
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"}


def _data_files(repo: Path) -> dict[str, Path]:
    out = {"pin.lock": repo / "pin.lock"}
    for d in DATA_DIRS:
        out.update({f"{d}/{rel}": f for rel, f in _files(repo / d).items()})
    return out


def snapshot(repo: Path, dest: Path) -> None:
    """Copy pin.lock, patches/ and overlay/ to dest, then write the manifest that makes it a backup."""
    dest.mkdir(parents=True)
    for d in DATA_DIRS:
        (dest / d).mkdir()
    manifest = {}
    for n, (rel, f) in enumerate(sorted(_data_files(repo).items())):
        faults.point("backup", n)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest / rel, f.read_bytes())
        manifest[rel] = sha256_file(dest / rel)
    atomic_write(dest / MANIFEST, json.dumps({"format": 1, "files": manifest}, indent=1, sort_keys=True).encode(),
                 fault="backup-manifest")


def _manifest_problem(data) -> str | None:
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or "pin.lock" not in files or not all(isinstance(v, str) for v in files.values()):
        return "expected a 'files' table naming pin.lock (path -> sha256), found none"
    return None


def backup_problem(backup: Path) -> str | None:
    """Why `backup` is not a complete backup (None when every file it lists is there, intact, and nothing else)."""
    try:
        data = jsonio.read(backup / MANIFEST, "a rebase backup manifest", _manifest_problem)
    except PatchkitError as exc:    # bounded and schema-checked: a crafted file is a reason, never a traceback
        return str(exc)
    if data is None:
        return f"{backup / MANIFEST} is missing: the backup was never finished"
    files = data["files"]
    for rel, digest in files.items():
        try:
            clean_relpath(rel, f"{backup / MANIFEST}")
        except PatchkitError as exc:
            return str(exc)
        if rel != "pin.lock" and rel.split("/")[0] not in DATA_DIRS:
            return f"{backup / MANIFEST}: expected paths under {' or '.join(DATA_DIRS)}, found {rel!r}"
        if not (backup / rel).is_file() or sha256_file(backup / rel) != digest:
            return f"{backup / rel} is missing or differs from the manifest"
    extra = sorted(set(_data_files(backup)) - set(files))
    if extra:
        return f"{backup / extra[0]} is not in the manifest"
    return None


def mirror(src: Path, dst: Path) -> None:
    """Make dst hold exactly src's files (ignoring bytecode), writing only what differs."""
    want, have = _files(src), _files(dst)
    for rel, f in have.items():
        if rel not in want:
            f.unlink()
    for rel, f in want.items():
        target = dst / rel
        if rel not in have or target.read_bytes() != f.read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, f.read_bytes())
    for d in sorted((p for p in dst.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()


def restore(repo: Path, backup: Path) -> None:
    """Put the backed-up data back byte for byte; refuses a backup that its manifest does not vouch for."""
    problem = backup_problem(backup)
    if problem:
        raise PatchkitError(f"cannot restore from {backup}: {problem}")
    atomic_write(repo / "pin.lock", (backup / "pin.lock").read_bytes(), fault="pin-lock")
    for n, d in enumerate(DATA_DIRS):
        faults.point("restore", n)
        (repo / d).mkdir(exist_ok=True)
        mirror(backup / d, repo / d)
