"""The pristine upstream: file bytes straight out of a verified wheel."""
from __future__ import annotations

import csv
import io
import os
import shutil
import tempfile
import weakref
import zipfile
from functools import cached_property
from pathlib import Path

from . import PatchkitError, faults, fsio
from .hashing import record_digest
from .paths import clean_relpath
from .progress import counted

STAGE_PREFIX = ".patchkit-unpack-"   # an unpack in progress (or interrupted): never taken for a tree


class Pristine:
    """Read-only view of one pinned wheel. Paths are wheel-relative ('sglang/x.py'). `handle`: the open
    file whose bytes were verified (fetch.fetch_open); without it the file at `wheel` is opened."""

    def __init__(self, wheel: Path, handle=None):
        self.wheel = Path(wheel)
        try:
            self._zip = zipfile.ZipFile(handle if handle is not None else self.wheel)
        except zipfile.BadZipFile as exc:
            if handle is not None:
                handle.close()
            raise PatchkitError(f"{self.wheel}: expected a wheel (a zip file), found {exc}") from None
        if handle is not None:   # ZipFile never closes a handle it was given: this view owns it
            weakref.finalize(self, handle.close)

    def top_level(self) -> list[str]:
        """The wheel's top-level names (packages, dist-info), in order."""
        return sorted({n.split("/")[0] for n in self.names})

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

    def _record(self, dist_info: str) -> dict[str, tuple[str, str]]:
        """The wheel's RECORD: path -> (sha256 as RECORD writes it, size)."""
        name = f"{dist_info}/RECORD"
        try:
            rows = list(csv.reader(io.StringIO(self.read(name).decode("utf-8"))))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise PatchkitError(f"{self.wheel.name}: {name} is not a valid RECORD ({exc})") from None
        out = {}
        for row in rows:
            if row and row[0] != name:
                if len(row) != 3 or not row[1].startswith("sha256="):
                    raise PatchkitError(f"{self.wheel.name}: {name}: expected 'path,sha256=DIGEST,size', found {','.join(row)!r}")
                out[row[0]] = (row[1][len("sha256="):], row[2])
        return out

    def _verify(self, stage: Path, names: list[str], dist_info: str) -> None:
        """Every unpacked file matches the wheel's RECORD (digest and size), and nothing RECORD lists is missing."""
        record = self._record(dist_info)
        for name in names:
            if name != f"{dist_info}/RECORD":
                self._check(record, name, (stage / name).read_bytes())
        keep = {n.split("/")[0] for n in names}
        self._none_missing({n for n in record if n.split("/")[0] in keep}, names)

    def _check(self, record: dict, name: str, data: bytes) -> None:
        if name not in record:
            raise PatchkitError(f"{self.wheel.name}: {name} is not listed in its RECORD; nothing unpacked")
        digest = record_digest(data)[len("sha256="):]
        want, size = record[name]
        if digest != want or str(len(data)) != size:
            raise PatchkitError(f"{self.wheel.name}: {name}: expected sha256={want} ({size} bytes) as in its RECORD, "
                                f"found sha256={digest} ({len(data)} bytes); nothing unpacked")

    def _none_missing(self, listed: set[str], names: list[str]) -> None:
        missing = sorted(listed - set(names))
        if missing:
            raise PatchkitError(f"{self.wheel.name}: RECORD lists {missing[0]}, found no such file in the wheel; nothing unpacked")

    def verified_files(self, root: str):
        """(name, bytes) of every file under `root/`, each checked against the wheel's RECORD as it is read, then
        that RECORD lists no file under root/ the wheel lacks: what `unpack(root=...)` would leave under root,
        without writing it (a PatchkitError part way: the caller drops what it made of the earlier files)."""
        for name in self.names:
            clean_relpath(name, f"{self.wheel.name}: wheel entry")
        record = self._record(self.dist_info())
        names = self.files_under(root)
        for name in names:
            data = self._zip.read(name)
            self._check(record, name, data)
            yield name, data
        prefix = root.rstrip("/") + "/"
        self._none_missing({n for n in record if n.startswith(prefix)}, names)

    def unpack(self, dest: Path, root: str | None = None, log=None) -> None:
        """Extract the whole wheel (or only `root/` and its dist-info) under dest, all or nothing.

        Every entry name is checked before the first write (a zip-slip entry such as `pkg/../../x`
        is refused). Files go to a staging directory beside their destination, are verified against
        the wheel's RECORD, and only then are the top-level directories renamed into place, the
        dist-info first and the package root last: a tree whose root is there is a complete tree.
        With `log`, progress is shown (see progress.counted).
        """
        dest = Path(dest)
        dist_info = self.dist_info()
        keep = None if root is None else (root.rstrip("/") + "/", dist_info + "/")
        for name in self.names:      # every entry, even those not unpacked: a crafted wheel is refused whole
            clean_relpath(name, f"{self.wheel.name}: wheel entry")
        names = [n for n in self.names if not keep or n.startswith(keep)]
        tops = sorted({n.split("/")[0] for n in names}, key=lambda t: (t != dist_info, t))
        for top in tops:
            if (dest / top).exists():
                raise PatchkitError(f"{dest / top}: expected nothing there to unpack {self.wheel.name} into, found it already")
        dest.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=dest))
        try:
            writes = counted(names, f"unpacking {self.wheel.name}", log) if log else names
            for i, name in enumerate(writes):
                out = stage / name
                try:
                    faults.point("unpack", i)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(self._zip.read(name))
                except OSError as exc:     # a full disk: name where it was going, not the staging name
                    raise fsio.named(exc, dest / name) if exc.filename in (None, str(out)) else exc from None
            self._verify(stage, names, dist_info)
            for top in tops:
                os.rename(stage / top, dest / top)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
