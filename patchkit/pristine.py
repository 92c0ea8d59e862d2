"""The pristine upstream: file bytes straight out of a verified wheel."""
from __future__ import annotations

import hashlib
import zipfile
from functools import cached_property
from pathlib import Path

from . import PatchkitError


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Pristine:
    """Read-only view of one pinned wheel. Paths are wheel-relative ('sglang/x.py')."""

    def __init__(self, wheel: Path):
        self.wheel = Path(wheel)
        self._zip = zipfile.ZipFile(self.wheel)

    @cached_property
    def names(self) -> list[str]:
        return [n for n in self._zip.namelist() if not n.endswith("/")]

    def has(self, relpath: str) -> bool:
        return relpath in self._names_set

    @cached_property
    def _names_set(self) -> set[str]:
        return set(self.names)

    def read(self, relpath: str) -> bytes:
        try:
            return self._zip.read(relpath)
        except KeyError:
            raise PatchkitError(f"{self.wheel.name}: expected file {relpath}, found no such file") from None

    def files_under(self, root: str) -> list[str]:
        prefix = root.rstrip("/") + "/"
        return [n for n in self.names if n.startswith(prefix)]

    def dist_info(self) -> str:
        for n in self.names:
            if n.endswith(".dist-info/METADATA"):
                return n.split("/")[0]
        raise PatchkitError(f"{self.wheel.name}: no .dist-info/METADATA in wheel")

    def unpack(self, dest: Path, root: str | None = None) -> None:
        """Extract the whole wheel (or only `root/` and its dist-info) under dest."""
        dest = Path(dest)
        keep = None if root is None else (root.rstrip("/") + "/", self.dist_info() + "/")
        for name in self.names:
            if keep and not name.startswith(keep):
                continue
            out = dest / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(self._zip.read(name))
