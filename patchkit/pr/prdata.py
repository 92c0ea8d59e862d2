"""The upstream-facing description of each patch: `patches/UPSTREAM/upstream-pr.toml`, next to the series.

A patch header is written for this repository (it cites its own benchmarks, tests and numbering); a pull
request is read by the upstream project. So what goes upstream is data of its own, checked here:

    forbid = ['\\bP[0-9]\\b', 'BENCHMARKS\\.md']   # this repository's vocabulary: never in anything exported
    template = "pull_request_template.md"    # optional: the upstream's own pull-request template, kept beside the
                                             # series (its source in a comment above its first heading); used when
                                             # the PR's base has none (a wheel checkout has no .github/)

    [[patch]]
    file = "0001-....patch"          # the series file it describes
    label = "P1"                     # the name this repository's README gives it (export-pr accepts it);
                                     # never written into a PR
    title = "..."                    # PR title and commit subject
    motivation = "..."               # PR Motivation, and the commit body
    modifications = [{path = "pkg/mod.py", what = "..."}]   # one line per file the commit touches (wheel layout)
    test = {file = "upstream-tests/test_x.py", dest = "test/registered/kernels/test_x.py", parts = ["gpu"]}
                                     # parts: what runs where, "cpu" (without a GPU) and/or "gpu" (needs one);
                                     # runner (optional, default "python3"): what the body's test command runs
                                     # the file with, as the upstream project's CI does ("pytest");
                                     # ask (optional): a paragraph after the test command asking a reader with
                                     # hardware nobody has run it on to run it and post the output
    files = [{file = "upstream-benchmarks/bench_x.py", dest = "benchmark/bench_x.py", what = "...", run = "..."}]
                                     # further new files the PR adds (a benchmark script): repo layout, each
                                     # listed under Modifications with `what`; `run` (optional): the command
                                     # that runs it in a checkout, printed in the Benchmark section
    related = [{ref = "owner/repo#123", why = "..."}]   # public issues/PRs the PR relates to (its template's
                                     # Related Issues section, else after the motivation)
    facts = {releases = "pkg/mod.py:RELEASES"}   # {releases} in any text = that module-level literal of
                                     # the exported file (a tuple reads "3.6 and 3.8"): stated from the code
    [patch.reproduce]                # commands that run in a checkout of the upstream project alone
    server = "python3 -m pkg.launch ..."; benchmark = "..."; accuracy = "..."

    [[patch.accuracy]]               # a measured result, with where and how
    result = "..."; command = "..."; gpu = "..."; versions = "..."; date = "YYYY-MM-DD"
    harness = "upstream"             # "upstream" (default): `command` runs in an upstream checkout with this
                                     # PR; "standalone": measured by a harness outside the PR, whose command
                                     # is kept here for the record and never printed
    model = "..."                    # what it ran on, printed as such (e.g. a random-weight model of the
                                     # real shapes: it shows the path runs, not model quality)
    [[patch.benchmark]]              # the same, plus the table as measured
    ...; columns = ["batch", "us"]; rows = [["1", "9.2"]]; source = "BENCHMARKS.md#anchor"

A PR that builds on another is a patch of its own with `Depends-On:` that one (`export-pr --series` stacks them).

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
from ..series import LABELS_FILE

DATA_FILE = LABELS_FILE       # the labels the series' lookup reads live in the same file
_PATCH_KEYS = {"file", "label", "title", "motivation", "modifications", "test", "facts", "reproduce", "accuracy",
               "benchmark", "related", "files"}
_REF_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+#[1-9][0-9]*")
_RESULT_KEYS = {"result", "command", "gpu", "versions", "date", "source", "harness", "model"}
HARNESSES = ("upstream", "standalone")
TEST_PARTS = ("cpu", "gpu")
REPRODUCE_KEYS = ("server", "benchmark", "accuracy")   # in the order a reviewer runs them
_BENCH_KEYS = _RESULT_KEYS | {"columns", "rows"}


@dataclass
class Measured:
    result: str
    command: str
    gpu: str
    versions: str
    date: str
    source: str = ""
    harness: str = "upstream"       # "upstream": command runs in an upstream checkout; "standalone": it does not
    model: str = ""                 # what it ran on, when that is not evident from the result
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


@dataclass
class Related:
    ref: str        # owner/repo#N: GitHub links it in any repository
    why: str


@dataclass
class UpstreamPR:
    file: str
    title: str
    motivation: str
    modifications: dict[str, str]             # wheel-layout path -> what changes there
    test_file: Path | None = None             # the upstream-style unittest this PR adds
    test_dest: str = ""                       # where it goes in the upstream repo (repo layout)
    test_parts: tuple[str, ...] = ()          # what of it runs without a GPU ("cpu") and with one ("gpu")
    test_runner: str = "python3"              # what runs the test file in the upstream project ("pytest")
    test_ask: str = ""                        # what the PR asks of a reader with hardware no one has run it on
    files: list[tuple[Path, str, str]] = field(default_factory=list)   # (source, repo-layout dest, what)
    related: list[Related] = field(default_factory=list)
    label: str = ""                           # this repository's name for it (README); never exported
    facts: dict[str, tuple[str, str]] = field(default_factory=dict)   # name -> (wheel path, module constant)
    reproduce: dict[str, str] = field(default_factory=dict)          # REPRODUCE_KEYS -> upstream command
    accuracy: list[Measured] = field(default_factory=list)
    benchmark: list[Measured] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)   # the commands that run `files` (files' `run`)


@dataclass
class KeptTemplate:
    path: Path          # the file beside the series
    text: str


@dataclass
class SeriesPRData:
    path: Path
    forbid: list[re.Pattern]
    patches: dict[str, UpstreamPR]
    template: KeptTemplate | None = None

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
                 source=_str(where, raw.get("source"), "source", required=False),
                 harness=_str(where, raw.get("harness", "upstream"), "harness"),
                 model=_str(where, raw.get("model"), "model", required=False))
    if m.harness not in HARNESSES:
        raise PatchkitError(f"{where}: expected harness as one of {', '.join(HARNESSES)}, found {m.harness!r}")
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


def _facts(where: str, raw) -> dict[str, tuple[str, str]]:
    """name -> (wheel path, NAME): a module-level constant of an exported file that a text states."""
    if not isinstance(raw, dict):
        raise PatchkitError(f"{where}: facts: expected a table of name = \"path:CONSTANT\", found {raw!r}")
    out = {}
    for name, ref in raw.items():
        path, _, const = ref.rpartition(":") if isinstance(ref, str) else ("", "", "")
        if not re.fullmatch(r"\w+", name) or not path or not const.isidentifier():
            raise PatchkitError(f"{where}: facts.{name}: expected \"path:CONSTANT\", found {ref!r}")
        out[name] = (clean_relpath(path, f"{where}: facts.{name}"), const)
    return out


def _reproduce(where: str, raw) -> dict[str, str]:
    if not isinstance(raw, dict) or set(raw) - set(REPRODUCE_KEYS):
        found = sorted(set(raw) - set(REPRODUCE_KEYS)) if isinstance(raw, dict) else raw
        raise PatchkitError(f"{where}: reproduce: expected a table with keys {', '.join(REPRODUCE_KEYS)}, found {found!r}")
    return {k: _str(f"{where}: reproduce", raw[k], k).strip() for k in REPRODUCE_KEYS if k in raw}


def _files(where: str, series_dir: Path, raw) -> list[tuple[Path, str, str]]:
    if not isinstance(raw, list):
        raise PatchkitError(f"{where}: files: expected a list of {{file, dest, what}} tables, found {raw!r}")
    out = []
    for f in raw:
        if not isinstance(f, dict) or not {"file", "dest", "what"} <= set(f) <= {"file", "dest", "what", "run"}:
            raise PatchkitError(f"{where}: files: expected {{file, dest, what}} and optionally run, found {f!r}")
        src = Path(series_dir) / clean_relpath(_str(where, f["file"], "file"), f"{where}: files.file")
        if not src.is_file():
            raise PatchkitError(f"{where}: files.file: expected {src}, found no such file")
        out.append((src, clean_relpath(_str(where, f["dest"], "dest"), f"{where}: files.dest"), _str(where, f["what"], "what")))
    return out


def _related(where: str, raw) -> list[Related]:
    if not isinstance(raw, list):
        raise PatchkitError(f"{where}: related: expected a list of {{ref, why}} tables, found {raw!r}")
    out = []
    for r in raw:
        if not isinstance(r, dict) or set(r) != {"ref", "why"} or not isinstance(r["ref"], str) \
                or not _REF_RE.fullmatch(r["ref"]):
            raise PatchkitError(f"{where}: related: expected {{ref = \"owner/repo#N\", why = \"...\"}}, found {r!r}")
        out.append(Related(r["ref"], _str(f"{where}: related", r["why"], "why").strip()))
    return out


def load_pr_data(series_dir: Path) -> SeriesPRData | None:
    """The series' upstream-pr.toml, schema-checked; None if the series has none."""
    path = Path(series_dir) / DATA_FILE
    if not path.is_file():
        return None
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PatchkitError(f"{path}: expected TOML, found an error: {exc}") from None
    unknown = set(raw) - {"forbid", "patch", "template"}
    if unknown:
        raise PatchkitError(f"{path}: expected only 'forbid', 'template' and [[patch]], found {sorted(unknown)}")
    template = _kept_template(path, raw["template"]) if "template" in raw else None
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
        patches[name] = _upstream_pr(where, series_dir, p, name)
    return SeriesPRData(path, forbid, patches, template)


def _kept_template(path: Path, value) -> KeptTemplate:
    """upstream-pr.toml `template`: a Markdown file beside it (a plain name: the series directory holds it)."""
    name = _str(f"{path}: template", value, "template")
    kept = path.parent / name
    if "/" in name or name in (".", "..") or not kept.is_file():
        raise PatchkitError(f"{path}: template: expected the name of a file beside it, found {name!r}"
                            + ("" if "/" in name else " (no such file)"))
    try:
        return KeptTemplate(kept, kept.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise PatchkitError(f"{kept}: expected UTF-8 text, found byte {exc.object[exc.start]:#04x} at offset "
                            f"{exc.start}") from None


def _upstream_pr(where: str, series_dir: Path, p: dict, name: str) -> UpstreamPR:
    mods = {}
    for m in p.get("modifications", []):
        if not isinstance(m, dict) or set(m) != {"path", "what"}:
            raise PatchkitError(f"{where}: modifications: expected {{path, what}} tables, found {m!r}")
        mods[clean_relpath(_str(where, m["path"], "path"), f"{where}: modifications")] = _str(where, m["what"], "what")
    test = p.get("test")
    test_file, test_dest, test_parts, runner, ask = None, "", (), "python3", ""
    if test is not None:
        if not isinstance(test, dict) or not {"file", "dest", "parts"} <= set(test) <= {"file", "dest", "parts", "runner",
                                                                                         "ask"}:
            raise PatchkitError(f"{where}: test: expected {{file, dest, parts}} and optionally runner and ask, "
                                f"found {test!r}")
        runner = _str(where, test.get("runner", "python3"), "runner").strip()
        ask = _str(where, test.get("ask", ""), "ask", required=False).strip()
        test_file = Path(series_dir) / clean_relpath(_str(where, test["file"], "file"), f"{where}: test.file")
        test_dest = clean_relpath(_str(where, test["dest"], "dest"), f"{where}: test.dest")
        if not test_file.is_file():
            raise PatchkitError(f"{where}: test.file: expected {test_file}, found no such file")
        test_parts = test["parts"]
        if (not isinstance(test_parts, list) or not test_parts
                or any(part not in TEST_PARTS for part in test_parts) or len(set(test_parts)) != len(test_parts)):
            raise PatchkitError(f"{where}: test.parts: expected a list of {' and/or '.join(TEST_PARTS)}, "
                                f"found {test_parts!r}")
        test_parts = tuple(part for part in TEST_PARTS if part in test_parts)
    return UpstreamPR(
        file=name, title=_str(where, p.get("title"), "title"),
        motivation=_str(where, p.get("motivation"), "motivation").strip(), modifications=mods,
        test_file=test_file, test_dest=test_dest, test_parts=test_parts, test_runner=runner, test_ask=ask,
        related=_related(where, p.get("related", [])), files=_files(where, series_dir, p.get("files", [])),
        runs=[_str(where, f["run"], "run") for f in p.get("files", []) if "run" in f],
        label=_str(where, p.get("label"), "label", required=False),
        facts=_facts(where, p.get("facts", {})), reproduce=_reproduce(where, p.get("reproduce", {})),
        accuracy=[_measured(f"{where}: accuracy", a, False) for a in p.get("accuracy", [])],
        benchmark=[_measured(f"{where}: benchmark", b, True) for b in p.get("benchmark", [])])
