"""Read pin.lock: which upstream artifacts the series is written against."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import PatchkitError, fsio
from .paths import clean_relpath, safe_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        raise SystemExit("patchkit needs Python >= 3.11 (tomllib) or the 'tomli' package on Python 3.10")

_REQUIRED = ("package", "version", "artifact", "sha256", "root")
# The schema: every table and key pin.lock may hold; anything else (a misspelt table drops an upstream's
# patches without a word) is an error.
_TABLES = ("upstream", "runtime", "patchset")
_LINE_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]*")


@dataclass(frozen=True)
class Upstream:
    name: str            # series name: patches/<name>/
    package: str         # distribution name on the package index
    version: str
    artifact: str        # exact file name of the pinned wheel
    sha256: str
    root: str            # top-level directory the series touches, e.g. "sglang"
    repo: str = ""
    repo_prefix: str = ""  # path of `root`'s parent inside the upstream git repo
    tag: str = ""

    @property
    def label(self) -> str:
        """How messages name this release: 'sglang 0.5.14'."""
        return f"{self.package} {self.version}"


@dataclass(frozen=True)
class Lock:
    path: Path
    upstreams: dict[str, Upstream]
    runtime: dict[str, str] = field(default_factory=dict)
    # [patchset."LINE"] version = "...": the patch set's own version per release line (patchset.py)
    patchsets: dict[str, str] = field(default_factory=dict)

    @property
    def line(self) -> str:
        """The release line this lock pins: the version of its first [upstream.NAME] table."""
        return next(iter(self.upstreams.values())).version

    def upstream(self, name: str) -> Upstream:
        try:
            return self.upstreams[name]
        except KeyError:
            raise PatchkitError(
                f"{self.path}: no [upstream.{name}] entry (known: {', '.join(self.upstreams) or 'none'})"
            ) from None


def _type(value) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


def _strings(path: Path, where: str, table, allowed: tuple[str, ...] | None) -> dict[str, str]:
    """A table whose values must all be strings (and whose keys, when `allowed` is given, are known)."""
    if not isinstance(table, dict):
        raise PatchkitError(f"{path}: expected [{where}] to be a table, found {_type(table)}")
    for key, value in table.items():
        if allowed is not None and key not in allowed:
            raise PatchkitError(f"{path}: [{where}] has unknown key '{key}' (expected one of: {', '.join(allowed)})")
        if not isinstance(value, str):
            raise PatchkitError(f"{path}: [{where}] {key}: expected a string, found {_type(value)} {value!r}")
    return dict(table)


def _upstream(path: Path, name: str, entry) -> Upstream:
    where = f"upstream.{name}"
    safe_name(name, f"{path}: [{where}]")
    known = tuple(k for k in Upstream.__dataclass_fields__ if k != "name")
    entry = _strings(path, where, entry, known)
    missing = [k for k in _REQUIRED if not entry.get(k)]
    if missing:
        raise PatchkitError(f"{path}: [{where}] lacks {', '.join(missing)}")
    safe_name(entry["artifact"], f"{path}: [{where}] artifact")
    clean_relpath(entry["root"], f"{path}: [{where}] root")
    if not re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]):
        raise PatchkitError(f"{path}: [{where}] sha256: expected 64 lowercase hex digits, found {entry['sha256']!r}")
    return Upstream(name=name, **entry)


def load_lock(path: Path) -> Lock:
    path = Path(path)
    # No link followed: a pin.lock committed as a symlink would pin whatever file the link reaches.
    if fsio.kind_of(path) == "a symlink":
        raise PatchkitError(f"{path}: expected the pin file (a regular file), found a symlink (to {os.readlink(path)}); "
                            "replace it with the file itself")
    raw = fsio.read_regular(path, "the pin file (pin.lock)", limit=1 << 20)
    if raw is None:
        raise PatchkitError(f"{path}: lock file not found")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PatchkitError(f"{path}: not valid TOML ({exc})") from None
    if "index" in data:   # pin.lock once named the package index; where files come from is pip's to say
        raise PatchkitError(f"{path}: expected no [index] table, found one: remove it; the package index is pip's "
                            "configuration now (pip.conf index-url / find-links, PIP_INDEX_URL, PIP_FIND_LINKS)")
    for table in data:
        if table not in _TABLES:
            raise PatchkitError(f"{path}: unknown table [{table}] (expected [upstream.NAME], [runtime] or [patchset.LINE])")
    tables = data.get("upstream", {})
    if not isinstance(tables, dict):
        raise PatchkitError(f"{path}: expected [upstream.NAME] tables, found upstream = {_type(tables)}")
    upstreams = {name: _upstream(path, name, entry) for name, entry in tables.items()}
    if not upstreams:
        raise PatchkitError(f"{path}: expected at least one [upstream.NAME] table, found none")
    return Lock(
        path=path,
        upstreams=upstreams,
        runtime=_strings(path, "runtime", data.get("runtime", {}), None),
        patchsets=_patchsets(path, data.get("patchset", {})),
    )


def _patchsets(path: Path, tables) -> dict[str, str]:
    """[patchset."LINE"] tables: line -> the patch set's version on that line."""
    if not isinstance(tables, dict):
        raise PatchkitError(f"{path}: expected [patchset.\"LINE\"] tables, found patchset = {_type(tables)}")
    out = {}
    for line, entry in tables.items():
        if not _LINE_RE.fullmatch(line):
            raise PatchkitError(f"{path}: [patchset.{line!r}]: expected a release line such as \"1.2.3\", found {line!r}")
        entry = _strings(path, f'patchset."{line}"', entry, ("version",))
        if not _LINE_RE.fullmatch(entry.get("version", "")):
            raise PatchkitError(f'{path}: [patchset."{line}"] version: expected a version such as "0.1.0", '
                                f"found {entry.get('version', 'none')!r}")
        out[line] = entry["version"]
    return out
