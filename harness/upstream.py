"""Load pieces of the real upstream source without importing its whole package.

Many upstream modules pull in the full serving runtime at import time. A pure function
can still be tested by compiling just its definition out of the pinned file.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from contextlib import contextmanager
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


@contextmanager
def tree_package(root: Path, package: str):
    """While inside, `import package.x.y` reads root/package/x/y.py: a bare package (its __init__ is not
    run), so one module and what it imports load without the whole runtime. sys.modules is put back after,
    so trees of two versions never share a module."""
    saved = {k: m for k, m in sys.modules.items() if k == package or k.startswith(package + ".")}
    for k in saved:
        del sys.modules[k]
    bare = types.ModuleType(package)
    bare.__path__ = [str(Path(root) / package)]
    sys.modules[package] = bare
    try:
        yield
    finally:
        for k in [k for k in sys.modules if k == package or k.startswith(package + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)


def import_from_tree(root: Path, dotted: str) -> types.ModuleType:
    """The module `dotted` (e.g. sglang.srt.environ) of the tree at root, see tree_package."""
    with tree_package(root, dotted.split(".")[0]):
        return importlib.import_module(dotted)


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
