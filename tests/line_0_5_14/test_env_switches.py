"""The patches' environment switches live where upstream keeps its own: registered in sglang.srt.environ's
`Envs` and read through `envs.X.get()` in the dispatchers. The overlay kernel files read none and import
nothing of sglang but the release's register_custom_op (tests and benches load them alone through
harness.upstream.load_kernel, which supplies that helper from the pinned wheel).

Red on the series before issue 25 (its dispatchers read os.environ, the indexer kernel file read
SGLANG_SM120_INDEXER_FILL_TAIL itself); green on the shipped one.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.dsv4_indexer_cases import tree_envs
from patchkit.engine import Engine
from tests.conftest import PATCH_LINE, REPO

# name: (EnvField class, default). docs/serving.md documents each.
SWITCHES = {
    "SGLANG_SM120_SPARSE_DECODE": ("EnvStr", ""),
    "SGLANG_SM120_MHC_PRE_TRITON": ("EnvBool", True),
    "SGLANG_SM120_INDEXER_TRITON": ("EnvBool", True),
    "SGLANG_SM120_INDEXER_FILL_TAIL": ("EnvBool", False),
}


def environment_reads(source: str) -> set[str]:
    """SGLANG_* names read straight from the process environment: os.environ.get / os.getenv / os.environ[...]."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Call) and node.args:
            f = ast.unparse(node.func)
            if f in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("SGLANG_"):
            names.add(key.value)
    return names


def patched_files() -> list[str]:
    """The upstream .py files the sglang series patches (overlay files excluded: they are all ours)."""
    series = Engine.from_repo(REPO, line=PATCH_LINE).series("sglang")
    return sorted({path for p in series.patches for path in p.paths if path.endswith(".py")} - set(series.overlay_owner))


def overlay_files() -> list[str]:
    return sorted(Engine.from_repo(REPO, line=PATCH_LINE).series("sglang").overlay_owner)


def test_every_switch_is_registered_in_the_patched_envs(patched_root):
    envs = tree_envs(patched_root)
    for name, (kind, default) in SWITCHES.items():
        field = type(envs).__dict__.get(name)
        assert field is not None, f"expected {name} registered in sglang/srt/environ.py's Envs, found none"
        assert type(field).__name__ == kind and field.default == default, (
            f"{name}: expected {kind}({default!r}), found {type(field).__name__}({field.default!r})"
        )


def test_pristine_registers_none_of_them(pristine_root):
    envs = tree_envs(pristine_root)
    assert not [n for n in SWITCHES if n in type(envs).__dict__]


def test_patches_read_no_new_switch_from_os_environ(patched_root, pristine_root):
    """A patched file reads through os.environ only the SGLANG_* names the pinned file already read so."""
    for rel in patched_files():
        after = environment_reads((Path(patched_root) / rel).read_text())
        before_file = Path(pristine_root) / rel
        before = environment_reads(before_file.read_text()) if before_file.is_file() else set()
        assert after <= before, f"{rel}: reads {sorted(after - before)} from os.environ; register them in Envs"


@pytest.mark.parametrize("rel", overlay_files())
def test_overlay_kernel_files_read_no_switch_and_import_no_sglang(rel):
    source = (REPO / "overlay" / "0.5.14" / rel).read_text()
    assert not environment_reads(source), f"{rel}: reads {sorted(environment_reads(source))}; the dispatcher should"
    sglang_imports = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            sglang_imports |= {a.name for a in node.names if a.name.split(".")[0] == "sglang"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == "sglang":
            sglang_imports |= {f"{node.module}.{a.name}" for a in node.names}
    # torch and triton, plus the release's op-registration helper (registered the way upstream registers its ops)
    allowed = {"sglang.srt.utils.custom_op.register_custom_op"}
    assert sglang_imports <= allowed, (f"{rel}: imports {sorted(sglang_imports - allowed)} from sglang; kernel "
                                       "files import torch, triton and sglang's register_custom_op only")


def test_serving_docs_name_only_registered_switches():
    doc = (REPO / "docs" / "serving.md").read_text()
    for name in SWITCHES:
        assert f"`{name}`" in doc, f"docs/serving.md: expected a row for {name}"
