"""The upstream descriptions (`patches/*/upstream-pr.toml`) against what they describe.

Every measured row is copied from the BENCHMARKS.md table its `source` names (a column named as there, less
bold marks and the series numbering "(Pn)"), so a PR never states a number this repository did not measure;
every patch of a series has a description whose per-file lines name exactly the files its commit touches;
the loader refuses malformed data in one line. Also: a BENCHMARKS.md section is found whole when a code
block inside it has `#` lines (a shell comment is not a heading).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from patchkit import PatchkitError
from patchkit.pr.body import markdown_section
from patchkit.pr.prdata import load_pr_data
from patchkit.lockfile import load_lock, lock_lines
from tests.conftest import REPO


def _cells(line: str) -> list[str]:
    return [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]


def _tables(section: str):
    """(header, rows) of every Markdown table in a section."""
    lines, out, i = section.splitlines(), [], 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[i + 1]):
            header = [re.sub(r"\s*\(P\d\)", "", c) for c in _cells(lines[i])]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append((header, rows))
        else:
            i += 1
    return out


def _data():
    """Every line's every upstream: (line, name, upstream, its upstream-pr.toml)."""
    for line in lock_lines(REPO / "pin.lock"):
        for name, up in load_lock(REPO / "pin.lock", line).upstreams.items():
            data = load_pr_data(REPO / "patches" / line / name)
            assert data is not None, f"patches/{line}/{name}/upstream-pr.toml is missing"
            yield line, name, up, data


def test_every_measured_row_is_in_the_benchmarks_table_it_names():
    doc = (REPO / "BENCHMARKS.md").read_text()
    checked = 0
    for _, name, _, data in _data():
        for pr in data.patches.values():
            for m in pr.accuracy + pr.benchmark:
                target, _, anchor = m.source.partition("#")
                assert target == "BENCHMARKS.md" and anchor, f"{pr.file}: source {m.source!r}"
                section = markdown_section(doc, anchor)
                assert section, f"{pr.file}: BENCHMARKS.md has no section #{anchor}"
                assert m.date in section and m.gpu.split(" (")[0] in section, f"{pr.file}: {m.date} / {m.gpu}"
                for version in re.findall(r"(?:torch|triton) \S+", m.versions):
                    assert version.rstrip(",") in section, f"{pr.file}: {version} not in #{anchor}"
                for row in m.rows:
                    hits = [rows for header, rows in _tables(section) if set(m.columns) <= set(header)
                            and any(all(r[header.index(c)] == v for c, v in zip(m.columns, row)) for r in rows)]
                    assert hits, f"{pr.file}: row {row} ({m.columns}) is in no table of BENCHMARKS.md#{anchor}"
                    checked += 1
    assert checked >= 20


def test_every_pr_of_the_newest_line_has_an_accuracy_line_measured_with_upstreams_commands():
    """The newest line's PRs are the ones offered to upstream's main branch: each that prints an end-to-end
    accuracy command (a model-serving change) carries an accuracy result measured with the release's own
    commands (harness = "upstream"), labelled with the model it ran on."""
    newest, checked = lock_lines(REPO / "pin.lock")[-1], 0
    for line, name, _, data in _data():
        if line != newest:
            continue
        for pr in (p for p in data.patches.values() if "accuracy" in p.reproduce):
            checked += 1
            measured = [m for m in pr.accuracy if m.harness == "upstream"]
            assert measured, f"{line} {pr.file}: no accuracy line measured with the release's own commands"
            assert all(m.model for m in measured), f"{line} {pr.file}: an upstream-harness result names no model"
    assert checked, f"no PR of the {newest} line prints an end-to-end accuracy command"


def test_every_exported_patch_has_an_upstream_description_of_exactly_its_files():
    for line, name, up, data in _data():
        from patchkit.series import load_series
        series = load_series(name, REPO / "patches" / line, REPO / "overlay" / line, up.root)
        # downstream-only patches (Upstream-Status: Inappropriate) are never exported and need no entry
        shipped = [p for p in series.patches
                   if not (p.trailer("Upstream-Status") or [""])[0].lower().startswith("inappropriate")]
        assert {p.name for p in shipped} == set(data.patches), (line, name)
        for p in shipped:
            assert set(data.patches[p.name].modifications) == set(p.paths) | set(p.overlay), p.name


def test_a_code_block_with_hash_lines_does_not_end_a_section():
    doc = (REPO / "BENCHMARKS.md").read_text()
    section = markdown_section(doc, "mhc-pre")
    assert "```" in section and "| T | fp32 eager |" in section   # the table after a fenced '# on the H200' line
    assert section.count("```") % 2 == 0
    synthetic = "## A\n\n```\n# not a heading\n```\n\nafter\n\n## B\nb\n"
    assert markdown_section(synthetic, "a") == "## A\n\n```\n# not a heading\n```\n\nafter"


@pytest.mark.parametrize("text, expected", [
    ('[[patch]]\nfile = "x.patch"\n', "expected 'title' as a non-empty string, found None"),
    ('[[patch]]\nfile = "x.patch"\ntitle = "t"\nmotivation = "m"\nmodifications = [{path = "../up", what = "w"}]\n',
     "expected a normalised path inside its root"),
    ('forbid = ["("]\n', "forbid: expected regular expressions"),
    ('[[patch]]\nfile = "x.patch"\ntitle = "t"\nmotivation = "m"\n[[patch.benchmark]]\nresult = "r"\ncommand = "c"\n'
     'gpu = "g"\nversions = "v"\ndate = "Dec 1"\ncolumns = ["a"]\n', "expected date as YYYY-MM-DD, found 'Dec 1'"),
    ('[[patch]]\nfile = "x.patch"\ntitle = "t"\nmotivation = "m"\ntest = {file = "nope.py", dest = "test/x.py", parts = ["gpu"]}\n',
     "test.file: expected"),
    ('[[patch]]\nfile = "x.patch"\ntitle = "t"\nmotivation = "m"\ntest = {file = "nope.py", dest = "test/x.py"}\n',
     "test: expected {file, dest, parts}"),
    ('[[patch]]\nfile = "x.patch"\ntitle = "t"\nmotivation = "m"\n[[patch.accuracy]]\nresult = "r"\ncommand = "c"\n'
     'gpu = "g"\nversions = "v"\ndate = "2026-12-01"\nharness = "laptop"\n', "expected harness as one of upstream, standalone"),
    ('[[patch]]\nfile = "x.patch"\ntitle = "t"\nmotivation = "m"\nfacts = {v = "no-colon"}\n', "facts.v: expected \"path:CONSTANT\""),
    ('[[patch]]\nfile = "x.patch"\ntitle = "t"\nmotivation = "m"\n[patch.reproduce]\nserve = "x"\n',
     "reproduce: expected a table with keys server, benchmark, accuracy"),
    ('colour = 1\n', "expected only 'forbid', 'template' and [[patch]], found ['colour']"),
    # a PR that builds on another is a patch of its own (Depends-On): no follow-up table in a patch's entry
    ('[[patch]]\nfile = "x.patch"\ntitle = "t"\nmotivation = "m"\n[patch.followup]\ntitle = "f"\nmotivation = "m"\n',
     "expected keys ['accuracy', 'benchmark', 'facts', 'file', 'files', 'label', 'modifications', 'motivation', "
     "'related', 'reproduce', 'test', 'title'], found ['file', 'followup', 'motivation', 'title']"),
    # a further file's run command is a string
    ('[[patch]]\nfile = "x.patch"\ntitle = "t"\nmotivation = "m"\nfiles = [{file = "upstream-pr.toml", dest = "t/b.py", '
     'what = "w", run = 1}]\n', "expected 'run' as a non-empty string, found 1"),
])
def test_malformed_data_is_refused_in_one_line(tmp_path: Path, text, expected):
    (tmp_path / "upstream-pr.toml").write_text(text)
    with pytest.raises(PatchkitError) as err:
        load_pr_data(tmp_path)
    assert expected in str(err.value) and "\n" not in str(err.value)
