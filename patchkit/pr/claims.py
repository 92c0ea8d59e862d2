"""What an exported PR states, checked against what it ships, before anything is written.

- facts: a text's `{name}` is a module-level literal of an exported file (upstream-pr.toml `facts`), so a
  statement such as "runs on releases 3.6 and 3.8" is read from the code it describes, never typed twice;
- commands: every command the body prints must run in a checkout of the upstream project with this change
  alone: each `python -m MODULE` / `python FILE.py` it names must be in the base or in the commit;
- vocabulary: no exported file (whole new files, the lines a change adds to existing ones), body or
  message names this repository's own vocabulary (the series' `forbid` list).
"""
from __future__ import annotations

import ast
import difflib
import re
import shlex
from typing import Callable

from .. import PatchkitError

_FACT_RE = re.compile(r"\{(\w+)\}")
_PYTHON_RE = re.compile(r"^python(\d(\.\d+)?)?$")


# -- facts ------------------------------------------------------------------------------------------
def literal_of(source: bytes, name: str, where: str):
    """The value of the module-level assignment `name = <literal>` in a Python file."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise PatchkitError(f"{where}: expected Python, found a syntax error: {exc}") from None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise PatchkitError(f"{where}: expected {name} as a literal, found an expression") from None
    raise PatchkitError(f"{where}: expected a module-level {name} = <literal>, found none")


def spoken(value) -> str:
    """A literal as a sentence states it: ("3.6", "3.8") -> "3.6 and 3.8"."""
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [str(v) for v in (sorted(value) if isinstance(value, (set, frozenset)) else value)]
        return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]
    return str(value)


def fact_values(facts: dict[str, tuple[str, str]], read: Callable[[str], bytes | None], where: str) -> dict[str, str]:
    """name -> its sentence form, read from the exported files (`read`: wheel path -> bytes)."""
    out = {}
    for name, (path, const) in facts.items():
        data = read(path)
        if data is None:
            raise PatchkitError(f"{where}: facts.{name}: expected {path} among the files the PR ships, found none")
        out[name] = spoken(literal_of(data, const, f"{where}: facts.{name}: {path}"))
    return out


def fill_facts(text: str, values: dict[str, str], where: str) -> str:
    def sub(m: re.Match) -> str:
        if m.group(1) not in values:
            raise PatchkitError(f"{where}: expected {{{m.group(1)}}} to be one of its facts "
                                f"({', '.join(values) or 'none declared'}), found it undeclared")
        return values[m.group(1)]
    return _FACT_RE.sub(sub, text)


# -- commands ---------------------------------------------------------------------------------------
def python_targets(command: str) -> list[str]:
    """What each `python[3] -m MODULE` / `python[3] FILE` of a shell command runs: module names (dotted)
    and file paths, in order. Environment assignments, pipes and `&&` are understood; nothing is run."""
    found = []
    for line in command.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        for i, w in enumerate(words):
            if not _PYTHON_RE.match(w.rsplit("/", 1)[-1]):
                continue
            rest = words[i + 1:]
            while rest and rest[0].startswith("-") and rest[0] != "-m":
                rest = rest[1:]
            if len(rest) >= 2 and rest[0] == "-m":
                found.append(rest[1])
            elif rest and rest[0].endswith(".py"):
                found.append(rest[0])
    return found


def missing_targets(command: str, exists: Callable[[str], bool], prefix: str) -> list[str]:
    """The modules / files the command runs that the upstream checkout (with the change) lacks.
    A module M is there as PREFIX/M.py or PREFIX/M/__main__.py; a file as its repo path."""
    missing = []
    for target in python_targets(command):
        if target.endswith(".py"):
            ok = exists(target)
        else:
            base = prefix + target.replace(".", "/")
            ok = exists(base + ".py") or exists(base + "/__main__.py")
        if not ok:
            missing.append(target)
    return missing


# -- vocabulary -------------------------------------------------------------------------------------
def added_line_numbers(before: str, after: str) -> list[int]:
    """1-based numbers of the lines of `after` that `before` does not carry."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    return [j + 1 for op, _, _, j1, j2 in matcher.get_opcodes() if op in ("insert", "replace") for j in range(j1, j2)]


def file_hits(forbid: list[re.Pattern], path: str, before: bytes | None, after: bytes) -> list[tuple[str, int, str]]:
    """(path, line, term) of every forbidden term on a line the export ships: every line of a new file,
    the added lines of a changed one."""
    text = after.decode("utf-8", errors="replace")
    lines = text.splitlines()
    numbers = (range(1, len(lines) + 1) if before is None
               else added_line_numbers(before.decode("utf-8", errors="replace"), text))
    return [(path, n, m.group(0)) for n in numbers for rx in forbid for m in rx.finditer(lines[n - 1])]
