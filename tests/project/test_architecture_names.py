"""ARCHITECTURE.md's data flow names real code: every `module.name` of patchkit/ it writes resolves to a definition
of that module (red before: `attestation.write`, which never existed; the manifest is attestation.record, written by
Engine._attest through bookkeeping)."""
from __future__ import annotations

import importlib
import re

from tests.conftest import REPO


def _flow_block() -> str:
    text = (REPO / "ARCHITECTURE.md").read_text()
    section = text.split("## The data flow", 1)[1].split("\n## ", 1)[0]
    return section


def test_every_module_dot_name_of_the_data_flow_resolves():
    modules = {p.stem for p in (REPO / "patchkit").glob("*.py")} | {"Engine"}
    names = set(re.findall(r"\b([A-Za-z_]+)\.([A-Za-z_]\w*)\b", _flow_block()))
    checked, missing = 0, []
    for module, name in sorted(names):
        if module not in modules or name in ("py", "json"):     # a file's name, not a definition
            continue
        owner = importlib.import_module("patchkit.engine").Engine if module == "Engine" \
            else importlib.import_module(f"patchkit.{module}")
        checked += 1
        if not hasattr(owner, name):
            missing.append(f"{module}.{name}")
    assert checked >= 8, f"expected the data flow to name the engine's steps, found {checked} names"
    assert not missing, f"ARCHITECTURE.md's data flow names what the code does not define: {missing}"
