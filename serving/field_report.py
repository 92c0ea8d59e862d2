"""`apply.py field-report ingest REPORT`: file a user's field-check report as a run of this repository.

It goes into bench/runs/<date>-field-<gpu>-<line>/ (RUN.md written from the report, the report's .json and .md beside it
byte for byte), one row in bench/runs/INDEX.md, and the BENCHMARKS.md row it would add is printed, marked
user-submitted with its machine (a maintainer places it). A malformed report, or one of another patch set than this
checkout's line, is refused in one line and nothing is written.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

from patchkit import PatchkitError, jsonio
from . import field_check as F

DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
HEX64 = re.compile(r"[0-9a-f]{64}")


class Refused(Exception):
    """The one-line reason a report is not filed."""


def _problem(data) -> str | None:
    """What is wrong with a report's shape, or None."""
    if not isinstance(data, dict) or data.get("kind") != F.KIND or data.get("format") != F.FORMAT:
        return f"expected a field-check report (\"kind\": {F.KIND!r}, \"format\": {F.FORMAT})"
    if not (isinstance(data.get("date"), str) and DATE.fullmatch(data["date"])):
        return "expected 'date' as YYYY-MM-DD"
    ps = data.get("patch_set")
    if not (isinstance(ps, dict) and isinstance(ps.get("line"), str) and isinstance(ps.get("series_digest"), str)
            and HEX64.fullmatch(ps["series_digest"]) and (ps.get("version") is None or isinstance(ps["version"], str))):
        return "expected 'patch_set' with 'line', 'version' and a 64-hex 'series_digest'"
    m = data.get("machine")
    if not (isinstance(m, dict) and all(isinstance(m.get(k), str) for k in ("gpu", "cc", "sm"))):
        return "expected 'machine' with 'gpu', 'cc' and 'sm'"
    st = data.get("stages")
    if not isinstance(st, dict) or not isinstance(st.get("p1"), list):
        return "expected 'stages' holding the 'p1' rows"
    for name, rows in st.items():
        items = rows if isinstance(rows, list) else [rows]
        for row in items:
            if not (isinstance(row, dict) and row.get("status") in ("pass", "fail", "ran", "skipped")):
                return f"expected each row of stage {name!r} to be an object with a status pass/fail/ran/skipped"
            if row["status"] == "skipped" and not isinstance(row.get("reason"), str):
                return f"expected a 'reason' on each skipped row of stage {name!r}"
    return None


def load(path: Path) -> dict:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise Refused(f"{path}: expected a readable field-check report, found {exc.strerror or exc}") from None
    try:
        return jsonio.parse(raw, str(path), _problem)
    except PatchkitError as exc:
        raise Refused(str(exc)) from None


def check_patch_set(report: dict, engine) -> None:
    """Refuse a report of another patch set than this checkout's line (its version and series digest)."""
    from patchkit.engine import Engine

    ps = report["patch_set"]
    try:
        ours = Engine.from_repo(Path(engine.lock.path).parent, read_only=True, line=ps["line"]).patch_set()
    except PatchkitError:
        raise Refused(f"expected a report of a release line of this checkout, found line {ps['line']!r}") from None
    if ps["series_digest"] != ours.digest or ps["version"] != ours.version:
        raise Refused(f"expected a report of this checkout's patch set ({ours.label}, series digest "
                      f"{ours.digest[:16]}), found version {ps['version']} digest {ps['series_digest'][:16]}")


def slug(report: dict) -> str:
    """<date>-field-<gpu>-<line>: one card's reports of both lines on one day are two runs, not one refused."""
    return f"{report['date']}-field-{F.gpu_slug(report['machine']['gpu'])}-{report['patch_set']['line']}"


def counts(rows) -> str:
    rows = rows if isinstance(rows, list) else [rows]
    by = {s: sum(r["status"] == s for r in rows) for s in ("pass", "fail", "ran", "skipped")}
    return ", ".join(f"{n} {s}" for s, n in by.items() if n) or "no rows"


def run_md(report: dict, files: list[str]) -> str:
    m, ps = report["machine"], report["patch_set"]
    v = m.get("versions", {}) if isinstance(m.get("versions"), dict) else {}
    lines = [f"# {report['date']}: field-check on {m['gpu']} ({m['sm']}), user-submitted", ""]
    lines += [f"> {h}" for h in report.get("header", []) if isinstance(h, str)] + [""]
    lines += ["A report of `apply.py field-check` (docs/field_check.md) run by a user on their own machine and "
              "filed here with `apply.py field-report ingest`; the project did not run it.", "",
              f"- machine: {m['gpu']}, compute capability {m['cc']}, {m.get('sm_count', '?')} SMs, "
              f"{m.get('memory_gib', '?')} GiB, driver {m.get('driver')}, CUDA {m.get('cuda')}",
              "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
              f"- patch set: line {ps['line']}, version {ps['version']}, series digest {ps['series_digest'][:16]}",
              f"- attestation: {m.get('attestation', '-')}", ""]
    lines += ["| stage | rows |", "|---|---|"]
    lines += [f"| {name} | {counts(rows)} |" for name, rows in report["stages"].items()]
    lines += ["", "Raw files beside this one: " + ", ".join(f"`{f}`" for f in files) + ".", ""]
    return "\n".join(lines)


def benchmarks_row(report: dict, folder: str) -> str:
    m, p1 = report["machine"], report["stages"]["p1"]
    ms = [r["ms"] for r in p1 if isinstance(r.get("ms"), (int, float))]
    return (f"| {report['date']} | {m['gpu']} ({m['sm']}), user-submitted | line {report['patch_set']['line']} "
            f"{report['patch_set']['version']} | P1 vs float64: {counts(p1)} | "
            f"{'median ' + format(sorted(ms)[len(ms) // 2], '.3f') + ' ms' if ms else '-'} | "
            f"[run](bench/runs/{folder}/RUN.md) |")


def ingest(path: Path, engine, runs: Path, say=print) -> int:
    report = load(path)
    check_patch_set(report, engine)
    folder = slug(report)
    dest = runs / folder
    if dest.exists():
        raise Refused(f"{dest}: expected no run folder of that name, found one (already filed?)")
    index = runs / "INDEX.md"
    if not index.is_file():
        raise Refused(f"{index}: expected the runs index, found none")
    md = Path(path).with_suffix(".md")
    raw = [Path(path)] + ([md] if md.is_file() else [])
    names = [p.name for p in raw]
    text = index.read_text()
    row = f"| `{folder}/` | {report['date']} | `apply.py field-check` on a user's {report['machine']['gpu']} " \
          f"({', '.join(names)}), filed by `apply.py field-report ingest` | bench/runs/{folder}/RUN.md |\n"
    with tempfile.TemporaryDirectory(dir=runs) as tmp:
        stage = Path(tmp) / folder
        stage.mkdir()
        for p in raw:
            shutil.copyfile(p, stage / p.name)
        (stage / "RUN.md").write_text(run_md(report, names))
        new_index = _with_row(text, row)
        stage.rename(dest)
    try:
        index.write_text(new_index)
    except OSError:
        shutil.rmtree(dest)        # the folder and its index row go together, or neither
        raise
    say(f"field-report: filed {dest}/ (RUN.md, {', '.join(names)}) and listed it in {index}")
    say("field-report: the BENCHMARKS.md row it would add (user-submitted):")
    say(benchmarks_row(report, folder))
    return 0


def _with_row(index_text: str, row: str) -> str:
    """INDEX.md with `row` after the last row of its first table (the live runs; Archived comes after)."""
    lines = index_text.splitlines(keepends=True)
    last = max((i for i, l in enumerate(lines) if l.startswith("| `")
                and not any(x.startswith("## ") for x in lines[:i])), default=None)
    if last is None:
        raise Refused("bench/runs/INDEX.md: expected its table of runs, found none")
    return "".join(lines[: last + 1] + [row] + lines[last + 1:])


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("field-report", help="file a field-check report as a run (bench/runs/)",
                              description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="field_report_command", required=True)
    q = sub.add_parser("ingest", help="file REPORT under bench/runs/ and print its BENCHMARKS.md row")
    q.add_argument("report", type=Path)
    q.set_defaults(func=lambda engine, args: run_ingest(args, engine))


def run_ingest(args: argparse.Namespace, engine) -> int:
    runs = Path(engine.lock.path).parent / "bench" / "runs"
    try:
        if not runs.is_dir():
            raise Refused(f"expected a checkout holding bench/runs/, found {runs.parent.parent} without it")
        return ingest(args.report, engine, runs)
    except Refused as exc:
        print(f"field-report: {exc}", file=sys.stderr)
        return 1
