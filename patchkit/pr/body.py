"""Write an upstream pull-request description from a patch header and the evidence it names."""
from __future__ import annotations

import re
from pathlib import Path

from ..patchfile import PatchFile

# Trailers that only mean something to this overlay; they do not go into the upstream commit.
OVERLAY_TRAILERS = {"upstream-status", "evidence", "test", "overlay", "reached-if", "unreached-if", "superseded-by",
                    "superseded-kept"}
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_section(text: str, anchor: str) -> str | None:
    """The section of a Markdown document that `#anchor` points at (heading slug or an explicit id)."""
    lines = text.splitlines()
    start = level = None
    explicit = re.compile(r"""(?:id|name)\s*=\s*["']%s["']|\{#%s\}""" % (re.escape(anchor), re.escape(anchor)))
    for i, line in enumerate(lines):
        m = _HEADING_RE.match(line)
        if m and slug(m.group(2)) == anchor or explicit.search(line):
            start = i
            break
    if start is None:
        return None
    for j in range(start, len(lines)):
        m = _HEADING_RE.match(lines[j])
        if m:
            start, level = j, len(m.group(1))
            break
    end = len(lines)
    for j in range(start + 1, len(lines)):
        m = _HEADING_RE.match(lines[j])
        if m and level is not None and len(m.group(1)) <= level:
            end = j
            break
    return "\n".join(lines[start:end]).strip()


def _demote(markdown: str) -> str:
    """Headings one level down (outside code fences), so a quoted section nests under '## Evidence'."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        out.append("#" + line if not fenced and _HEADING_RE.match(line) and not line.startswith("######") else line)
    return "\n".join(out)


def commit_message(patch: PatchFile) -> str:
    """Subject, body, and only the trailers that are meaningful upstream (e.g. Signed-off-by)."""
    kept = [f"{k}: {v}" for k, v in patch.trailers if k.lower() not in OVERLAY_TRAILERS]
    parts = [patch.subject, patch.body.strip()] + (["\n".join(kept)] if kept else [])
    return "\n\n".join(p for p in parts if p) + "\n"


def _evidence(value: str, repo: Path) -> str:
    target, _, anchor = value.partition("#")
    path = repo / target
    if anchor and path.is_file():
        section = markdown_section(path.read_text(encoding="utf-8"), anchor)
        if section:
            return f"From `{value}` in the overlay repository:\n\n{_demote(section)}"
        return f"`{value}`: the overlay repository's {target} has no section #{anchor} yet."
    if path.is_file():
        return f"`{value}` in the overlay repository (red on the unpatched release, green with this change)."
    return f"`{value}` (not found in the overlay repository)."


def pr_body(patch: PatchFile, repo: Path, files: list[tuple[str, str]], base: str) -> str:
    """files: (repo-layout path, 'modified' | 'new file' | 'deleted')."""
    out = [f"# {patch.subject}", "", "## Motivation", "", patch.body.strip() or "(no description in the patch header)",
           "", "## Change", "", f"One commit on {base}:", ""]
    out += [f"- `{path}` ({what})" for path, what in files]
    out += ["", "## Evidence", ""]
    evidence = patch.trailer("Evidence")
    out += [_evidence(v, repo) + "\n" for v in evidence] or ["(the patch names no evidence)", ""]
    out += ["## Test plan", ""]
    tests = patch.trailer("Test")
    out += [f"- [ ] `python -m pytest -q {t}` (overlay repository): fails on the unpatched release, passes with this change"
            for t in tests] or ["- [ ] (the patch names no test)"]
    out += ["- [ ] the upstream test suite for the touched modules"]
    status = patch.trailer("Upstream-Status")
    if status:
        out += ["", f"Upstream-Status in the overlay: {status[0]}"]
    return "\n".join(out).rstrip() + "\n"
