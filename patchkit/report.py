"""Plain-text tables for the CLI."""
from __future__ import annotations

import sys

from .state import TargetState


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def format_state(state: TargetState) -> str:
    """Per patch and overlay file its state (and, after a write, the state it came from), then the summary."""
    rows = []
    prev = {}
    if state.before:
        for u in state.before.upstreams:
            for p in u.patches:
                prev[(u.name, p.name)] = p.state
            for path, s in u.overlay:
                prev[(u.name, path)] = s
    for u in state.upstreams:
        if not u.present:
            rows.append([u.name, "(not in target)", "-", ""])
            continue
        for p in u.patches:
            change = f"{prev[(u.name, p.name)]} -> " if (u.name, p.name) in prev and prev[(u.name, p.name)] != p.state else ""
            rows.append([u.name, p.name, change + p.state, p.subject[:60]])
        for path, s in u.overlay:
            change = f"{prev[(u.name, path)]} -> " if (u.name, path) in prev and prev[(u.name, path)] != s else ""
            rows.append([u.name, f"overlay/{path}", change + s, ""])
    out = [table(rows, ["upstream", "patch", "state", "subject"])]
    for u in state.upstreams:
        if u.present:
            out.append(f"{u.name}: checked against {u.pin}"
                       + ("" if u.version_ok else f"; target holds {u.found_version}"))
            for f in u.modified:
                out.append(f"  modified: {f.path} matches no pinned or patched state")
            for f in u.leftover:
                out.append(f"  outdated: {f.path} was patched by an earlier series; apply or revert restores it")
    if state.running is not None:
        pid, command = state.running
        out.append(f"'{command}' is running (pid {pid}, holding the target's lock): the states above are mid-write; "
                   "run status again when it has finished")
    elif state.journal is not None:
        out.append(f"journal present: a '{state.journal.get('op')}' was interrupted; run apply or revert to finish it")
        if state.journal.get("malformed"):
            out.append(f"  the journal is malformed ({state.journal['malformed']}); apply or revert replaces it")
    for rel in state.temp_files if state.running is None else ():
        out.append(f"temp file left by an interrupted run: {rel} (apply or revert removes it)")
    out.append(f"target {state.target}: {state.summary}")
    return "\n".join(out)


def printable_streams() -> None:
    """stdout/stderr that cannot encode a character (LC_ALL=C, PYTHONIOENCODING=latin-1) escape it instead
    of raising: a report is never what fails a command, and never after its writes. Every command's main
    (patchkit's CLI, serving's modules) calls it first."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
