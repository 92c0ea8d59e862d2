"""`rebase --matrix` per release line: the 0.5.23 line's section of docs/compat.md, its pin column taken from
`check` on 0.5.23 itself (so a patch that is not exact there shows, not an assumed "applies"), and the other
lines' sections left byte for byte.

Issue 36 (4): the section also walks FlashInfer's own releases after the one sglang 0.5.23 pins (0.7.2.post1,
0.7.4; sglang held at 0.5.23, as `--force` would), and P3 shows the part of its calls it is reached on, as the
series' reach.toml records it, instead of a plain "applies".
"""
from __future__ import annotations

import json
import re
import shutil

import pytest

from patchkit import PatchkitError
from patchkit.rebase.matrix import _sections, parse_markdown, with_section
from tests.conftest import REPO
from tests.rebase_cases import repo_copy
from tests.rebase.test_rebase import cli

LINE = "0.5.23"
P3 = "sglang/0002-dsv4-run-the-MHC-pre-mixing-linear-in-bf16-on-tensor.patch"


def _matrix(repo, *args):
    out = repo / "matrix.json"
    proc = cli(repo, "rebase", "--line", LINE, "--matrix", *args, "--json", str(out), env={"PATCHKIT_LINE": LINE})
    return proc, (json.loads(out.read_text()) if out.is_file() else None)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The whole 0.5.23 line, as `make`-free users regenerate it: pin column plus two FlashInfer dry runs."""
    repo = repo_copy(tmp_path_factory.mktemp("compat") / "repo")
    (repo / "docs").mkdir()
    shutil.copy2(REPO / "docs" / "compat.md", repo / "docs" / "compat.md")
    proc, data = _matrix(repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return repo, proc, data


@pytest.mark.slow   # two FlashInfer dry runs (0.7.2 -> 0.7.2.post1, 0.7.4): about two minutes on the CI machine
def test_the_line_section_is_as_docs_compat_md_says_and_the_other_sections_stay(full):
    repo, _, data = full
    pin = data["columns"][0]
    assert pin["pin"] and pin["version"] == LINE, pin
    # every patch is exact on its pin and its code runs on every call (P3, the one partly reached, retired in 0.1.10)
    assert P3 not in pin["cells"] and set(pin["cells"].values()) == {"applies"}, pin["cells"]
    before = _sections((REPO / "docs" / "compat.md").read_text())
    after = _sections((repo / "docs" / "compat.md").read_text())
    assert after[LINE] == before[LINE], "docs/compat.md's 0.5.23 section differs from the matrix run"
    assert {k: v for k, v in after.items() if k != LINE} == {k: v for k, v in before.items() if k != LINE}


@pytest.mark.slow
def test_flashinfer_releases_after_the_pinned_one_have_their_own_columns(full):
    repo, proc, data = full
    [fi] = data["others"]
    versions = [c["version"] for c in fi["columns"]]
    # the pin, then every release newer than the one sglang 0.5.23 requires (0.7.2.post1 and 0.7.4 at least)
    assert versions[0] == "0.7.2" and {"0.7.2.post1", "0.7.4"} <= set(versions[1:]), versions
    assert fi["held"] == {"sglang": LINE} and fi["patches"] == [p for p in data["patches"] if p.startswith("flashinfer/")]
    col = next(c for c in fi["columns"] if c["version"] == "0.7.4")
    # each ran with sglang at its pin and --force, and says so
    assert col["pins"] == {"sglang": LINE, "flashinfer": "0.7.4"}, col["pins"]
    assert col["forced"] == {"flashinfer": "sglang 0.5.23 requires flashinfer-python==0.7.2"}, col
    assert col["lead_requires"] == "sglang 0.5.23 requires 0.7.2", col
    assert fi["columns"][0]["lead_requires"] == "sglang 0.5.23 accepts it", fi["columns"][0]
    # P5 and P6 still apply on 0.7.4; P5 at an offset (its hunks 214 lines further down)
    results = {r["patch"]: r for e in col["report"]["upstreams"] for r in e["results"]}
    assert {r["result"] for r in results.values()} <= {"clean", "offset"} and len(results) == 2, results
    assert set(col["cells"].values()) == {"applies"}, col["cells"]
    assert any("offset" in d for r in results.values() for d in r["detail"]), results
    committed = parse_markdown((REPO / "docs" / "compat.md").read_text(), LINE, "flashinfer")
    assert {v: c["cells"] for v, c in zip(versions, fi["columns"])} == committed
    assert "flashinfer 0.7.4<br>sglang 0.5.23 requires 0.7.2" in proc.stdout


def test_p3_left_the_line_so_its_pin_column_has_no_partly_figure(tmp_path):
    """P3 was retired on this line (patch set 0.1.10): the pin column has no row for it and no figure under it."""
    repo = repo_copy(tmp_path / "repo")
    proc, data = _matrix(repo, "--releases", LINE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert P3 not in data["columns"][0]["cells"] and not data["partly"], (data["columns"][0]["cells"], data["partly"])
    assert "Partly reached" not in proc.stdout and P3 not in proc.stdout


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
