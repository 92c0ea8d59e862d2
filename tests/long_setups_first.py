"""How `make test` spreads the suite over its pytest-xdist workers: `--dist loadgroup` with this scheduler
(tests/conftest.py hands it to xdist).

A unit of work is a test file, as under `--dist loadfile`, so a file's module fixtures are built once. A test
marked `xdist_group(NAME)` belongs to the unit FILE@NAME instead: one file's long setups can then run on
different workers. Two kinds are grouped here, on the worker, before xdist reads the groups:

- the AOT gate's runs (a module fixture parametrised by harness.aot.AotRun): each run, one Triton release's
  compiles of a minute or more, is a unit of its own;
- a file holding a test marked `slow` (a rebase replay, a matrix of dry runs): the whole file is one unit.

Those units start first (longest-processing-time-first scheduling): xdist's own order, by test count, put the
files with few tests and a long setup last, where one worker ran them alone while the other had nothing left.
"""
from __future__ import annotations

from collections import OrderedDict

import pytest
from xdist.scheduler import LoadScopeScheduling

from harness.aot import AotRun


def long_setup_group(item: pytest.Item, slow_files: set) -> str | None:
    """The xdist group of a test with a long setup (see the module's doc), None for any other."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    runs = [value for value in params.values() if isinstance(value, AotRun)]
    if runs:
        return f"aot-{runs[0].name}"
    return "slow" if item.path in slow_files else None


def group_long_setups(items: list[pytest.Item]) -> None:
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    for item in items:
        group = long_setup_group(item, slow_files)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its file, or FILE@NAME for a test xdist reports in group NAME."""
    file = nodeid.split("::", 1)[0]
    after_params = nodeid.rsplit("]", 1)[-1]   # xdist appends "@NAME" after the test's parameter ids
    return f"{file}@{after_params.rsplit('@', 1)[1]}" if "@" in after_params else file


def grouped_first(queue: OrderedDict) -> OrderedDict:
    """The queue with the grouped units (the long setups) ahead of the others, each part in its own order."""
    ordered = OrderedDict((unit, work) for unit, work in queue.items() if "@" in unit)
    for unit, work in queue.items():
        ordered.setdefault(unit, work)
    return ordered


class LongSetupsFirst(LoadScopeScheduling):
    """Units by file and xdist group (unit_of); the grouped units are handed out first (grouped_first)."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node) -> None:
        # Redone at each hand-out: a crashed worker's units come back at the queue's end.
        self.workqueue = grouped_first(self.workqueue)
        super()._assign_work_unit(node)
