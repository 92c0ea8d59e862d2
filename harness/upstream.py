"""Load pieces of the real upstream source without importing its whole package.

Many upstream modules pull in the full serving runtime at import time. A pure function
can still be tested by compiling just its definition out of the pinned file.
"""
from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path


def load_module(path: Path, name: str | None = None) -> types.ModuleType:
    """Import one file by path (its own imports must be satisfiable)."""
    path = Path(path)
    name = name or f"_upstream_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def top_level_defs(tree: ast.Module) -> dict[str, ast.stmt]:
    """A module's top-level functions, classes and single-name assignments, by name."""
    defs = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            defs[node.targets[0].id] = node
    return defs


def extract_functions(path: Path, names: list[str], namespace: dict) -> dict:
    """Compile only the named top-level functions/assignments of `path` into `namespace`.

    `namespace` supplies what those definitions reference (torch, constants...).
    Returns the namespace. Raises KeyError naming any definition not found.
    """
    source = Path(path).read_text()
    tree = ast.parse(source)
    wanted = set(names)
    picked = []
    for node in tree.body:
        target = None
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            target = node.name
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
        if target in wanted:
            picked.append(node)
            wanted.discard(target)
    if wanted:
        raise KeyError(f"{path}: definitions not found: {sorted(wanted)}")
    module = ast.Module(body=picked, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)
    return namespace
