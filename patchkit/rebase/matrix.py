"""`apply.py rebase --matrix`: the series dry-run against the pin and every release of the lead upstream after
it (each with the other pins that release requires), as a table patch x release and a JSON form.

Each column is one `rebase --dry-run` (run.py, in a temporary directory; nothing in the repository is
written but the table file). A cell is the patch's result on that release:

  applies      clean, or at an offset / following a move / by a 3-way merge
  conflict     stops for a hand resolution (text conflict, or a clean merge that breaks the module)
  upstream     already in the release
  superseded   upstream does its job another way (Superseded-By)
  not reached  applies, but the release routes around it (Reach conditions)
  stale        a reach condition's file or anchor is gone: nobody knows
  fails check  (the pin's column, which is `apply.py check` on the pin) the patch is not exact there
A conflict that is also not reached or stale says both ("conflict, not reached").
"""
from __future__ import annotations

import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

from .. import PatchkitError, UsageError
from ..fsio import atomic_write
from ..lockfile import version_key
from .requires import release_versions
from .state import CLEAN, CONFLICT, OFFSET, RESOLVED, SUPERSEDED, UPSTREAM

APPLIES, NOT_REACHED, STALE, FAILS_CHECK = "applies", "not reached", "stale", "fails check"
LEGEND = ("applies: clean, at an offset, following a move or by a 3-way merge; conflict: needs a hand resolution "
          "(a text conflict, or a clean merge that shadows a definition or leaves a name undefined); upstream: "
          "already in the release; superseded: upstream does its job another way (Superseded-By); not reached: "
          "the release routes around it (Reached-If/Unreached-If); stale: a condition's file or anchor is gone; "
          "fails check (pin column): `apply.py check` finds the patch not exact on its own pin")


def cell(result: dict) -> str:
    r = result["result"]
    if r == UPSTREAM:
        return "upstream"
    if r == SUPERSEDED:
        return "superseded"
    extra = NOT_REACHED if result["unreached"] else STALE if result["stale"] else ""
    if r == CONFLICT:
        return "conflict" + (f", {extra}" if extra else "")
    if r in (CLEAN, OFFSET, RESOLVED):
        return extra or APPLIES
    return r


def _column(engine, start, lead: str, version: str, progress) -> dict:
    """One release: the dry run's JSON report and each patch's cell."""
    with tempfile.TemporaryDirectory(prefix="patchkit-matrix-") as tmp:
        report = Path(tmp) / "report.json"
        t0 = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()):
            start(engine, {lead: version}, True, str(report))
        data = json.loads(report.read_text()) if report.is_file() else {"upstreams": [], "pins_moved": []}
    progress(f"[matrix] {lead} {version}: {time.monotonic() - t0:.0f} s")
    pins = {n: u.version for n, u in engine.lock.upstreams.items()}
    cells = {}
    for e in data["upstreams"]:
        pins[e["name"]] = e["pin"]["version"]
        for r in e["results"]:
            cells[f"{e['name']}/{r['patch']}"] = cell(r)
    return {"version": version, "pins": pins, "pins_moved": data.get("pins_moved", []), "cells": cells,
            "report": data}


def pin_cells(engine) -> dict[str, str]:
    """The pin's column from `check` on the pinned release itself (exact and round-tripping: applies)."""
    from ..check import check_repository

    cells = {}
    for f in check_repository(engine, log=lambda *_: None):
        if f.upstream in engine.lock.upstreams and not f.item.startswith("overlay/"):
            cells[f"{f.upstream}/{f.item}"] = (FAILS_CHECK if f.errors else NOT_REACHED if f.warnings else APPLIES)
    return cells


def build_matrix(engine, start, progress, after: str | None = None, only: list[str] | None = None) -> dict:
    names = list(engine.lock.upstreams)
    lead = engine.lock.upstream(names[0])
    versions = only if only else release_versions(lead.package, after or lead.version)
    patches = [f"{n}/{p.name}" for n in names for p in engine.series(n).patches]
    pin_column = {"version": lead.version, "pin": True,
                  "pins": {n: u.version for n, u in engine.lock.upstreams.items()}, "pins_moved": [],
                  "cells": pin_cells(engine)}
    columns = [pin_column] if not only or lead.version in only else []
    for v in versions:
        if v == lead.version:
            continue
        try:
            col = _column(engine, start, lead.name, v, progress)
        except PatchkitError as exc:
            col = {"version": v, "pins": {}, "pins_moved": [], "cells": {p: "error" for p in patches},
                   "error": str(exc)}
        for p in patches:             # a series that gained no entry (an upstream not moved): applies as pinned
            col["cells"].setdefault(p, APPLIES)
        columns.append(col)
    return {"line": engine.lock.line, "lead": lead.name,
            "pin": {n: u.version for n, u in engine.lock.upstreams.items()},
            "patches": patches, "columns": columns}


TITLE = "# Compatibility matrix"
INTRO = ("Generated by `python apply.py rebase --matrix [--line NAME]` (do not edit): one section per release line, "
         "each line's series dry-run onto its pin and every later release of its lead upstream (`docs/rebase.md`).")


def markdown(matrix: dict) -> str:
    """One line's section: heading, sentence, table, legend."""
    lead = matrix["lead"]
    others = [n for n in matrix["pin"] if n != lead]
    head = ["patch"]
    for c in matrix["columns"]:
        label = f"{lead} {c['version']}" + (" (pin)" if c.get("pin") else "")
        label += "".join(f"<br>{n} {c['pins'].get(n, '?')}" for n in others)
        head.append(label)
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in matrix["patches"]:
        rows.append("| " + " | ".join([f"`{p}`"] + [c["cells"][p] for c in matrix["columns"]]) + " |")
    errors = [f"- {lead} {c['version']}: {c['error']}" for c in matrix["columns"] if c.get("error")]
    pins = ", ".join(f"{n} {v}" for n, v in matrix["pin"].items())
    later = len(matrix["columns"]) - 1
    text = [f"## {matrix['line']} line", "",
            f"The series pinned to {pins} dry-run onto every later {lead} release, each with the "
            f"{', '.join(others) or 'other'} release it requires"
            + ("" if later else f" (no {lead} release after the pin yet)") + ".", "", *rows, "", LEGEND + "."]
    if errors:
        text += ["", "Releases that could not be evaluated:", *errors]
    return "\n".join(text) + "\n"


def _sections(text: str) -> dict[str, str]:
    """line -> its section text, from a compat.md this module wrote (file order kept)."""
    out, name = {}, None
    for line in text.splitlines(keepends=True):
        if line.startswith("## ") and line.rstrip().endswith(" line"):
            name = line[3:].rstrip()[: -len(" line")]
            out[name] = ""
        if name is not None:
            out[name] += line
    return out


def with_section(text: str, line: str, section: str) -> str:
    """compat.md with `line`'s section replaced (or added); every other line's section byte for byte."""
    sections = _sections(text)
    sections[line] = section
    body = "\n".join(sections[n].rstrip("\n") + "\n" for n in sorted(sections, key=version_key))
    return f"{TITLE}\n\n{INTRO}\n\n{body}"


def parse_markdown(text: str, line: str | None = None) -> dict[str, dict[str, str]]:
    """version -> {patch: cell} from the table markdown() wrote (`line`'s section, or the only table there is)."""
    if line is not None:
        sections = _sections(text)
        if line not in sections:
            raise PatchkitError(f"compat.md: expected a '## {line} line' section, found {', '.join(sections) or 'none'}")
        text = sections[line]
    lines = [l for l in text.splitlines() if l.startswith("| ")]
    head = [h.strip() for h in lines[0].strip("|").split("|")]
    versions = [h.split("<br>")[0].split(" ")[1] for h in head[1:]]
    out: dict[str, dict[str, str]] = {v: {} for v in versions}
    for line_text in lines[1:]:
        cells = [c.strip() for c in line_text.strip("|").split("|")]
        for v, c in zip(versions, cells[1:]):
            out[v][cells[0].strip("`")] = c
    return out


def run_matrix(engine, start, progress, after: str | None, only: str | None, json_out: str | None,
               out: str | None) -> int:
    only_list = [v.strip() for v in only.split(",") if v.strip()] if only else None
    if only and not only_list:
        raise UsageError("rebase --matrix --releases: expected VERSION[,VERSION...], found none")
    t0 = time.monotonic()
    matrix = build_matrix(engine, start, progress, after, only_list)
    matrix["seconds"] = round(time.monotonic() - t0)
    text = markdown(matrix)
    print(text, end="")
    if json_out:
        Path(json_out).write_text(json.dumps(matrix, indent=1))
    # the full table is the repository's docs/compat.md; a chosen subset goes only where --out says
    # (its section of it, the other lines' sections kept)
    if out:
        atomic_write(Path(out), text.encode())
        progress(f"[matrix] wrote {out} ({matrix['seconds']} s)")
    elif not only_list:
        compat = engine.repo / "docs" / "compat.md"
        old = compat.read_text() if compat.is_file() else ""
        atomic_write(compat, with_section(old, matrix["line"], text).encode())
        progress(f"[matrix] wrote the {matrix['line']} line's section of {compat} ({matrix['seconds']} s)")
    return 1 if any(c.get("error") for c in matrix["columns"]) else 0
