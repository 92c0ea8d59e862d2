"""Import the pinned sglang for tests/test_serve_*.py, or skip where it is not installed.

`make test` (.venv: torch + triton only) skips these tests; `make test-serve` builds .venv-serve
with the pinned sglang and its CPU-importable dependencies and sets SERVE_TESTS_REQUIRE_SGLANG=1,
so there a missing import is an error, not a skip.
"""
from __future__ import annotations

import importlib
import os

import pytest


def import_pinned(module: str):
    if os.environ.get("SERVE_TESTS_REQUIRE_SGLANG") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason="needs the pinned sglang environment: make test-serve")
