"""`make test`'s schedule (tests/long_setups_first.py): a file is one unit unless its tests carry an xdist group,
each AOT gate run and each file with a slow test is grouped, and the grouped units are handed out first."""
from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

from harness.aot import AotRun, aot_runs
from tests.long_setups_first import grouped_first, long_setup_group, unit_of

REPO = Path(__file__).resolve().parents[2]


def test_a_unit_is_the_file_or_the_file_and_its_group():
    assert unit_of("tests/k/test_a.py::test_x") == "tests/k/test_a.py"
    assert unit_of("tests/k/test_a.py::Case::test_x[1-2]") == "tests/k/test_a.py"
    assert unit_of("tests/k/test_a.py::test_x[line0.5.23-triton3.9-120]@aot-line0.5.23-triton3.9") == (
        "tests/k/test_a.py@aot-line0.5.23-triton3.9")
    assert unit_of("tests/k/test_a.py::test_x[a@b]") == "tests/k/test_a.py"   # an '@' in a parameter id is no group


def test_grouped_units_go_first_each_part_in_its_own_order():
    queue = OrderedDict((unit, {}) for unit in ("a.py", "b.py@slow", "c.py", "d.py@aot-x", "d.py"))
    assert list(grouped_first(queue)) == ["b.py@slow", "d.py@aot-x", "a.py", "c.py", "d.py"]


def test_each_aot_run_and_each_file_with_a_slow_test_is_a_group():
    runs = aot_runs(REPO)
    assert len({f"aot-{run.name}" for run in runs}) == len(runs) > 1
    gate = SimpleNamespace(callspec=SimpleNamespace(params={"compiled": runs[-1], "arch": 90}), path=Path("g.py"))
    assert long_setup_group(gate, set()) == f"aot-{runs[-1].name}"
    plain = SimpleNamespace(path=Path("r.py"))
    assert long_setup_group(plain, {Path("r.py")}) == "slow" and long_setup_group(plain, set()) is None
    assert isinstance(runs[0], AotRun)


def test_make_test_runs_the_suite_under_this_schedule():
    """The conftest hands LongSetupsFirst to xdist under --dist loadgroup only: make test must ask for it."""
    makefile = (REPO / "Makefile").read_text()
    test_rule = re.search(r"^test:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "--dist loadgroup" in test_rule, test_rule
