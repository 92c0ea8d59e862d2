"""Python-level collisions that a clean text merge cannot see.

After a patch merges into a module of a new release, compare the merged module with the release's own:

* a definition the merge added for an object that the release already defines it for: the same class, a
  base class of it (resolved by name in the same module), or the module itself. The release's definition is
  shadowed, usually with another signature, which fails only at run time.
* a name the merged module uses but nothing defines (not a builtin, import, assignment, parameter or
  definition in any enclosing scope), that the release's module did not already leave undefined: typically
  a name only a conflicted hunk, or an earlier patch, would have defined.

Each finding is one line naming both places (file:line). A module that no longer parses (the release's
did) is a finding of its own.
"""
from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

_BUILTINS = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__package__", "__loader__",
                                  "__builtins__", "__path__", "__class__", "__annotations__", "__dict__",
                                  "__module__", "__qualname__"}


@dataclass(frozen=True)
class Definition:
    owner: str     # "" for the module, else the class's name
    name: str
    line: int
    signature: str


def _signature(node) -> str:
    if isinstance(node, ast.ClassDef):
        return "class"
    try:
        return f"({ast.unparse(node.args)})"
    except Exception:       # ast.unparse of exotic syntax: compare nothing
        return "(?)"


def _defs(body, owner: str) -> list[Definition]:
    out = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(Definition(owner, node.name, node.lineno, _signature(node)))
        elif isinstance(node, (ast.If, ast.Try)):
            for part in (node.body, node.orelse, getattr(node, "finalbody", []),
                         *[h.body for h in getattr(node, "handlers", [])]):
                out += _defs(part, owner)
    return out


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _bases(cls: ast.ClassDef, classes: dict[str, ast.ClassDef], seen=None) -> list[str]:
    """Names of cls's base classes defined in the same module, nearest first, recursively."""
    seen = seen if seen is not None else set()
    out = []
    for b in cls.bases:
        name = b.id if isinstance(b, ast.Name) else None
        if name and name in classes and name not in seen:
            seen.add(name)
            out.append(name)
            out += _bases(classes[name], classes, seen)
    return out


def _all_defs(tree: ast.Module) -> list[Definition]:
    out = _defs(tree.body, "")
    for cls in _classes(tree).values():
        out += _defs(cls.body, cls.name)
    return out


def shadowed_definitions(path: str, release: str, merged: str) -> list[str]:
    """Definitions the merge added that the release already has for the same object (see the module doc)."""
    try:
        old_tree, new_tree = ast.parse(release), ast.parse(merged)
    except (SyntaxError, ValueError):
        return []
    have = _all_defs(old_tree)
    counts: dict[tuple[str, str], int] = {}
    for d in have:
        counts[(d.owner, d.name)] = counts.get((d.owner, d.name), 0) + 1
    release_classes, merged_classes = _classes(old_tree), _classes(new_tree)
    out = []
    seen: dict[tuple[str, str], int] = {}
    for d in _all_defs(new_tree):
        key = (d.owner, d.name)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= counts.get(key, 0):
            continue                                    # the release's own definition (or one of them)
        if key in counts:                               # same class / module level, defined twice now
            first = next(h for h in have if (h.owner, h.name) == key)
            out.append(f"{path}:{d.line}: the merge adds {_q(d)}{_sig(d)}, which the release already "
                       f"defines at {path}:{first.line}")
            continue
        if d.owner and d.owner in merged_classes:
            for base in _bases(merged_classes[d.owner], merged_classes):
                if base not in release_classes:
                    continue
                hit = next((h for h in _defs(release_classes[base].body, base) if h.name == d.name), None)
                if hit:
                    out.append(f"{path}:{d.line}: the merge adds {_q(d)}{_sig(d)}, overriding "
                               f"{base}.{d.name}{_sig(hit)} that the release defines at {path}:{hit.line}")
                    break
    return out


def _q(d: Definition) -> str:
    name = f"{d.owner}.{d.name}" if d.owner else d.name
    return f"class {name}" if d.signature == "class" else name


def _sig(d: Definition) -> str:
    return "" if d.signature == "class" else d.signature


# -- undefined names --------------------------------------------------------------------------------
def _targets(node) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
    return out


def _bound_in(body_nodes) -> set[str]:
    """Names bound directly in a scope (not inside nested functions or classes)."""
    bound = set()
    stack = list(body_nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
            stack += list(n.decorator_list)      # decorators run in this scope
            continue
        if isinstance(n, ast.Lambda):
            continue
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                bound.add((a.asname or a.name).split(".")[0])
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            bound.update(n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, ast.MatchAs) and n.name:
            bound.add(n.name)
        elif isinstance(n, ast.MatchStar) and n.name:
            bound.add(n.name)
        stack += list(ast.iter_child_nodes(n))
    return bound


def _params(args: ast.arguments) -> set[str]:
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a]
    return set(names)


def _undefined(tree: ast.Module) -> dict[str, int]:
    """Undefined name -> first line it is used on. Scopes: (names, is_class); a function sees no class scope."""
    out: dict[str, int] = {}

    def walk(node, scopes: list[tuple[set[str], bool]]) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id not in _BUILTINS and not any(node.id in names for names, _ in scopes):
                out.setdefault(node.id, node.lineno)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for e in getattr(node, "decorator_list", []) + node.args.defaults + node.args.kw_defaults:
                if e is not None:
                    walk(e, scopes)
            body = node.body if isinstance(node.body, list) else [node.body]
            inner = [s for s in scopes if not s[1]] + [(_params(node.args) | _bound_in(body), False)]
            for stmt in body:
                walk(stmt, inner)
            return
        if isinstance(node, ast.ClassDef):
            for e in node.bases + [k.value for k in node.keywords] + node.decorator_list:
                walk(e, scopes)
            inner = scopes + [(_bound_in(node.body), True)]
            for stmt in node.body:
                walk(stmt, inner)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = scopes + [(set().union(*(_targets(g.target) for g in node.generators)), False)]
            for child in ast.iter_child_nodes(node):
                walk(child, inner)
            return
        if isinstance(node, ast.arg):      # annotations: not checked (forward references, TYPE_CHECKING)
            return
        if isinstance(node, (ast.AnnAssign,)):
            for child in (node.target, node.value):
                if child is not None:
                    walk(child, scopes)
            return
        for child in ast.iter_child_nodes(node):
            walk(child, scopes)

    walk(tree, [(_bound_in(tree.body), False)])
    return out


def undefined_names(path: str, release: str, merged: str) -> list[str]:
    """Names the merged module uses and nothing defines, that the release's module did not leave undefined."""
    try:
        old_tree, new_tree = ast.parse(release), ast.parse(merged)
    except (SyntaxError, ValueError):
        return []
    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(new_tree)):
        return []          # a star import binds names no parser can list: say nothing rather than guess
    before = _undefined(old_tree)
    return [f"{path}:{line}: the merge uses {name}, which nothing in {path} defines (not in the release either)"
            for name, line in sorted(_undefined(new_tree).items(), key=lambda kv: kv[1]) if name not in before]


def syntax_error(path: str, release: str, merged: str) -> list[str]:
    """A module the release ships parseable that no longer parses after the merge (or a resolution)."""
    try:
        ast.parse(release)
    except (SyntaxError, ValueError):
        return []
    try:
        ast.parse(merged)
    except SyntaxError as exc:
        return [f"{path}:{exc.lineno}: no longer parses as Python ({exc.msg})"]
    except ValueError as exc:
        return [f"{path}: no longer parses as Python ({exc})"]
    return []


def collisions(path: str, release: str, merged: str) -> list[str]:
    return (syntax_error(path, release, merged) or
            shadowed_definitions(path, release, merged) + undefined_names(path, release, merged))
