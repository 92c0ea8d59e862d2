"""reach.toml's [[model]] rows (patchkit/rebase/reach.py): read, refused in one line when malformed, and printed by
`rebase --matrix` under the line's table (the generator knows no model: the rows are the file's)."""
from __future__ import annotations

import pytest

from patchkit import PatchkitError
from patchkit.rebase.matrix import markdown, parse_markdown
from patchkit.rebase.reach import FILE, load_models
from tests.conftest import REPO
from tests.rebase_cases import repo_copy
from tests.rebase.test_rebase import cli
from tests.rebase.test_rebase_reach import _series

ROW = '''
[[model]]
model = "Some-Model"
forward = "decode"
reaches = ["dsv4: make mma the sm_120 sparse decode default"]
upstream = ["attention: a path"]
held_by = "tests/x.py"
'''


def _with(tmp_path, text):
    repo = repo_copy(tmp_path / "repo")
    data = repo / "patches" / "0.5.23" / "sglang" / FILE
    data.write_text(data.read_text() + text)
    return repo


def test_rows_keep_file_order_and_name_patches_by_file():
    series = _series("0.5.23")
    rows = load_models(series.directory, series.patches, pytest.fail)
    assert [r.model for r in rows][:1] == ["DeepSeek-V4.1-Flash"] and all(r.upstream for r in rows)
    assert rows[0].reaches == ("0001-dsv4-an-mma-choice-for-the-sm_120-sparse-decode-back.patch",
                               "0002-dsv4-make-mma-the-sm_120-sparse-decode-default.patch",
                               "0003-dsv4-a-Gluon-kernel-for-the-sm_120-mma-decode-backen.patch",
                               "0004-dsv4-give-the-sm_120-ratio-1-2-indexer-DeepGEMM-s-ow.patch",
                               "0005-dsv4-start-the-v4.1-candidate-indexer-on-sm_12x-with.patch")


@pytest.mark.parametrize("line", ["0.5.14", "0.5.23"])
def test_every_row_is_held_by_a_test_file_of_the_repository(line):
    series = _series(line)
    rows = load_models(series.directory, series.patches, pytest.fail)
    assert rows and all((REPO / r.held_by).is_file() and r.held_by.startswith("tests/") for r in rows), rows


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace('held_by = "tests/x.py"\n', ""), "expected the keys model, forward, reaches, upstream, held_by"),
    (lambda t: t.replace('upstream = ["attention: a path"]', "upstream = []"), "expected upstream as a non-empty list"),
    (lambda t: t.replace('reaches = [', 'reaches = "x" #['), "expected reaches as a non-empty list of strings"),
    (lambda t: t + "\n[other]\nx = 1\n", "expected only [[partly]] and [[model]] tables, found other"),
])
def test_a_bad_row_is_refused_in_one_line(tmp_path, edit, expected):
    repo = _with(tmp_path, edit(ROW))
    series = _series("0.5.23", repo)
    with pytest.raises(PatchkitError) as err:
        load_models(series.directory, series.patches, pytest.fail)
    assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_subject_no_patch_has_is_left_out_of_its_row_with_a_warning(tmp_path):
    repo = _with(tmp_path, ROW.replace("dsv4: make mma the sm_120 sparse decode default", "gone"))
    series, said = _series("0.5.23", repo), []
    [row] = [r for r in load_models(series.directory, series.patches, said.append) if r.model == "Some-Model"]
    assert row.reaches == () and len(said) == 1 and "'gone'" in said[0], said


def test_the_matrix_prints_the_rows_under_the_line_table(tmp_path):
    repo = _with(tmp_path, ROW)
    proc = cli(repo, "rebase", "--line", "0.5.23", "--matrix", "--releases", "0.5.23", env={"PATCHKIT_LINE": "0.5.23"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.splitlines()
    head = out.index("| model | forward | the series' code it runs | upstream paths it takes | held by |")
    assert out[head - 2].startswith("On the pin (sglang 0.5.23, flashinfer 0.7.2)") and out[head - 4] == "### Reach by model"
    assert ("| Some-Model | decode | `sglang/0002-dsv4-make-mma-the-sm_120-sparse-decode-default.patch` | "
            "attention: a path | `tests/x.py` |") in out


def test_the_reach_table_is_not_read_as_the_table_above_it():
    """parse_markdown reads an upstream's table by the heading above it: the reach rows sit under their own."""
    col = {"version": "1", "pin": True, "pins": {"a": "1", "b": "2"}, "cells": {"a/0001-x.patch": "applies"}}
    other = {"version": "2", "pin": True, "lead_requires": "a 1 accepts it", "cells": {"b/0001-y.patch": "applies"}}
    matrix = {"line": "9.9", "lead": "a", "pin": {"a": "1", "b": "2"}, "patches": ["a/0001-x.patch"], "columns": [col],
              "others": [{"upstream": "b", "held": {"a": "1"}, "newest_lead": "1", "patches": ["b/0001-y.patch"],
                          "columns": [other]}],
              "partly": {}, "models": [{"model": "M", "forward": "f", "reaches": [], "upstream": ["u"], "held_by": "t"}]}
    assert parse_markdown(markdown(matrix), upstream="b") == {"2": {"b/0001-y.patch": "applies"}}


def test_a_line_without_rows_prints_no_reach_table():
    matrix = {"line": "9.9", "lead": "a", "pin": {"a": "1"}, "patches": ["a/0001-x.patch"],
              "columns": [{"version": "1", "pin": True, "pins": {"a": "1"}, "cells": {"a/0001-x.patch": "applies"}}],
              "others": [], "partly": {}, "models": []}
    assert "Reach by model" not in markdown(matrix)
    matrix["models"] = [{"model": "M", "forward": "f", "reaches": [], "upstream": ["u: v", "w: x"], "held_by": "t"}]
    assert "| M | f | none | u: v<br>w: x | `t` |" in markdown(matrix)
