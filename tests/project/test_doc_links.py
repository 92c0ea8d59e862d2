"""Every path and anchor the project's own texts cite resolves (no GPU, no network).

The texts: README.md, ARCHITECTURE.md, BENCHMARKS.md, CHANGELOG.md, every Markdown guide or note (docs/, bench/,
the run records), each patch's header and each upstream-pr.toml. What they cite: Markdown links (`[x](path#anchor)`),
bare `FILE.md#anchor` references, and repository paths in backticks (`tests/engine/test_engine.py::test_x`). A renamed
file, a moved section or a heading reworded under a citation fails here, naming the text, the line and the target.
Raw outputs (bench/runs/ but each run's RUN.md and the INDEX.md) are not texts of the project: they are recorded as they were printed.
"""
from __future__ import annotations

import glob
import re
import subprocess
from functools import cache
from pathlib import Path

from tests.project.test_docs_consistency import repo_files, slug

REPO = Path(__file__).resolve().parents[2]
# Top-level directories whose paths a text may cite in backticks (build/ and venvs are outputs, not sources).
CITABLE = ("patchkit", "serving", "harness", "bench", "tests", "docs", "overlay", "patches", "lint", ".ci")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
MD_REF = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)#([\w-]+)")
CODE_PATH = re.compile(r"`((?:%s)/[^`\s]*)`" % "|".join(re.escape(d) for d in CITABLE))
# The same outside backticks, where a file is named in prose: `docs/usage.md`, tests/engine/test_engine.py.
BARE_PATH = re.compile(r"(?<![\w/.`-])((?:%s)/[\w./{},*-]*\.(?:md|py|toml|txt|json|sh|patch|png))(?!\.?[\w`])"
                       % "|".join(re.escape(d) for d in CITABLE))
# Placeholders a text writes in a path's place (patches/<line>/..., overlay/NAME/): not a citation of one file.
PLACEHOLDER = re.compile(r"[<>$]|\.\.\.|(?<![a-z])(NAME|LINE|UPSTREAM|NNNN|DATE|X)\b")
COMMIT = re.compile(r"\bcommit ([0-9a-f]{7,40})\b")


def texts() -> dict[str, str]:
    """{path: text} of every text that cites (raw outputs under results and run folders excluded)."""
    out = {}
    for f in repo_files():
        p = REPO / f
        if f.endswith(".md"):
            raw_dir = f.startswith("bench/runs/")
            if raw_dir and Path(f).name not in ("INDEX.md", "RUN.md"):
                continue
            out[f] = p.read_text()
        elif f.startswith("patches/") and f.endswith(".patch"):
            out[f] = p.read_text().split("\ndiff --git ", 1)[0]
        elif f.startswith("patches/") and f.endswith("upstream-pr.toml"):
            out[f] = p.read_text()
    return out


@cache
def anchors(text: str) -> frozenset[str]:
    """GitHub's anchors of a Markdown text's headings (those in code blocks are not headings; repeats get -N)."""
    seen: dict[str, int] = {}
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.*)", line)
        if m:
            base = slug(re.sub(r"`", "", m.group(1)))
            n = seen.get(base, 0)
            seen[base] = n + 1
            seen.setdefault(f"{base}-{n}" if n else base, 1)
    return frozenset(seen)


def resolve(citing: str, target: str, anchor: str | None, *, from_root: bool,
            edited: dict[str, str]) -> str | None:
    """None when `target#anchor` exists, as cited from `citing`; else what is wrong, in a few words."""
    bases = [REPO / Path(citing).parent] + ([REPO] if from_root else [])
    for base in bases:
        path = (base / target).resolve() if target else REPO / citing
        if path.exists():
            rel = path.relative_to(REPO).as_posix()
            if anchor and path.suffix == ".md" and anchor not in anchors(edited.get(rel) or path.read_text()):
                return f"no section #{anchor} in {rel}"
            return None
    return f"no such path {target}"


def paragraph(lines: list[str], i: int) -> str:
    """The lines around line i up to the blank lines that bound them."""
    start, end = i, i
    while start > 0 and lines[start - 1].strip():
        start -= 1
    while end + 1 < len(lines) and lines[end + 1].strip():
        end += 1
    return "\n".join(lines[start:end + 1])


def code_targets(cited: str) -> list[str]:
    """The files a backticked path names: `::test` and `:line` dropped, {a,b} and * expanded."""
    cited = re.split(r"::|:(?=\d)", cited)[0].rstrip(".,;:)")
    m = re.search(r"\{([^}]*)\}", cited)
    names = [cited[:m.start()] + part + cited[m.end():] for part in m.group(1).split(",")] if m else [cited]
    return names


def archived_entries() -> set[str]:
    """Run folders archived out of the tree (bench/runs/INDEX.md), cited by the path they had in the commit that
    holds them (bench/results/ then): restorable from git."""
    index = REPO / "bench" / "runs" / "INDEX.md"
    text = index.read_text().partition("## Archived")[2] if index.exists() else ""
    return {f"bench/results/{name.rstrip('/')}" for name in re.findall(r"^\| `([^`]+)` \|", text, re.M)}


def in_commit(commit: str, path: str) -> bool:
    probe = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}:{path.rstrip('/')}"],
                           capture_output=True)
    return probe.returncode == 0


def exists(name: str, paragraph: str, archived: set[str]) -> bool:
    """The path is in the tree, is `module.function` of a module in the tree, lies in an archived result folder,
    or is removed code its paragraph cites with the commit that holds it."""
    if glob.glob(str(REPO / name)) if "*" in name else (REPO / name).exists():
        return True
    if "." in Path(name).name and (REPO / (name.rsplit(".", 1)[0] + ".py")).is_file():
        return True
    if any(name.rstrip("/") == a or name.startswith(a + "/") for a in archived):
        return True
    return any(in_commit(c, name) for c in COMMIT.findall(paragraph))


def broken_citations(edited: dict[str, str] | None = None) -> list[str]:
    """Every citation that does not resolve; `edited` stands in for some files' text (the check's own test)."""
    edited = edited or {}
    broken, archived = [], archived_entries()
    for citing, text in {**texts(), **edited}.items():
        lines = text.splitlines()
        for lineno, line in enumerate(lines, 1):
            where = f"{citing}:{lineno}"
            if citing.endswith(".md"):
                for link in MD_LINK.findall(line):
                    if re.match(r"[a-z]+:", link):   # http:, https:, mailto:
                        continue
                    target, _, anchor = link.partition("#")
                    if problem := resolve(citing, target, anchor or None, from_root=False, edited=edited):
                        broken.append(f"{where}: ({link}): {problem}")
            for target, anchor in MD_REF.findall(line):
                if f"]({target}#{anchor})" in line:
                    continue    # a Markdown link, checked above
                if problem := resolve(citing, target, anchor, from_root=True, edited=edited):
                    broken.append(f"{where}: {target}#{anchor}: {problem}")
            # upstream-pr.toml speaks of upstream's tree (its tests/...): only its Markdown references are ours
            cited = [] if citing.endswith(".toml") else CODE_PATH.findall(line) + BARE_PATH.findall(line)
            if citing.endswith(".patch"):
                cited += [t.strip() for key in ("Test: ", "Evidence: ") if line.startswith(key)
                          for t in line[len(key):].split(",") if "#" not in t]
            for path in cited:
                if PLACEHOLDER.search(path) or path.startswith("build/"):
                    continue
                for name in code_targets(path):
                    if not exists(name, paragraph(lines, lineno - 1), archived):
                        broken.append(f"{where}: `{path}`: no such path {name}")
    return broken


def test_every_cited_path_and_anchor_resolves():
    broken = broken_citations()
    assert not broken, f"expected every cited path and section to exist, found {len(broken)} broken:\n" + \
        "\n".join(broken[:40])


def test_a_heading_reworded_under_a_citation_is_caught():
    """The check itself: a cited section renamed (in memory) is reported with the citing line."""
    bench = (REPO / "BENCHMARKS.md").read_text()
    cited = sorted({a for t in texts().values() for a in re.findall(r"BENCHMARKS\.md#([\w-]+)", t)})
    assert cited, "expected some text to cite a BENCHMARKS.md section, found none"
    heading = next(line for line in bench.splitlines()
                   if re.match(r"#{1,6} ", line) and slug(line.lstrip("#").replace("`", "")) == cited[0])
    renamed = bench.replace(heading + "\n", heading + " (renamed)\n")
    assert any(f"#{cited[0]}: no section" in b for b in broken_citations({"BENCHMARKS.md": renamed}))
