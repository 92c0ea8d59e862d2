"""The repository's documents agree with the tree they describe (no GPU, no network).

* bench/results/INDEX.md lists every raw output with its date and the section that cites it.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


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


def results_index() -> dict[str, list[str]]:
    rows = markdown_rows((RESULTS / "INDEX.md").read_text())
    assert rows, "bench/results/INDEX.md has no table"
    return {r[0].strip("`"): r for r in rows}


def test_results_index_lists_exactly_what_is_there():
    present = {p.name + ("/" if p.is_dir() else "") for p in RESULTS.iterdir() if p.name != "INDEX.md"}
    listed = set(results_index())
    assert not present - listed, f"bench/results/INDEX.md: expected an entry for {sorted(present - listed)}, found none"
    assert not listed - present, f"bench/results/INDEX.md: lists {sorted(listed - present)}, found no such file"


def test_results_index_dates_and_citations_hold():
    for name, (_, date, produced_by, cited_in, *_rest) in results_index().items():
        assert DATE.fullmatch(date) and name.startswith(date), \
            f"bench/results/INDEX.md: {name}: expected a name starting with its date, found date {date!r}"
        assert produced_by, f"bench/results/INDEX.md: {name}: says nothing of what produced it"
        stem = name.rstrip("/").split(".")[0]
        refs = [r.strip() for r in cited_in.split(",") if r.strip()]
        assert refs, f"bench/results/INDEX.md: {name}: cited nowhere"
        for ref in refs:
            doc, _, anchor = ref.partition("#")
            assert (REPO / doc).is_file(), f"bench/results/INDEX.md: {name}: expected {doc} to exist, found none"
            text = (REPO / doc).read_text()
            part = section(text, anchor) if anchor else text
            assert part is not None, f"bench/results/INDEX.md: {name}: expected a section #{anchor} in {doc}, found none"
            assert stem in part, f"bench/results/INDEX.md: {name}: {ref} does not mention it"
