"""`rebase --matrix` per release line: the 0.5.23 line's section of docs/compat.md, its pin column taken from
`check` on 0.5.23 itself (so a patch that is not exact there shows, not an assumed "applies"), and the other
lines' sections left byte for byte."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from patchkit import PatchkitError
from patchkit.rebase.matrix import _sections, parse_markdown, with_section
from tests.conftest import REPO
from tests.rebase_cases import repo_copy
from tests.test_rebase import cli

LINE = "0.5.23"


def _matrix(repo, *args):
    out = repo / "matrix.json"
    proc = cli(repo, "rebase", "--line", LINE, "--matrix", *args, "--json", str(out), env={"PATCHKIT_LINE": LINE})
    return proc, (json.loads(out.read_text()) if out.is_file() else None)


def test_the_line_applies_on_its_pin_as_docs_compat_md_says_and_the_other_sections_stay(tmp_path):
    repo = repo_copy(tmp_path / "repo")
    (repo / "docs").mkdir()
    shutil.copy2(REPO / "docs" / "compat.md", repo / "docs" / "compat.md")
    before = _sections((REPO / "docs" / "compat.md").read_text())
    proc, data = _matrix(repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pin = data["columns"][0]
    assert pin["pin"] and pin["version"] == LINE and set(pin["cells"].values()) == {"applies"}, pin["cells"]
    after = _sections((repo / "docs" / "compat.md").read_text())
    assert parse_markdown((REPO / "docs" / "compat.md").read_text(), LINE) == parse_markdown(after[LINE])
    assert {k: v for k, v in after.items() if k != LINE} == {k: v for k, v in before.items() if k != LINE}


def test_a_patch_not_exact_on_its_pin_fails_the_pin_column(tmp_path):
    repo = repo_copy(tmp_path / "repo")
    patch = sorted((repo / "patches" / LINE / "sglang").glob("0002-*.patch"))[0]
    text = patch.read_text()
    # the first hunk claims lines three further down: it still applies, at an offset, which check refuses
    shifted = re.sub(r"^@@ -(\d+),(\d+) \+(\d+),", lambda m: f"@@ -{int(m[1]) + 3},{m[2]} +{int(m[3]) + 3},",
                     text, count=1, flags=re.M)
    assert shifted != text
    patch.write_text(shifted)
    proc, data = _matrix(repo, "--releases", LINE)
    cells = data["columns"][0]["cells"]
    assert cells[f"sglang/{patch.name}"] == "fails check", cells
    assert sum(v == "applies" for v in cells.values()) == len(cells) - 1


def test_a_section_is_replaced_or_added_in_line_order_and_a_missing_one_is_one_line():
    text = (REPO / "docs" / "compat.md").read_text()
    new = with_section(text, "0.5.20", "## 0.5.20 line\n\nx\n")
    names = list(_sections(new))
    assert names == sorted(names, key=lambda v: tuple(int(x) for x in v.split(".")))
    assert "0.5.20" in names and all(_sections(new)[n] == _sections(text)[n].rstrip("\n") + "\n" or
                                     _sections(new)[n] == _sections(text)[n] for n in _sections(text))
    assert with_section(new, "0.5.20", _sections(text)["0.5.14"].replace("0.5.14 line", "0.5.20 line")).count(
        "## 0.5.20 line") == 1
    with pytest.raises(PatchkitError) as err:
        parse_markdown(text, "9.9")
    assert "expected a '## 9.9 line' section, found 0.5.14, 0.5.23" in str(err.value) and "\n" not in str(err.value)
