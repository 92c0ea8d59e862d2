"""Inspect a target directory (an unpacked wheel tree or a site-packages): versions, file states, writability."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from . import PatchkitError
from .hashing import sha256_bytes
from .names import canonical_name


def installed_version(target: Path, package: str) -> tuple[str, str] | None:
    """(version, dist-info dir name) of `package` installed in target, if it has a dist-info."""
    for meta in sorted(Path(target).glob("*.dist-info/METADATA")):
        name = version = None
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Name:"):
                name = line[5:].strip()
            elif line.startswith("Version:"):
                version = line[8:].strip()
            elif not line:
                break
        if name and canonical_name(name) == canonical_name(package):
            return version, meta.parent.name
    return None


def file_digest(path: Path) -> str | None:
    try:
        return sha256_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def require_directory(target: Path) -> Path:
    target = Path(target)
    if not target.exists():
        raise PatchkitError(f"target {target}: expected a directory, found nothing there")
    if not target.is_dir():
        raise PatchkitError(f"target {target}: expected a directory, found a file")
    return target


def writable(path: Path) -> bool:
    # Mode bits are honoured even for root: a tree someone made read-only stays untouched.
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return True
    return os.access(path, os.W_OK) and bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def first_unwritable(target: Path, relpaths: list[str]) -> str | None:
    """The first path (file or the directory that would hold it) that cannot be written, if any."""
    checks = [target]
    for rel in relpaths:
        f = target / rel
        d = f.parent
        while not d.exists() and d != target:
            d = d.parent
        checks += [d, f]
    for path in checks:
        if not writable(path):
            return str(path)
    return None
