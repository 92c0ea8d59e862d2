"""A target directory (an unpacked wheel tree or a site-packages): its files, installed versions, writability."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from . import PatchkitError, fsio
from .bookkeeping import TargetFiles
from .hashing import sha256_bytes
from .names import canonical_name


def _writable(path: Path) -> bool:
    # Mode bits are honoured even for root: a tree someone made read-only stays untouched.
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return True
    return os.access(path, os.W_OK) and bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


class Target:
    """One target directory for one operation: checked once, and each file read and hashed at most once
    (what the operation writes replaces what it had read). Its own bookkeeping files: `files`.

    A file the series touches is read only if it, and every directory below the target on the way to
    it, is not a symlink, and it is a regular file: nothing is read from, or written to, outside the tree."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.exists():
            raise PatchkitError(f"target {self.path}: expected a directory, found nothing there")
        if not self.path.is_dir():
            raise PatchkitError(f"target {self.path}: expected a directory, found a file")
        self.files = TargetFiles(self.path)
        self._bytes: dict[str, bytes | None] = {}
        self._digests: dict[str, str | None] = {}

    def read(self, rel: str) -> bytes | None:
        """The file's bytes (None = absent)."""
        if rel not in self._bytes:
            link = fsio.link_on_the_way(self.path, rel)
            if link is not None:
                raise PatchkitError(f"{link}: expected a regular file or directory of the target, found a symlink "
                                    f"(to {os.readlink(link)}); nothing written")
            try:
                self._bytes[rel] = fsio.read_regular(self.path / rel, "a file of the target")
            except PatchkitError as exc:
                raise PatchkitError(f"{exc}; nothing written") from None
        return self._bytes[rel]

    def digest(self, rel: str) -> str | None:
        if rel not in self._digests:
            data = self.read(rel)
            self._digests[rel] = sha256_bytes(data) if data is not None else None
        return self._digests[rel]

    def wrote(self, rel: str, data: bytes | None) -> None:
        self._bytes[rel] = data
        self._digests.pop(rel, None)

    def holds(self, root: str) -> bool:
        return (self.path / root).is_dir()

    def installed_version(self, package: str) -> tuple[str, str] | None:
        """(version, dist-info dir name) of `package` installed here, if it has a dist-info."""
        for meta in sorted(self.path.glob("*.dist-info/METADATA")):
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

    def writable(self) -> bool:
        return _writable(self.path)

    def first_unwritable(self, relpaths: list[str]) -> str | None:
        """The first path (file or the directory that would hold it) that cannot be written, if any."""
        checks = [self.path]
        for rel in relpaths:
            f = self.path / rel
            d = f.parent
            while not d.exists() and d != self.path:
                d = d.parent
            checks += [d, f]
        for path in checks:
            if not _writable(path):
                return str(path)
        return None
