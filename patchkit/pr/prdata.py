"""The upstream-facing description of each patch: `patches/UPSTREAM/upstream-pr.toml`, next to the series.

A patch header is written for this repository (it cites its own benchmarks, tests and numbering); a pull
request is read by the upstream project. So what goes upstream is data of its own, checked here:

    forbid = ['\\bP[0-9]\\b', 'BENCHMARKS\\.md']   # this repository's vocabulary: never in a PR or commit

    [[patch]]
    file = "0001-....patch"          # the series file it describes
    title = "..."                    # PR title and commit subject
    motivation = "..."               # PR Motivation, and the commit body
    modifications = [{path = "pkg/mod.py", what = "..."}]   # one line per file the commit touches (wheel layout)
    test = {file = "upstream-tests/test_x.py", dest = "test/registered/kernels/test_x.py"}

    [[patch.accuracy]]               # a measured result, with where and how
    result = "..."; command = "..."; gpu = "..."; versions = "..."; date = "YYYY-MM-DD"
    [[patch.benchmark]]              # the same, plus the table as measured
    ...; columns = ["batch", "us"]; rows = [["1", "9.2"]]; source = "BENCHMARKS.md#anchor"

`source` names where in this repository a number came from (tests check the numbers are there); it
is never written into a PR.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import PatchkitError
from ..lockfile import tomllib
from ..paths import clean_relpath

DATA_FILE = "upstream-pr.toml"
_PATCH_KEYS = {"file", "title", "motivation", "modifications", "test", "accuracy", "benchmark"}
_RESULT_KEYS = {"result", "command", "gpu", "versions", "date", "source"}
_BENCH_KEYS = _RESULT_KEYS | {"columns", "rows"}


@dataclass
class Measured:
    result: str
    command: str
    gpu: str
    versions: str
    date: str
    source: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


@dataclass
class UpstreamPR:
    file: str
    title: str
    motivation: str
    modifications: dict[str, str]             # wheel-layout path -> what changes there
    test_file: Path | None = None             # the upstream-style unittest this PR adds
    test_dest: str = ""                       # where it goes in the upstream repo (repo layout)
    accuracy: list[Measured] = field(default_factory=list)
    benchmark: list[Measured] = field(default_factory=list)


@dataclass
class SeriesPRData:
    path: Path
    forbid: list[re.Pattern]
    patches: dict[str, UpstreamPR]

    def vocabulary_hits(self, text: str) -> list[str]:
        """Every forbidden term found in `text` (the matched words, in order)."""
        return [m.group(0) for rx in self.forbid for m in rx.finditer(text)]


def _str(where: str, value, key: str, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise PatchkitError(f"{where}: expected '{key}' as a non-empty string, found {value!r}")
    return value


def _measured(where: str, raw, bench: bool) -> Measured:
    keys = _BENCH_KEYS if bench else _RESULT_KEYS
    if not isinstance(raw, dict) or set(raw) - keys:
        found = sorted(set(raw) - keys) if isinstance(raw, dict) else type(raw).__name__
        raise PatchkitError(f"{where}: expected a table with keys {sorted(keys)}, found {found}")
    m = Measured(*(_str(where, raw.get(k), k) for k in ("result", "command", "gpu", "versions", "date")),
                 source=_str(where, raw.get("source"), "source", required=False))
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", m.date):
        raise PatchkitError(f"{where}: expected date as YYYY-MM-DD, found {m.date!r}")
    if bench:
        m.columns = raw.get("columns") or []
        m.rows = raw.get("rows") or []
        if not m.columns or not all(isinstance(c, str) for c in m.columns):
            raise PatchkitError(f"{where}: expected 'columns' as a list of strings, found {m.columns!r}")
        for row in m.rows:
            if not isinstance(row, list) or len(row) != len(m.columns) or not all(isinstance(c, str) for c in row):
                raise PatchkitError(f"{where}: expected each row as {len(m.columns)} strings, found {row!r}")
    return m


def load_pr_data(series_dir: Path) -> SeriesPRData | None:
    """The series' upstream-pr.toml, schema-checked; None if the series has none."""
    path = Path(series_dir) / DATA_FILE
    if not path.is_file():
        return None
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PatchkitError(f"{path}: expected TOML, found an error: {exc}") from None
    unknown = set(raw) - {"forbid", "patch"}
    if unknown:
        raise PatchkitError(f"{path}: expected only 'forbid' and [[patch]], found {sorted(unknown)}")
    try:
        forbid = [re.compile(p) for p in raw.get("forbid", [])]
    except (re.error, TypeError) as exc:
        raise PatchkitError(f"{path}: forbid: expected regular expressions, found one that fails: {exc}") from None
    patches = {}
    for i, p in enumerate(raw.get("patch", [])):
        where = f"{path}: patch {i + 1}"
        if not isinstance(p, dict) or set(p) - _PATCH_KEYS:
            raise PatchkitError(f"{where}: expected keys {sorted(_PATCH_KEYS)}, found {sorted(p) if isinstance(p, dict) else p!r}")
        name = _str(where, p.get("file"), "file")
        where = f"{path}: {name}"
        mods = {}
        for m in p.get("modifications", []):
            if not isinstance(m, dict) or set(m) != {"path", "what"}:
                raise PatchkitError(f"{where}: modifications: expected {{path, what}} tables, found {m!r}")
            mods[clean_relpath(_str(where, m["path"], "path"), f"{where}: modifications")] = _str(where, m["what"], "what")
        test = p.get("test")
        test_file, test_dest = None, ""
        if test is not None:
            if not isinstance(test, dict) or set(test) != {"file", "dest"}:
                raise PatchkitError(f"{where}: test: expected {{file, dest}}, found {test!r}")
            test_file = Path(series_dir) / clean_relpath(_str(where, test["file"], "file"), f"{where}: test.file")
            test_dest = clean_relpath(_str(where, test["dest"], "dest"), f"{where}: test.dest")
            if not test_file.is_file():
                raise PatchkitError(f"{where}: test.file: expected {test_file}, found no such file")
        patches[name] = UpstreamPR(
            file=name, title=_str(where, p.get("title"), "title"),
            motivation=_str(where, p.get("motivation"), "motivation").strip(), modifications=mods,
            test_file=test_file, test_dest=test_dest,
            accuracy=[_measured(f"{where}: accuracy", a, False) for a in p.get("accuracy", [])],
            benchmark=[_measured(f"{where}: benchmark", b, True) for b in p.get("benchmark", [])])
    return SeriesPRData(path, forbid, patches)
