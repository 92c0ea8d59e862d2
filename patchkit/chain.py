"""The states each file passes through: pristine, then after every patch of the series that touches it.

Computed by applying the series with `git apply` to a scratch copy of the pristine files, so status can
name, for any file on disk, exactly how far along the series it is.
"""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import PatchkitError
from .gitcmd import apply_failure, git
from .hashing import sha256_bytes
from .pristine import Pristine
from .series import Series

_OFFSET_RE = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)")


def hunk_offsets(apply_log: str) -> list[str]:
    """One note per hunk that `git apply --verbose` placed at an offset."""
    return [f"hunk {m.group(1)} at line {m.group(2)} (offset {m.group(3)})" for m in _OFFSET_RE.finditer(apply_log)]


@dataclass
class FileChain:
    path: str
    states: list[tuple[int, str | None]]   # (index of last patch applied, sha256 or None=absent); -1 = pristine
    final: bytes | None = None              # bytes after the whole series (None = absent)
    pristine: bytes | None = None

    def position(self, digest: str | None) -> int | None:
        """Index into `states` of the state this digest is in, or None if it matches no state."""
        for i, (_, h) in enumerate(self.states):
            if h == digest:
                return i
        return None


@dataclass
class Chain:
    series: Series
    files: dict[str, FileChain] = field(default_factory=dict)
    offsets: dict[str, list[str]] = field(default_factory=dict)   # patch name -> hunk offset notes


def build_chain(series: Series, pristine: Pristine) -> Chain:
    chain = Chain(series)
    touched = []
    for p in series.patches:
        for path in p.paths:
            if path not in touched:
                touched.append(path)
    with tempfile.TemporaryDirectory(prefix="patchkit-chain-") as tmp:
        scratch = Path(tmp)
        git(scratch, "init", "-q")
        for path in touched:
            data = pristine.read(path) if pristine.has(path) else None
            chain.files[path] = FileChain(path, [(-1, sha256_bytes(data) if data is not None else None)], pristine=data)
            if data is not None:
                (scratch / path).parent.mkdir(parents=True, exist_ok=True)
                (scratch / path).write_bytes(data)
        for i, p in enumerate(series.patches):
            proc = git(scratch, "apply", "--verbose", "--whitespace=nowarn", str(p.path.resolve()), check=False)
            if proc.returncode != 0:
                raise PatchkitError(
                    f"{p.path}: does not apply to pristine {pristine.wheel.name} after the patches before it: "
                    f"{apply_failure(proc.stderr)}"
                )
            notes = hunk_offsets(proc.stderr)
            if notes:
                chain.offsets[p.name] = notes
            for path in dict.fromkeys(p.paths):
                f = scratch / path
                digest = sha256_bytes(f.read_bytes()) if f.exists() else None
                chain.files[path].states.append((i, digest))
        for path, fc in chain.files.items():
            f = scratch / path
            fc.final = f.read_bytes() if f.exists() else None
    for rel, owner in series.overlay_owner.items():
        if pristine.has(rel):
            raise PatchkitError(f"overlay/{rel}: expected a new file, found it already in {pristine.wheel.name}")
        data = series.overlay_bytes(rel)
        chain.files[rel] = FileChain(rel, [(-1, None), (owner, sha256_bytes(data))], final=data, pristine=None)
    return chain
