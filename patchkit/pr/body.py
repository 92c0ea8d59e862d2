"""The pull-request description and the commit message of one exported patch, from its upstream data.

Both come from `upstream-pr.toml` (prdata.py), never from the patch header's prose, which is written for
this repository. Measured results are inlined with the GPU, versions, command and date they were taken
with (the command only where it runs in an upstream checkout; a standalone harness is said to be one);
the reproduction commands and what the unittest runs where are stated from the data, and a
reproduction nobody has measured yet is said to be unmeasured. The base's own PR template decides the
sections (template.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..patchfile import PatchFile
from .prdata import Measured, UpstreamPR
from .template import fill

# Trailers that only mean something to this overlay; they never go into the upstream commit.
OVERLAY_TRAILERS = {"upstream-status", "evidence", "test", "overlay", "reached-if", "unreached-if",
                    "depends-on", "superseded-by", "superseded-kept"}
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")


@dataclass
class Stack:
    """Where a PR sits in a stack: its place, and the PR (branch, title) it builds on."""
    index: int = 0              # 1-based; 0 = not part of a numbered series
    total: int = 0
    parent_branch: str = ""
    parent_title: str = ""


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_section(text: str, anchor: str) -> str | None:
    """The section of a Markdown document that `#anchor` points at (heading slug or an explicit id).
    Lines inside code fences are never headings (a `# comment` in a shell block does not end a section)."""
    lines = text.splitlines()
    headings, fenced = {}, False   # line number -> level
    for i, line in enumerate(lines):
        if _FENCE_RE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING_RE.match(line)
        if m:
            headings[i] = (len(m.group(1)), m.group(2))
    explicit = re.compile(r"""(?:id|name)\s*=\s*["']%s["']|\{#%s\}""" % (re.escape(anchor), re.escape(anchor)))
    start = next((i for i, (_, title) in headings.items() if slug(title) == anchor), None)
    if start is None:
        marker = next((i for i, line in enumerate(lines) if explicit.search(line)), None)
        start = next((i for i in sorted(headings) if marker is not None and i >= marker), None)
    if start is None:
        return None
    level = headings[start][0]
    end = next((i for i in sorted(headings) if i > start and headings[i][0] <= level), len(lines))
    return "\n".join(lines[start:end]).strip()


def title(pr: UpstreamPR, stack: Stack) -> str:
    return f"[{stack.index}/{stack.total}] {pr.title}" if stack.total else pr.title


def commit_message(patch: PatchFile, pr: UpstreamPR) -> str:
    """Title, the upstream motivation, and only trailers meaningful upstream (e.g. Signed-off-by)."""
    kept = [f"{k}: {v}" for k, v in patch.trailers if k.lower() not in OVERLAY_TRAILERS]
    parts = [pr.title, pr.motivation] + (["\n".join(kept)] if kept else [])
    return "\n\n".join(p for p in parts if p) + "\n"


TEST_PARTS_TEXT = {
    ("cpu", "gpu"): "its CPU part runs without a GPU, its GPU part skips without CUDA",
    ("gpu",): "GPU only: it skips without CUDA",
    ("cpu",): "runs without a GPU",
}
# What each reproduction command shows, and in which section it is quoted.
REPRODUCE_SECTIONS = {"accuracy": ("server", "accuracy"), "benchmark": ("server", "benchmark")}


def test_description(parts: tuple[str, ...]) -> str:
    """The Modifications line of the unittest a PR adds, from what of it runs where."""
    return f"new unittest ({TEST_PARTS_TEXT[tuple(parts)]})"


def _measured(m: Measured) -> str:
    out = [m.result, ""] + ([f"- Model: {m.model}"] if m.model else [])
    out += [f"- GPU: {m.gpu}", f"- Versions: {m.versions}", f"- Date: {m.date}"]
    if m.harness == "upstream":
        out += ["- Command:", "", "```", m.command.strip(), "```"]
    else:
        out.append("- Measured with a standalone benchmark script that is not part of this PR")
    if m.rows:
        out += ["", "| " + " | ".join(m.columns) + " |", "|" + "---|" * len(m.columns)]
        out += ["| " + " | ".join(r) + " |" for r in m.rows]
    return "\n".join(out)


def _reproduction(pr: UpstreamPR, kind: str) -> str:
    """The upstream commands that reproduce this section's end-to-end result, and, when no result of the
    section was measured with upstream's own commands (harness = "upstream"), that it was not measured."""
    if kind not in pr.reproduce:
        return ""
    commands = "\n".join(pr.reproduce[k] for k in REPRODUCE_SECTIONS[kind] if k in pr.reproduce)
    measured = any(m.harness == "upstream" for m in getattr(pr, kind))
    what = "accuracy" if kind == "accuracy" else "throughput"
    status = "" if measured else f"\n\nEnd-to-end {what} with these commands: not measured yet."
    return f"To reproduce end to end, in a checkout of this branch:\n\n```\n{commands}\n```{status}"


def pr_body(pr: UpstreamPR, template: str, files: list[tuple[str, str]], base: str, stack: Stack,
            test_command: str = "") -> str:
    """files: (repo-layout path, what changes there), in commit order."""
    motivation = pr.motivation
    if stack.parent_branch:
        motivation = (f"Builds on `{stack.parent_branch}` (\"{stack.parent_title}\"): review and merge that "
                      f"PR first; this one adds a single commit on top of it.\n\n{motivation}")
    # a PR of a stack sits on the branch of the PR it builds on, not on the base
    on = f"`{stack.parent_branch}` (itself on `{base}`)" if stack.parent_branch else f"`{base}`"
    mods = [f"One commit on {on}:", ""] + [f"- `{path}`: {what}" for path, what in files]
    accuracy = [_measured(a) for a in pr.accuracy]
    if test_command:
        accuracy.append(f"Unit test added with this PR ({TEST_PARTS_TEXT[pr.test_parts]}):\n\n"
                        f"```\n{test_command}\n```" + (f"\n\n{pr.test_ask}" if pr.test_ask else ""))
    accuracy.append(_reproduction(pr, "accuracy"))
    benchmark = [_measured(b) for b in pr.benchmark]
    benchmark += [f"Benchmark added with this PR, in a checkout of this branch:\n\n```\n{run}\n```"
                  for run in pr.runs]
    benchmark.append(_reproduction(pr, "benchmark"))
    content = {"motivation": motivation, "modifications": "\n".join(mods),
               "issues": "\n".join(f"- {r.ref}: {r.why}" for r in pr.related),
               "accuracy": "\n\n".join(a for a in accuracy if a),
               "benchmark": "\n\n".join(b for b in benchmark if b)}
    return fill(template, content, preamble=f"# {title(pr, stack)}")
