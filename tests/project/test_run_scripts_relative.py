"""The scripts kept beside a run's raw output under bench/runs/ name the checkout relative to themselves
(Path(__file__).parents), never an absolute checkout path, so they run from any copy of the repository (red
before: four probes of 2026-12-04-aot-triton39 put "/work/main" on sys.path and loaded the kernel from there)."""
from __future__ import annotations

import ast
import re

from tests.conftest import REPO

ABSOLUTE = re.compile(r"(/[\w.-]+){2,}/?")          # /a/b...: a path of a machine, not a pattern like "/gluon/"
SYSTEM = ("/usr/", "/tmp/", "/dev/", "/proc/", "/etc/")  # the system's, the same on every machine

SCRIPTS = sorted((REPO / "bench" / "runs").rglob("*.py"))


def _absolute_paths(path) -> list[str]:
    """String constants that are absolute paths of a machine's own files (the system's excepted)."""
    return [node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ABSOLUTE.fullmatch(node.value)
            and not node.value.startswith(SYSTEM)]


def test_no_run_script_names_an_absolute_path():
    assert SCRIPTS, "expected the probe scripts kept under bench/runs/, found none"
    found = {str(p.relative_to(REPO)): paths for p in SCRIPTS if (paths := _absolute_paths(p))}
    assert not found, f"expected the checkout named relative to each script, found absolute paths: {found}"
