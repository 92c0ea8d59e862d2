"""The import rules of ARCHITECTURE.md hold in the code: which part may import which, and no circle.

Every import counts, a lazy one inside a function too: a circle closed by a late import is still two modules that
cannot be understood, moved or tested one without the other. The run folders (bench/runs/) are records of what
ran, kept as they ran, and are not read here.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PARTS = ("patchkit", "serving", "harness", "bench", "lint")
# part -> the parts of this repository it may import (itself always)
ALLOWED = {
    "patchkit": set(),
    "lint": {"patchkit"},
    "serving": {"patchkit"},
    "harness": {"patchkit", "serving"},
    "bench": {"patchkit", "serving", "harness"},
}


def modules() -> dict[str, Path]:
    out = {}
    for part in PARTS:
        for path in sorted((REPO / part).rglob("*.py")):
            rel = path.relative_to(REPO)
            if rel.parts[:2] == ("bench", "runs") or "__pycache__" in rel.parts:
                continue
            name = ".".join(rel.with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The repository's modules `name` imports, anywhere in its file (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_each_part_imports_only_the_parts_below_it():
    wrong = []
    for name, targets in graph().items():
        part = name.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if other != part and other not in ALLOWED[part]:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "expected each part to import only the parts ARCHITECTURE.md allows, found: " + "; ".join(wrong)


def test_nothing_outside_tests_imports_tests():
    mods = modules()
    wrong = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            wrong += [f"{name} imports {n}" for n in names if n == "tests" or n.startswith("tests.")]
    assert not wrong, "expected no module outside tests/ to import tests/, found: " + "; ".join(wrong)


def test_no_two_modules_import_each_other_round_a_circle():
    found = circles(graph())
    assert not found, "expected imports to run one way, found circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_circle_check_finds_a_circle_closed_by_a_lazy_import(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import b\n")
    b.write_text("def f():\n    from a import g\n")
    edges = {n: imports_of(n, p, {"a", "b"}) for n, p in (("a", a), ("b", b))}
    assert circles(edges) == [["a", "b"]]
