"""The bundle's wheel closure: serving/bundle_requirements.txt, one pinned wheel a line with why it is there, and
the runtime (torch, triton) it is written for. Read by the bundle (serving/bundle.py) and the JIT prebuild
(serving/bundle_jit.py) alike."""
from __future__ import annotations

import re
from pathlib import Path

from . import REPO
from .bundle_manifest import BundleError

REQUIREMENTS = REPO / "serving" / "bundle_requirements.txt"


def read_requirements(path: Path = REQUIREMENTS) -> list[tuple[str, str, str]]:
    """[(name, version, why)] from lines 'name==version  # why'."""
    reqs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        spec, _, why = line.partition("#")
        spec = spec.strip()
        if not spec:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", spec)
        if not m or not why.strip():
            raise BundleError(f"{path}:{n}: expected 'name==version  # why', found {line.strip()!r}")
        reqs.append((m.group(1), m.group(2), why.strip()))
    return reqs


def closure_runtime(path: Path = REQUIREMENTS) -> tuple[str, str]:
    """(torch, triton) the closure is written for: its '# runtime: torch==X triton==Y' line."""
    m = re.search(r"^# runtime: torch==(\S+) triton==(\S+)", path.read_text(), re.M)
    if not m:
        raise BundleError(f"{path.name}: expected a '# runtime: torch==X triton==Y' line, found none")
    return m.group(1), m.group(2)
