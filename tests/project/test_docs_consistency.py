"""The repository's documents agree with the tree they describe (no GPU, no network).

* bench/runs/INDEX.md lists every raw output with its date and the section that cites it.
* ARCHITECTURE.md's layout names every top-level directory and every module of the code directories, and
  nothing that is gone.
* Measured numbers live in BENCHMARKS.md only (with date and raw output): README.md, docs/ and the patch headers
  cite its sections. The design notes (bench/notes/) are exempt: they are the record of probes, predictions
  and rejected variants, each table naming its raw file in bench/runs, and they cite BENCHMARKS.md for what
  shipped.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.saved_results import ARCHIVED_SUMS, index_parts

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "runs"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# Directories whose every module ARCHITECTURE.md's layout describes, one line each.
CODE_DIRS = ("patchkit", "serving", "harness", "bench", "overlay")
# A number with the unit of a measurement: time, rate, bandwidth, speed-up, percentage ("1.2x", "81%", "9.2 us",
# "0.40 / 6.0 ms" is caught at its last number). Bounds and targets ("<= 13 us", ">= 99%") are not measurements.
MEASURED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:\s?-\s?\d+(?:\.\d+)?)?"
                      r"(?:\s?(?:us|µs|ms|tok/s|tokens/s|GB/s|TB/s|TFLOP/s|GFLOP)|x|%)(?![\w/])")
# Datasheet figures, not measurements: (file, text).
HARDWARE_FACTS = {("docs/serving.md", "4.8 TB/s"), ("docs/serving.md", "1.8 TB/s"), ("docs/serving.md", "2.7x")}


def markdown_rows(text: str) -> list[list[str]]:
    """The body rows of every markdown table in `text`, as stripped cells (header and rule rows dropped)."""
    rows, in_table = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_table:
            in_table = True  # the header row
        elif not all(set(c) <= set("-: ") for c in cells):
            rows.append(cells)
    return rows


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def section(text: str, anchor: str) -> str | None:
    """The text from the heading whose anchor is `anchor` to the next heading of the same or a higher level."""
    lines, start, level = text.splitlines(), None, 0
    fence = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"(#+) (.*)", line)
        if not m:
            continue
        if start is None and slug(m.group(2)) == anchor:
            start, level = i, len(m.group(1))
        elif start is not None and len(m.group(1)) <= level:
            return "\n".join(lines[start:i])
    return "\n".join(lines[start:]) if start is not None else None


def results_index(archived: bool = False) -> dict[str, list[str]]:
    """INDEX.md's entries in the tree, or (archived=True) those archived out of it (tests/saved_results.py)."""
    rows = markdown_rows(index_parts()[1 if archived else 0])
    assert rows or archived, "bench/runs/INDEX.md has no table"
    return {r[0].strip("`"): r for r in rows}


def test_results_index_lists_exactly_what_is_there():
    present = {p.name + ("/" if p.is_dir() else "") for p in RESULTS.iterdir()
               if p.name not in ("INDEX.md", ARCHIVED_SUMS.name)}
    back = present & set(results_index(archived=True))
    assert not back, f"bench/runs/INDEX.md: expected archived {sorted(back)} out of the tree, found it there"
    listed = set(results_index())
    assert not present - listed, f"bench/runs/INDEX.md: expected an entry for {sorted(present - listed)}, found none"
    assert not listed - present, f"bench/runs/INDEX.md: lists {sorted(listed - present)}, found no such file"


def test_results_index_dates_and_citations_hold():
    for name, (_, date, produced_by, cited_in, *_rest) in {**results_index(), **results_index(archived=True)}.items():
        assert DATE.fullmatch(date) and name.startswith(date), \
            f"bench/runs/INDEX.md: {name}: expected a name starting with its date, found date {date!r}"
        assert produced_by, f"bench/runs/INDEX.md: {name}: says nothing of what produced it"
        stem = name.rstrip("/").split(".")[0]
        refs = [r.strip() for r in cited_in.split(",") if r.strip()]
        assert refs, f"bench/runs/INDEX.md: {name}: cited nowhere"
        for ref in refs:
            doc, _, anchor = ref.partition("#")
            assert (REPO / doc).is_file(), f"bench/runs/INDEX.md: {name}: expected {doc} to exist, found none"
            text = (REPO / doc).read_text()
            part = section(text, anchor) if anchor else text
            assert part is not None, f"bench/runs/INDEX.md: {name}: expected a section #{anchor} in {doc}, found none"
            assert stem in part, f"bench/runs/INDEX.md: {name}: {ref} does not mention it"


def repo_files() -> list[str]:
    """Paths of the files in the checkout, tracked or new, without what .gitignore ignores (build/, venvs...)."""
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout
        return sorted(f for f in out.splitlines() if (REPO / f).is_file())
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (e.g. an unpacked archive)
        skip = {".git", "build", "__pycache__", ".pytest_cache"}
        return sorted(str(f.relative_to(REPO)) for f in REPO.rglob("*")
                      if f.is_file() and not skip & set(f.relative_to(REPO).parts)
                      and not any(part.startswith((".venv", ".carry", ".whl")) for part in f.relative_to(REPO).parts))


def architecture_layout() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """ARCHITECTURE.md's layout block: {top-level entry: description}, {top-level dir: {entry under it: description}}."""
    text = section((REPO / "ARCHITECTURE.md").read_text(), "layout")
    assert text, "ARCHITECTURE.md: expected a '## Layout' section, found none"
    block = re.search(r"```\n(.*?)```", text, re.S)
    assert block, "ARCHITECTURE.md: expected the layout as a code block in '## Layout', found none"
    top, nested, current = {}, {}, None
    for line in block.group(1).splitlines():
        m = re.match(r"( *)(\S+)\s+(\S.*)$", line)
        assert m, f"ARCHITECTURE.md layout: expected 'path  description', found {line!r}"
        indent, name, what = m.groups()
        if indent:
            assert current, f"ARCHITECTURE.md layout: {name} is indented under no directory"
            nested[current][name] = what
        else:
            top[name] = what
            current = name.rstrip("/") if name.endswith("/") else None
            if current:
                nested[current] = {}
    return top, nested


def test_architecture_layout_names_every_top_level_directory_and_nothing_gone():
    top, _ = architecture_layout()
    files = repo_files()
    dirs = {f.split("/")[0] for f in files if "/" in f}
    missing = sorted(d + "/" for d in dirs if d + "/" not in top)
    assert not missing, f"ARCHITECTURE.md layout: expected an entry for {missing}, found none"
    gone = sorted(name for name in top if not (REPO / name).exists())
    assert not gone, f"ARCHITECTURE.md layout: describes {gone}, found no such path"


def test_architecture_layout_describes_every_module_of_the_code_directories():
    _, nested = architecture_layout()
    files = repo_files()
    for d in CODE_DIRS:
        assert d in nested, f"ARCHITECTURE.md layout: expected a '{d}/' entry, found none"
        modules = {f[len(d) + 1:] for f in files if f.startswith(d + "/") and f.endswith(".py")}
        described = {name for name in nested[d] if name.endswith(".py")}
        assert not modules - described, f"ARCHITECTURE.md layout: {d}/: expected entries for {sorted(modules - described)}"
        gone = sorted(name for name in nested[d] if not (REPO / d / name).exists())
        assert not gone, f"ARCHITECTURE.md layout: {d}/: describes {gone}, found no such path"


def prose_documents() -> dict[str, str]:
    """README.md, ARCHITECTURE.md, every guide in docs/, and each patch's header (its diff body is upstream
    code)."""
    docs = {name: (REPO / name).read_text() for name in ("README.md", "ARCHITECTURE.md")}
    docs.update({f"docs/{p.name}": p.read_text() for p in sorted((REPO / "docs").glob("*.md"))})
    for p in sorted((REPO / "patches" / "0.5.14").glob("*/*.patch")):
        docs[str(p.relative_to(REPO))] = p.read_text().split("\ndiff --git", 1)[0]
    return docs


def test_measured_numbers_are_stated_only_in_benchmarks():
    restated = []
    for name, text in prose_documents().items():
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in MEASURED.finditer(line):
                if line[: m.start()].rstrip().endswith(("<", ">", "=")) or (name, m.group(0)) in HARDWARE_FACTS:
                    continue
                restated.append(f"{name}:{lineno}: {m.group(0)!r}")
    assert not restated, ("expected measured numbers only in BENCHMARKS.md (cite its section instead), found: "
                          + "; ".join(restated))


def test_benchmarks_tables_hold_no_tool_output():
    """A pasted warning or log line inside a table breaks the table and is not a result."""
    for lineno, line in enumerate((REPO / "BENCHMARKS.md").read_text().splitlines(), 1):
        assert not re.search(r"\b\w*(Warning|Error)\b:|warnings\.warn\(", line), \
            f"BENCHMARKS.md:{lineno}: expected prose or a table row, found tool output: {line[:120]!r}"


def test_every_patch_test_trailer_names_a_file_of_the_repository():
    """A patch header's `Test:` says where its proof lives; a renamed or never-written test is caught here."""
    trailers = 0
    for patch in sorted(REPO.glob("patches/*/*/*.patch")):
        header = patch.read_text().split("\ndiff --git ", 1)[0]
        for line in header.splitlines():
            if line.startswith("Test: "):
                for name in line.removeprefix("Test: ").split(","):
                    trailers += 1
                    assert (REPO / name.strip()).is_file(), f"{patch.relative_to(REPO)}: Test: {name.strip()} is not a file"
    assert trailers


def test_readme_worktree_snippet_names_the_directories_the_commands_use(monkeypatch):
    """The manual's "to add or change a patch" snippet (README.md, docs/) cd'ed into build/work/0.5.14/sglang while `apply.py worktree
    sglang` (no --line: the newest line) makes build/work/0.5.23/sglang. Every build/work/L/U and patches/L/U a
    code block names beside `worktree` or `export` must be the one those commands, as written, use."""
    import shlex

    from patchkit.cli import _worktree_dir, build_parser
    from patchkit.engine import Engine

    monkeypatch.delenv("PATCHKIT_LINE", raising=False)      # a reader's shell: the default line
    blocks, block = [], None
    for line in "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]).splitlines():
        if line.startswith("```"):
            block = [] if block is None else blocks.append("\n".join(block))
        elif block is not None:
            block.append(line)
    checked = 0
    for block in blocks:
        commands = [shlex.split(m) for m in re.findall(r"python3? apply\.py ((?:worktree|export) [^#\n&|;]*)", block)]
        if not commands:
            continue
        args = build_parser().parse_args(commands[0])
        engine = Engine.from_repo(REPO, line=getattr(args, "line", None))
        want_work = _worktree_dir(engine, args).relative_to(REPO).as_posix()
        want_patches = (engine.patches_root / args.upstream).relative_to(REPO).as_posix()
        for named in re.findall(r"build/work/[\w.-]+/[\w.-]+", block):
            assert named == want_work, f"the manual names {named}; `{' '.join(commands[0])}` makes {want_work}"
            checked += 1
        for named in re.findall(r"patches/[\w.-]+/[\w.-]+", block):
            assert named.rstrip("/") == want_patches, f"the manual names {named}; export writes {want_patches}/"
            checked += 1
    assert checked, "README.md and docs/ show no worktree/export snippet naming its directories"


def test_readme_is_a_front_page_and_architecture_one_page():
    """The README says what the project is and where to read on; the architecture page fits a page above its index.
    What grows (commands, guides, the file index) goes to docs/ or ARCHITECTURE.md's layout, not here."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, f"README.md: expected at most 200 lines, found {len(readme.splitlines())}"
    for heading in ("what-has-run-where", "the-patches", "release-lines", "where-to-read-on"):
        assert section(readme, heading), f"README.md: expected a section #{heading}, found none"
    page = (REPO / "ARCHITECTURE.md").read_text().split("\n## Layout\n", 1)[0]
    assert len(page.splitlines()) <= 110, f"ARCHITECTURE.md: expected the page above Layout in 110 lines, found " \
                                          f"{len(page.splitlines())}"
    for heading in ("the-parts", "the-data-flow", "import-rules", "a-new-x-goes-in-y"):
        assert section(page, heading), f"ARCHITECTURE.md: expected a section #{heading}, found none"


def test_docs_holds_the_guides_the_readme_links():
    """docs/ is for users and maintainers: each page there is one the README links to (a design note, a run's
    record or a lab notebook goes beside the benches, bench/notes/ or the run's folder)."""
    readme = (REPO / "README.md").read_text()
    unlinked = sorted(p.name for p in (REPO / "docs").glob("*.md") if f"](docs/{p.name}" not in readme)
    assert not unlinked, f"docs/: expected only guides the README links to, found {unlinked} unlinked"


def test_every_run_folder_holds_its_record():
    """Each run folder keeps its RUN.md beside the raw output: the run named as its folder, and its command."""
    command = re.compile(r"```|`[^`]*(?:\b(?:python3?|pytest|make|ncu|nvidia-smi|cuda-gdb)\b|\.py\b)[^`]*`")
    for run in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
        record = run / "RUN.md"
        assert record.is_file(), f"bench/runs/{run.name}: expected a RUN.md beside the raw output, found none"
        text = record.read_text()
        assert text.startswith(f"# {run.name}\n"), f"bench/runs/{run.name}/RUN.md: expected '# {run.name}' first"
        assert command.search(text), f"bench/runs/{run.name}/RUN.md: expected the command that ran, found none"


def test_benchmarks_holds_the_current_evidence_each_claim_linking_its_run():
    """BENCHMARKS.md is the current evidence, not the lab notebook: short, and every claim's section ends on the
    run it comes from (the run's RUN.md holds the rest: every row, the discussion, the earlier runs)."""
    text = (REPO / "BENCHMARKS.md").read_text()
    assert len(text.splitlines()) <= 500, f"BENCHMARKS.md: expected at most 500 lines, found {len(text.splitlines())}"
    headings = [m.group(2) for m in re.finditer(r"^(#{2,3}) (.*)$", text, re.M)]
    assert headings, "BENCHMARKS.md: expected a section per claim, found none"
    for heading in headings:
        part = section(text, slug(heading.replace("`", "")))
        sub = re.search(r"^###? ", part.split("\n", 1)[1], re.M) if "\n" in part else None
        own = part if sub is None else part.split("\n", 1)[0] + "\n" + part.split("\n", 1)[1][:sub.start()]
        runs = re.findall(r"\]\(bench/runs/([\w-]+)/RUN\.md\)", own)
        if heading == "MMA sparse decode":     # the parent of P1's runs: each subsection links its own
            continue
        assert runs, f"BENCHMARKS.md: section {heading!r}: expected a link to its run's RUN.md, found none"
        for run in runs:
            assert (RESULTS / run / "RUN.md").is_file(), f"BENCHMARKS.md: {heading!r} links bench/runs/{run}, none there"
