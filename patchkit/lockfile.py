"""Read pin.lock: the release lines, and per line which upstream artifacts its series is written against.

pin.lock holds one or more release lines, each named by its key:

    [line."0.5.14".upstream.sglang]   package, version, artifact, sha256, root, repo, repo_prefix, tag
    [line."0.5.14".runtime]           python, torch, triton
    [line."0.5.14".patchset]          version = "0.1.0"

`load_lock(path, line)` reads one line (the newest by version when `line` is None) as a `Lock`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import PatchkitError, UsageError, fsio
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
_TABLES = ("upstream", "runtime", "patchset")   # the tables of one [line."NAME"]
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
    """One release line of pin.lock."""
    path: Path
    upstreams: dict[str, Upstream]
    runtime: dict[str, str] = field(default_factory=dict)
    # [line."LINE".patchset] version = "...": the patch set's own version, per line (patchset.py)
    patchsets: dict[str, str] = field(default_factory=dict)
    line: str = ""                  # this lock's line: its key in pin.lock
    lines: tuple[str, ...] = ()     # every line pin.lock names, oldest first

    @property
    def where(self) -> str:
        """How messages name this line's tables: 'line."0.5.14"'."""
        return f'line."{self.line}"'

    def upstream(self, name: str) -> Upstream:
        try:
            return self.upstreams[name]
        except KeyError:
            raise PatchkitError(
                f"{self.path}: no [{self.where}.upstream.{name}] entry (known: {', '.join(self.upstreams) or 'none'})"
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


def _upstream(path: Path, line: str, name: str, entry) -> Upstream:
    where = f'line."{line}".upstream.{name}'
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


def version_key(text: str) -> tuple:
    """Sort key of a version: numeric parts as numbers ('0.5.9' < '0.5.14'), anything else after them."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.+-]", text))


def _read_toml(path: Path) -> dict:
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
        if table != "line":
            raise PatchkitError(f"{path}: unknown table [{table}] (expected [line.\"NAME\".upstream.UPSTREAM], "
                                "[line.\"NAME\".runtime] or [line.\"NAME\".patchset])")
    lines = data.get("line", {})
    if not isinstance(lines, dict) or not lines:
        raise PatchkitError(f"{path}: expected at least one [line.\"NAME\"...] table, found none")
    for name in lines:
        if not _LINE_RE.fullmatch(name):
            raise PatchkitError(f"{path}: [line.{name!r}]: expected a release line such as \"1.2.3\", found {name!r}")
    return lines


def lock_lines(path: Path) -> list[str]:
    """The release lines pin.lock names, oldest first (by version)."""
    return sorted(_read_toml(Path(path)), key=version_key)


def load_lock(path: Path, line: str | None = None) -> Lock:
    """One release line of pin.lock: `line`, or the newest when None; an unknown line is a one-line error."""
    path = Path(path)
    return _lock(path, _read_toml(path), line)


def load_locks(path: Path) -> list[Lock]:
    """Every release line of pin.lock, oldest first, from one reading of the file."""
    path = Path(path)
    tables = _read_toml(path)
    return [_lock(path, tables, name) for name in sorted(tables, key=version_key)]


def _lock(path: Path, tables: dict, line: str | None) -> Lock:
    names = tuple(sorted(tables, key=version_key))
    if line is None:
        # PATCHKIT_LINE: a shell's (or a test session's) standing choice; a name this pin.lock lacks is a typo
        # or another checkout's line, never silently the newest
        line = os.environ.get("PATCHKIT_LINE") or names[-1]
        if line not in tables:
            raise UsageError(f"{path}: expected PATCHKIT_LINE to name a release line of {', '.join(names)}, "
                             f"found {line!r} (unset it, or pass --line NAME)")
    if line not in tables:
        raise UsageError(f"{path}: expected a release line of {', '.join(names)}, found --line {line!r}")
    data = tables[line]
    if not isinstance(data, dict):
        raise PatchkitError(f'{path}: expected [line."{line}"] to be a table, found {_type(data)}')
    for table in data:
        if table not in _TABLES:
            raise PatchkitError(f'{path}: unknown table [line."{line}".{table}] (expected upstream.NAME, runtime or patchset)')
    ups = data.get("upstream", {})
    if not isinstance(ups, dict):
        raise PatchkitError(f'{path}: expected [line."{line}".upstream.NAME] tables, found upstream = {_type(ups)}')
    upstreams = {name: _upstream(path, line, name, entry) for name, entry in ups.items()}
    if not upstreams:
        raise PatchkitError(f'{path}: expected at least one [line."{line}".upstream.NAME] table, found none')
    patchsets = {}
    for other in names:
        entry = tables[other].get("patchset") if isinstance(tables[other], dict) else None
        if entry is not None:
            patchsets[other] = _patchset_version(path, other, entry)
    return Lock(
        path=path,
        upstreams=upstreams,
        runtime=_strings(path, f'line."{line}".runtime', data.get("runtime", {}), None),
        patchsets=patchsets,
        line=line,
        lines=names,
    )


def _patchset_version(path: Path, line: str, entry) -> str:
    """[line."LINE".patchset] version: the patch set's version on that line."""
    entry = _strings(path, f'line."{line}".patchset', entry, ("version",))
    if not _LINE_RE.fullmatch(entry.get("version", "")):
        raise PatchkitError(f'{path}: [line."{line}".patchset] version: expected a version such as "0.1.0", '
                            f"found {entry.get('version', 'none')!r}")
    return entry["version"]
