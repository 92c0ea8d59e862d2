"""A project's pull-request template (`.github/pull_request_template.md` at the PR's base) filled in.

The template's own `## ` sections are kept in its order and wording. A section whose heading says what it
wants (motivation, modifications/changes/description, accuracy/tests, benchmark/profiling/performance,
related issues) gets that content in place of its HTML guidance comment; a section's checkboxes stay, the
content follows them (the author ticks them). Every other section (a checklist, a review process) is kept
as the template has it. Content the template has no section for goes where a reader looks for it: the
motivation at the head of the description (a template with one "Description" asks for what and why), the
related issues after the motivation; anything else is added at the end under a heading of its own, so
nothing measured is dropped. An empty kind is "N/A" in its own section and absent otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

TEMPLATE_PATHS = (".github/pull_request_template.md", ".github/PULL_REQUEST_TEMPLATE.md",
                  "docs/pull_request_template.md", "pull_request_template.md")
# Used where the base has no template: the sections most projects' templates ask for.
DEFAULT_TEMPLATE = "## Motivation\n\n## Modifications\n\n## Accuracy Tests\n\n## Benchmarking and Profiling\n"
KINDS = {  # kind -> what a heading asking for it says
    "issues": re.compile(r"issue|related", re.I),
    "motivation": re.compile(r"motivation|purpose|why|background", re.I),
    "modifications": re.compile(r"modification|change|description|summary|what", re.I),
    "accuracy": re.compile(r"accuracy|correctness|test", re.I),
    "benchmark": re.compile(r"benchmark|profil|performance|speed", re.I),
}
FALLBACK_HEADINGS = {"issues": "Related Issues", "motivation": "Motivation", "modifications": "Modifications",
                     "accuracy": "Accuracy Tests", "benchmark": "Benchmarking and Profiling"}
# Where content of a kind the template has no section for goes: (the kind whose section takes it, first or last).
MERGED_INTO = {"motivation": ("modifications", "first"), "issues": ("motivation", "last")}
_CHECKBOX_RE = re.compile(r"^\s*[-*] \[[ xX]\]", re.M)
_COMMENT_RE = re.compile(r"<!--.*?-->\s*", re.S)
_HEADING_RE = re.compile(r"^(#{1,3})\s+(.+?)\s*#*\s*$")


@dataclass
class Section:
    heading: str        # the heading line as written ('' for the text before the first heading)
    title: str
    text: str           # everything after the heading line up to the next heading


def sections(template: str) -> list[Section]:
    out, fenced = [Section("", "", "")], False
    for line in template.splitlines(keepends=True):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        m = None if fenced else _HEADING_RE.match(line.rstrip("\n"))
        if m:
            out.append(Section(line.rstrip("\n"), m.group(2), ""))
        else:
            out[-1].text += line
    return out


def kind_of(title: str, taken: set[str]) -> str | None:
    """The first content kind a heading asks for that no earlier section took ('Accuracy Tests' is accuracy,
    not a test plan: the order of KINDS decides)."""
    for kind, rx in KINDS.items():
        if kind not in taken and rx.search(title):
            return kind
    return None


def _placed(template: str, content: dict[str, str]) -> dict[str, str]:
    """content re-keyed onto the kinds the template has sections for (MERGED_INTO), in merge order."""
    taken = set()
    for sec in sections(template):
        kind = kind_of(sec.title, taken) if sec.heading else None
        if kind:
            taken.add(kind)
    out = dict(content)
    for kind, (into, where) in MERGED_INTO.items():
        if kind in taken or kind not in out:
            continue
        text = out.pop(kind).strip()
        target = into
        while target not in taken and target in MERGED_INTO and target not in out:
            target = MERGED_INTO[target][0]
        if target not in taken and target not in out:
            out[kind] = text      # nowhere to merge: a section of its own at the end
            continue
        if text:
            parts = [text, out.get(target, "").strip()] if where == "first" else [out.get(target, "").strip(), text]
            out[target] = "\n\n".join(p for p in parts if p)
    return out


def fill(template: str, content: dict[str, str], preamble: str = "") -> str:
    """The template with each known section's guidance comment replaced by content[kind] (its checkboxes kept)."""
    content = _placed(template, content)
    parts, taken = [], set()
    for sec in sections(template):
        if not sec.heading:
            # text before the first heading (usually a thank-you comment): dropped, the PR starts with ours
            if preamble:
                parts.append(preamble.strip() + "\n")
            continue
        kind = kind_of(sec.title, taken)
        kept = _COMMENT_RE.sub("", sec.text).strip()
        if kind and kind in content:
            taken.add(kind)
            text = content[kind].strip() or "N/A"
            boxes = kept if _CHECKBOX_RE.search(kept) else ""
            parts.append(f"{sec.heading}\n\n" + (f"{boxes}\n\n" if boxes else "") + f"{text}\n")
        else:
            parts.append(f"{sec.heading}\n" + (f"\n{kept}\n" if kept else ""))
    for kind, text in content.items():
        if kind not in taken and text.strip():
            parts.append(f"## {FALLBACK_HEADINGS[kind]}\n\n{text.strip()}\n")
    return "\n".join(p.rstrip() + "\n" for p in parts)
