"""`make pr-check`'s table (lint/pr_check.py), built from each line's real data with its heavy steps handed in:
one row per patch export-pr would send, the check verdict and the lint findings attributed to the patch whose
files they name, the upstream test run on both trees only where it has a CPU part ("GPU only" otherwise), and
the benchmark suite read from the register call of the benchmark file the PR ships. The make target stays out of
`make check` and CI."""
from __future__ import annotations

import re

import pytest

from lint import pr_check
from patchkit.engine import Engine
from patchkit.lockfile import lock_lines
from tests.conftest import REPO

LINES = lock_lines(REPO / "pin.lock")


def expected(engine) -> list:
    """The exportable patches, read straight from the data: a [[patch]] of upstream-pr.toml, not Inappropriate."""
    from patchkit.pr.prdata import load_pr_data

    out = []
    for name in engine.lock.upstreams:
        data = load_pr_data(engine.patches_root / name)
        for p in engine.series(name).patches:
            if data and p.name in data.patches and not (p.trailer("Upstream-Status") or [""])[0].startswith("Inappropriate"):
                out.append((name, p, data.patches[p.name]))
    return out


@pytest.mark.parametrize("line", LINES)
def test_one_row_per_exportable_patch_with_each_cell_from_its_own_source(line):
    engine = Engine.from_repo(REPO, line=line)
    items = expected(engine)
    assert items
    failing = items[0][1].name
    applies = {p.name: "ok" for _, p, _ in items} | {failing: "FAIL: applies with offset: hunk 1 at +3"}
    touched = next(p for _, p, _ in items if p.paths).paths[0]     # a finding on a file some patch changes
    findings = [f"{touched}:12: ruff-check: F401 `os` imported but unused"]
    runs = []

    def run(pr, kind):
        runs.append((pr.test_dest, kind))
        return 1 if kind == "pristine" else 0

    rows = pr_check.build_rows(engine, REPO, applies, findings, run)
    assert len(rows) == len(items)
    for row, (name, patch, pr) in zip(rows, items):
        label = engine.series(name).label_of(patch)
        assert row[0] == (f"{label} " if label else "") + f"{name}/{patch.name[:4]}"
        assert row[1] == applies[patch.name]
        assert (row[2] == "clean") == (touched not in patch.paths), row
        if pr.test_file is None:
            assert row[3] == "no test"
        elif "cpu" in pr.test_parts:
            assert row[3] == "red (exit 1) -> green: ok" and (pr.test_dest, "patched") in runs
        else:
            assert row[3] == "GPU only" and not [r for r in runs if r[0] == pr.test_dest]
        for src, dest, _ in pr.files:     # the suite as the benchmark file registers it
            stage = re.search(r'stage="([^"]+)"', src.read_text()).group(1)
            assert dest in row[4] and f"stage={stage}" in row[4], row[4]
        if not pr.files:
            assert row[4] == "no benchmark"
        assert pr_check.clean(row) == (patch.name != failing and row[2] == "clean")
    assert len(runs) == 2 * sum(1 for *_, pr in items if pr.test_file is not None and "cpu" in pr.test_parts)


def test_a_test_green_before_the_change_is_flagged():
    engine = Engine.from_repo(REPO, line=LINES[-1])
    pr = next(pr for *_, pr in expected(engine) if pr.test_file is not None and "cpu" in pr.test_parts)
    assert pr_check.cpu_test_cell(pr, lambda _pr, _kind: 0) == "green -> green: NOT red -> green"
    assert pr_check.cpu_test_cell(pr, lambda _pr, kind: 0 if kind == "pristine" else 1).endswith("NOT red -> green")


def test_pr_check_is_opt_in():
    make = (REPO / "Makefile").read_text()
    recipe = lambda target: re.search(rf"^{target}:.*\n((?:\t.*\n)*)", make, re.M).group(1)  # noqa: E731
    assert "lint.pr_check" in recipe("pr-check")
    assert "pr_check" not in recipe("check") and "pr-check" not in (REPO / ".ci/run").read_text()
