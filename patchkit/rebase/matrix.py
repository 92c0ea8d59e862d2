"""`apply.py rebase --matrix`: the series dry-run against the pin and every release of the lead upstream after
it (each with the other pins that release requires), as a table patch x release and a JSON form; then, for
each other upstream, its own series dry-run onto each of its releases newer than any the lead's releases in
the table require (the lead held at its pin, with --force: no lead release accepts them yet), as a second
table whose headers say what the newest lead release requires instead.

Each column is one `rebase --dry-run` (run.py, in a temporary directory; nothing in the repository is
written but the table file). A cell is the patch's result on that release:

  applies      clean, or at an offset / following a move / by a 3-way merge
  conflict     stops for a hand resolution (text conflict, or a clean merge that breaks the module)
  upstream     already in the release
  superseded   upstream does its job another way (Superseded-By)
  not reached  applies, but the release routes around it (Reach conditions)
  partly reached (c/n)  reached on c of n calls: reach.toml's recorded figure holds there (reach.py)
  stale        a reach condition's file or anchor is gone: nobody knows
  fails check  (the pin's column, which is `apply.py check` on the pin) the patch is not exact there
A conflict that is also not reached, partly reached or stale says both ("conflict, not reached").
"""
from __future__ import annotations

import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

from .. import PatchkitError, UsageError, jsonio
from ..fsio import atomic_write
from ..lockfile import version_key
from .reach import load_models, load_partly
from .requires import is_version, release_versions, requirement, requires_dist, satisfies
from .state import CLEAN, CONFLICT, OFFSET, RESOLVED, SUPERSEDED, UPSTREAM

APPLIES, NOT_REACHED, STALE, FAILS_CHECK = "applies", "not reached", "stale", "fails check"
PARTLY = "partly reached"
LEGEND = ("applies: clean, at an offset, following a move or by a 3-way merge; conflict: needs a hand resolution "
          "(a text conflict, or a clean merge that shadows a definition or leaves a name undefined); upstream: "
          "already in the release; superseded: upstream does its job another way (Superseded-By); not reached: "
          "the release routes around it (Reached-If/Unreached-If); partly reached (c/n): its code runs on c of n "
          "calls there (the figure recorded in the series' reach.toml, below); stale: a condition's file or anchor is gone; "
          "fails check (pin column): `apply.py check` finds the patch not exact on its own pin")


def cell(result: dict) -> str:
    r = result["result"]
    if r == UPSTREAM:
        return "upstream"
    if r == SUPERSEDED:
        return "superseded"
    extra = (f"{PARTLY} ({result['partly']})" if result.get("partly") else NOT_REACHED if result["unreached"]
             else STALE if result["stale"] else "")
    if r == CONFLICT:
        return "conflict" + (f", {extra}" if extra else "")
    if r in (CLEAN, OFFSET, RESOLVED):
        return extra or APPLIES
    return r


def _column(engine, start, lead: str, version: str, progress, force: bool = False) -> dict:
    """One release: the dry run's JSON report and each patch's cell."""
    with tempfile.TemporaryDirectory(prefix="patchkit-matrix-") as tmp:
        report = Path(tmp) / "report.json"
        t0 = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()):
            start(engine, {lead: version}, True, str(report), force=force)
        data = jsonio.read(report, "a dry run's report",
                           lambda d: None if isinstance(d, dict) else "expected a JSON object")
        data = data if data is not None else {"upstreams": [], "pins_moved": []}
    progress(f"[matrix] {lead} {version}: {time.monotonic() - t0:.0f} s")
    pins = {n: u.version for n, u in engine.lock.upstreams.items()}
    cells = {}
    for e in data["upstreams"]:
        pins[e["name"]] = e["pin"]["version"]
        for r in e["results"]:
            cells[f"{e['name']}/{r['patch']}"] = cell(r)
    return {"version": version, "pins": pins, "pins_moved": data.get("pins_moved", []), "cells": cells,
            "forced": data.get("forced", {}), "report": data}


def pin_cells(engine) -> dict[str, str]:
    """The pin's column from `check` on the pinned release itself (exact and round-tripping: applies), and
    reach.toml's figures where they hold on the pin with the series applied."""
    from ..check import check_repository

    cells = {}
    for f in check_repository(engine, log=lambda *_: None):
        if f.upstream in engine.lock.upstreams and not f.item.startswith("overlay/"):
            cells[f"{f.upstream}/{f.item}"] = (FAILS_CHECK if f.errors else NOT_REACHED if f.warnings else APPLIES)
    for name in engine.lock.upstreams:
        series = engine.series(name)
        partly = load_partly(series.directory, series.patches, lambda _: None)     # build_matrix warns
        if not partly:
            continue
        chain, pristine = engine.chain(name), engine.pristine(name)

        def read(path, chain=chain, pristine=pristine):
            if path in chain.files:
                return chain.files[path].final
            return pristine.read(path) if pristine.has(path) else None
        for patch, record in partly.items():
            key = f"{name}/{patch}"
            if cells.get(key) in (APPLIES, NOT_REACHED) and record.holds(read):
                cells[key] = f"{PARTLY} ({record.fraction})"
    return cells


def _evaluate(engine, start, progress, name: str, versions: list[str], patches: list[str], pin_column,
              force: bool = False) -> list[dict]:
    columns = [pin_column] if pin_column else []
    for v in versions:
        if v == engine.lock.upstream(name).version:
            continue
        try:
            col = _column(engine, start, name, v, progress, force)
        except PatchkitError as exc:
            col = {"version": v, "pins": {}, "pins_moved": [], "cells": {p: "error" for p in patches},
                   "error": str(exc)}
        for p in patches:             # a series that gained no entry (an upstream not moved): applies as pinned
            col["cells"].setdefault(p, APPLIES)
        columns.append(col)
    return columns


def _selection(names: list[str], only: list[str] | None) -> dict[str, list[str]] | None:
    """--releases V1,NAME=V2: upstream -> the releases named (a bare version is the lead's)."""
    if only is None:
        return None
    out: dict[str, list[str]] = {n: [] for n in names}
    for item in only:
        name, sep, version = item.partition("=")
        if not sep:
            name, version = names[0], item
        if name not in out or not version:
            raise UsageError(f"rebase --matrix --releases: expected VERSION or NAME=VERSION with NAME one of "
                             f"{', '.join(names)}, found {item!r}")
        out[name].append(version)
    return out


def _others(engine, start, progress, lead, columns, picked, cells) -> list[dict]:
    """Each other upstream's own releases beyond those the lead's columns require, the lead held at its pin."""
    leads = sorted({c["version"] for c in columns if not c.get("error")} | {lead.version}, key=version_key,
                   reverse=True)
    newest = leads[0]
    out = []
    for name, up in engine.lock.upstreams.items():
        if name == lead.name:
            continue
        patches = [f"{name}/{p.name}" for p in engine.series(name).patches]
        if picked is None:
            covered = max([c["pins"].get(name, up.version) for c in columns] + [up.version], key=version_key)
            versions = release_versions(up.package, covered)
        else:
            versions = picked[name]
        if not versions:
            continue
        pin_column = None
        if up.version in versions or picked is None:
            pin_column = {"version": up.version, "pin": True, "pins": {lead.name: lead.version, name: up.version},
                          "pins_moved": [], "cells": {p: cells[p] for p in patches}}
        walked = _evaluate(engine, start, progress, name, versions, patches, pin_column, force=True)
        for c in walked:
            c["lead_requires"] = _accepted_by(lead, leads, up.package, c["version"])
        out.append({"upstream": name, "held": {lead.name: lead.version}, "newest_lead": newest,
                    "patches": patches, "columns": walked})
    return out


def _accepted_by(lead, leads: list[str], package: str, version: str) -> str:
    """The newest lead release of the table whose requirement admits `package` `version`, or what the newest
    one requires (`leads`: newest first)."""
    for lv in leads:
        spec = requirement(requires_dist(lead.package, lv, lead.artifact), package)
        if not spec or satisfies(version, spec):
            return f"{lead.name} {lv} accepts it"
    spec = requirement(requires_dist(lead.package, leads[0], lead.artifact), package)
    return f"{lead.name} {leads[0]} requires {spec.lstrip('=')}"


def build_matrix(engine, start, progress, after: str | None = None, only: list[str] | None = None) -> dict:
    names = list(engine.lock.upstreams)
    lead = engine.lock.upstream(names[0])
    picked = _selection(names, only)
    versions = picked[lead.name] if picked else release_versions(lead.package, after or lead.version)
    patches = [f"{n}/{p.name}" for n in names for p in engine.series(n).patches]
    cells = pin_cells(engine)
    pin_column = {"version": lead.version, "pin": True,
                  "pins": {n: u.version for n, u in engine.lock.upstreams.items()}, "pins_moved": [],
                  "cells": cells}
    columns = _evaluate(engine, start, progress, lead.name, versions, patches,
                        pin_column if not picked or lead.version in versions else None)
    partly = {f"{n}/{p}": r.describe() for n in names
              for p, r in load_partly(engine.series(n).directory, engine.series(n).patches, progress).items()}
    models = [{"model": r.model, "forward": r.forward, "reaches": [f"{n}/{p}" for p in r.reaches],
               "upstream": list(r.upstream), "held_by": r.held_by}
              for n in names for r in load_models(engine.series(n).directory, engine.series(n).patches, progress)]
    return {"line": engine.lock.line, "lead": lead.name,
            "pin": {n: u.version for n, u in engine.lock.upstreams.items()},
            "patches": patches, "columns": columns,
            "others": _others(engine, start, progress, lead, columns, picked, cells), "partly": partly,
            "models": models}


TITLE = "# Compatibility matrix"
INTRO = ("Generated by `python apply.py rebase --matrix [--line NAME]` (do not edit): one section per release line, "
         "each line's series dry-run onto its pin and every later release of its lead upstream, then each other "
         "upstream's series onto its own releases that no lead release requires yet (`docs/rebase.md`).")


def _table(patches: list[str], columns: list[dict], label) -> list[str]:
    head = ["patch"] + [label(c) for c in columns]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in patches:
        rows.append("| " + " | ".join([f"`{p}`"] + [c["cells"][p] for c in columns]) + " |")
    return rows


def other_heading(name: str) -> str:
    return f"### {name} releases"


def markdown(matrix: dict) -> str:
    """One line's section: heading, sentence, the lead's table, each other upstream's table, legend, figures."""
    lead = matrix["lead"]
    others = [n for n in matrix["pin"] if n != lead]

    def label(c):
        return (f"{lead} {c['version']}" + (" (pin)" if c.get("pin") else "")
                + "".join(f"<br>{n} {c['pins'].get(n, '?')}" for n in others))
    rows = _table(matrix["patches"], matrix["columns"], label) if matrix["columns"] else []
    errors = [f"- {lead} {c['version']}: {c['error']}" for c in matrix["columns"] if c.get("error")]
    pins = ", ".join(f"{n} {v}" for n, v in matrix["pin"].items())
    later = len(matrix["columns"]) - 1
    text = [f"## {matrix['line']} line", ""]
    if rows:
        text += [f"The series pinned to {pins} dry-run onto every later {lead} release, each with the "
                 f"{', '.join(others) or 'other'} release it requires"
                 + ("" if later else f" (no {lead} release after the pin yet)") + ".", "", *rows, ""]
    for o in matrix.get("others", []):
        name, held = o["upstream"], o["held"][lead]
        errors += [f"- {name} {c['version']}: {c['error']}" for c in o["columns"] if c.get("error")]
        text += [other_heading(name), "",
                 f"The {name} series dry-run onto its pin and each {name} release newer than any the {lead} "
                 f"releases above require, {lead} held at its pin {held} (as `rebase --to {name}=VERSION --force` "
                 f"would); each column head names the newest {lead} release that accepts it, or what the newest, "
                 f"{o['newest_lead']}, requires.", "",
                 *_table(o["patches"], o["columns"], lambda c, name=name: f"{name} {c['version']}"
                         + (" (pin)" if c.get("pin") else "") + f"<br>{c['lead_requires']}"), ""]
    text.append(LEGEND + ".")
    shown = [p for p, d in matrix.get("partly", {}).items()
             if any(PARTLY in c["cells"].get(p, "") for t in [matrix] + matrix.get("others", [])
                    for c in t["columns"])]
    if shown:
        text += ["", "Partly reached (the figure and its provenance as the series' reach.toml records them):",
                 *[f"- `{p}`: {matrix['partly'][p]}" for p in shown]]
    if matrix.get("models"):
        text += ["", *_model_table(matrix)]
    if errors:
        text += ["", "Releases that could not be evaluated:", *errors]
    return "\n".join(text) + "\n"


MODEL_HEADING = "### Reach by model"     # its own heading: parse_markdown reads a table by the heading above it


def _model_table(matrix: dict) -> list[str]:
    """The series' [[model]] rows (reach.py): per model and forward, what of the series runs on the pin."""
    pins = ", ".join(f"{n} {v}" for n, v in matrix["pin"].items())
    rows = ["| model | forward | the series' code it runs | upstream paths it takes | held by |", "|---|---|---|---|---|"]
    for m in matrix["models"]:
        ours = ", ".join(f"`{p}`" for p in m["reaches"]) or "none"
        rows.append(f"| {m['model']} | {m['forward']} | {ours} | {'<br>'.join(m['upstream'])} | `{m['held_by']}` |")
    return [MODEL_HEADING, "", f"On the pin ({pins}), as the series' reach.toml records it; each row is held by the "
            "test it names, which drives the release's own dispatch:", "", *rows]


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


def parse_markdown(text: str, line: str | None = None, upstream: str | None = None) -> dict[str, dict[str, str]]:
    """version -> {patch: cell} from the table markdown() wrote (`line`'s section, or the only table there is):
    the lead's table, or with `upstream` the table of that upstream's own releases."""
    if line is not None:
        sections = _sections(text)
        if line not in sections:
            raise PatchkitError(f"compat.md: expected a '## {line} line' section, found {', '.join(sections) or 'none'}")
        text = sections[line]
    lines, current = [], None
    for line_text in text.splitlines():
        if line_text.startswith("### "):
            current = line_text
        elif line_text.startswith("| ") and current == (other_heading(upstream) if upstream else None):
            lines.append(line_text)
    if not lines:
        raise PatchkitError(f"compat.md: expected a table{f' under {other_heading(upstream)!r}' if upstream else ''}"
                            f"{f' in the {line} line' if line else ''}, found none")
    head = [h.strip() for h in lines[0].strip("|").split("|")]
    versions = [h.split("<br>")[0].split(" ")[1] for h in head[1:]]
    out: dict[str, dict[str, str]] = {v: {} for v in versions}
    for line_text in lines[1:]:
        cells = [c.strip() for c in line_text.strip("|").split("|")]
        for v, c in zip(versions, cells[1:]):
            out[v][cells[0].strip("`")] = c
    return out


def check_arguments(after: str | None, only: str | None) -> None:
    """Refuse a --from or --releases that names no version, before anything is locked, fetched or written."""
    if after is not None and not is_version(after):
        raise UsageError(f"rebase --matrix --from: expected a version (e.g. 1.2.3), found {after!r}")
    for item in (only or "").split(","):
        version = item.strip().partition("=")[2] if "=" in item else item.strip()
        if item.strip() and not is_version(version):
            raise UsageError(f"rebase --matrix --releases: expected VERSION or NAME=VERSION with a version "
                             f"(e.g. 1.2.3), found {item.strip()!r}")


def run_matrix(engine, start, progress, after: str | None, only: str | None, json_out: str | None,
               out: str | None) -> int:
    only_list = [v.strip() for v in only.split(",") if v.strip()] if only else None
    if only and not only_list:
        raise UsageError("rebase --matrix --releases: expected VERSION[,NAME=VERSION...], found none")
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
    tables = [matrix] + matrix["others"]
    return 1 if any(c.get("error") for t in tables for c in t["columns"]) else 0
