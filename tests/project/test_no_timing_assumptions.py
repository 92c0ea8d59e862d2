"""No test of the suite asserts on elapsed time or orders events by sleeping (issue 45, D11): on a loaded
2-core machine `make test` failed on a test that assumed two CPU decode calls finish within a second, and
passed alone. Time may only bound a wait (a hang guard: a deadline on a polling `while` loop, a subprocess
timeout), never decide a result. Checked on the syntax of every module under tests/."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent   # tests/, this file sits in tests/project/
CLOCKS = {"monotonic", "perf_counter", "time", "process_time", "monotonic_ns", "perf_counter_ns", "time_ns"}
# A fake server imitates a slow one (its stream paced, its trace written late): nothing waits on it by time
# except through a hang guard, so its own sleeps order nothing in a test.
FAKES = {"serve_fake_server.py"}


def _reads_a_clock(node: ast.AST) -> bool:
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            f = call.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in CLOCKS and not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                                       and f.value.id not in ("time", "timeit")):
                return True
    return False


def _findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []

    def visit(node, in_while: bool):
        if isinstance(node, ast.Assert) and _reads_a_clock(node.test):
            out.append(f"{path.relative_to(TESTS)}:{node.lineno}: asserts on elapsed time")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sleep" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "time" and not in_while \
                and path.name not in FAKES:
            out.append(f"{path.relative_to(TESTS)}:{node.lineno}: sleeps outside a polling loop")
        for child in ast.iter_child_nodes(node):
            visit(child, in_while or isinstance(node, ast.While))
    visit(tree, False)
    return out


def test_no_test_asserts_on_elapsed_time_or_orders_by_sleep():
    found = [f for path in sorted(TESTS.rglob("*.py")) for f in _findings(path)]
    assert found == [], found


def test_the_check_sees_both_kinds(tmp_path):
    bad = tmp_path / "t.py"
    bad.write_text("import time\nt0 = time.monotonic()\ntime.sleep(1)\nassert time.monotonic() - t0 < 2\n"
                   "while True:\n    time.sleep(0.1)\n    break\n")
    global TESTS
    saved, TESTS = TESTS, tmp_path
    try:
        assert [f.split(": ", 1)[1] for f in _findings(bad)] == ["sleeps outside a polling loop",
                                                                 "asserts on elapsed time"]
    finally:
        TESTS = saved
