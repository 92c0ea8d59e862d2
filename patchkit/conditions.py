"""Header trailers that say when a patch's code is on its path, and when upstream does its job another way.

Reach conditions, one per line, name one or more wheel paths, a Python regular expression searched in them
(multi-line mode) and optionally an anchor, literal text that must be in a file for the condition to mean
anything there:

    Reached-If: sglang/srt/foo.py ~ <regex that must match for the patched code to run>
    Unreached-If: sglang/srt/a.py, sglang/srt/b.py ~ <regex> [anchor: <literal text>]

The first path is where the text lives on the pin (it must exist there, with its anchor: `check`); further
paths are where a later release may have moved it. A condition is evaluated on every listed file that
exists and holds its anchor; if there is none it is **stale** (its file is gone, or its anchor is), and a
stale condition is never counted as reached or unreached. A patch is "no longer reached" where a live
Reached-If fails or a live Unreached-If matches.

A replacement names what upstream now does the patch's job, evaluated on the pristine release:

    Superseded-By: <wheel path>[, <wheel path>...]:<Class.method | function | Class>
    Superseded-By: <wheel path>[, <wheel path>...]:"<literal text>"

Several Superseded-By trailers must all match (in any of their files). `check` requires that they do not
match on the pin. `superseded_by` runs on any tree (`tree_reader`), e.g. an upstream git checkout.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import PatchkitError
from .paths import clean_relpath

KEYS = ("Reached-If", "Unreached-If")
SUPERSEDED_BY = "Superseded-By"
_ANCHOR_RE = re.compile(r"^(.*) \[anchor: (.+)\]$")
_DOTTED_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

Reader = Callable[[str], "bytes | None"]


def _paths(text: str, where: str) -> tuple[str, ...]:
    paths = tuple(p.strip() for p in text.split(","))
    for p in paths:
        if not p:
            raise PatchkitError(f"{where}: expected '<wheel path>[, <wheel path>...]', found '{text}'")
        clean_relpath(p, where)
    return paths


def _decode(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


@dataclass(frozen=True)
class Condition:
    key: str                 # Reached-If | Unreached-If
    paths: tuple[str, ...]   # the pin's file first, then where the text may have moved
    pattern: str
    anchor: str | None = None

    @property
    def path(self) -> str:
        return self.paths[0]

    def text(self) -> str:
        anchor = f" [anchor: {self.anchor}]" if self.anchor else ""
        return f"{self.key}: {', '.join(self.paths)} ~ {self.pattern}{anchor}"

    def with_path(self, path: str) -> "Condition":
        return Condition(self.key, (path,) + self.paths[1:], self.pattern, self.anchor)

    def moved(self, renames: dict[str, str]) -> "Condition":
        return Condition(self.key, tuple(renames.get(p, p) for p in self.paths), self.pattern, self.anchor)

    def live_texts(self, read: Reader) -> list[tuple[str, str]]:
        """(path, text) of every listed file that exists and holds the anchor."""
        out = []
        for p in self.paths:
            text = _decode(read(p))
            if text is not None and (self.anchor is None or self.anchor in text):
                out.append((p, text))
        return out

    def stale_reason(self, read: Reader) -> str | None:
        """Why the condition means nothing on this tree (None when it is live)."""
        if self.live_texts(read):
            return None
        present = [p for p in self.paths if read(p) is not None]
        if not present:
            return f"{', '.join(self.paths)} {'is' if len(self.paths) == 1 else 'are'} gone"
        return f"{', '.join(present)} no longer hold{'s' if len(present) == 1 else ''} its anchor {self.anchor!r}"


def parse_condition(key: str, value: str, where: str = "") -> Condition:
    anchor = None
    m = _ANCHOR_RE.match(value)
    if m:
        value, anchor = m.group(1), m.group(2).strip()
    path, sep, pattern = value.partition(" ~ ")
    if not sep or not path.strip() or not pattern:
        raise PatchkitError(f"{where}{key}: expected '<wheel path> ~ <regex> [anchor: <text>]', found '{value}'")
    paths = _paths(path, f"{where}{key}")
    try:
        re.compile(pattern, re.M)
    except re.error as exc:
        raise PatchkitError(f"{where}{key}: invalid regex '{pattern}' ({exc})") from None
    return Condition(key, paths, pattern, anchor)


def conditions_of(trailers: list[tuple[str, str]], where: str = "") -> list[Condition]:
    return [parse_condition(k, v, where) for k, v in trailers if k in KEYS]


def unreached_reasons(conditions: list[Condition], read: Reader) -> list[str]:
    """Why the patch is off the path on the tree `read` gives access to; empty = reached. Stale
    conditions say nothing here (see stale_reasons)."""
    reasons = []
    for c in conditions:
        texts = c.live_texts(read)
        if not texts:
            continue
        hits = [p for p, t in texts if re.search(c.pattern, t, re.M)]
        if c.key == "Reached-If" and not hits:
            reasons.append(f"{', '.join(p for p, _ in texts)} no longer matches {c.pattern!r}")
        elif c.key == "Unreached-If" and hits:
            reasons.append(f"{hits[0]} now matches {c.pattern!r}")
    return reasons


def stale_reasons(conditions: list[Condition], read: Reader) -> list[str]:
    """One line per condition that means nothing on this tree: the condition and why."""
    return [f"stale condition '{c.text()}': {r}" for c in conditions if (r := c.stale_reason(read))]


def pin_problems(conditions: list[Condition], read: Reader) -> list[str]:
    """On the pin, each condition's first file must exist and hold its anchor."""
    out = []
    for c in conditions:
        text = _decode(read(c.path))
        if text is None:
            out.append(f"'{c.text()}': {c.path} does not exist on the pin")
        elif c.anchor is not None and c.anchor not in text:
            out.append(f"'{c.text()}': its anchor {c.anchor!r} is not in {c.path} on the pin")
    return out


# -- Superseded-By --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replacement:
    paths: tuple[str, ...]
    name: str | None = None      # a dotted definition: Class.method, function, Class
    literal: str | None = None   # or literal text

    def text(self) -> str:
        what = self.name if self.name is not None else f'"{self.literal}"'
        return f"{', '.join(self.paths)}:{what}"

    def moved(self, renames: dict[str, str]) -> "Replacement":
        return Replacement(tuple(renames.get(p, p) for p in self.paths), self.name, self.literal)

    def found_in(self, read: Reader) -> str | None:
        """The file that holds the replacement (None when none does)."""
        for p in self.paths:
            text = _decode(read(p))
            if text is None:
                continue
            if self.literal is not None and self.literal in text:
                return p
            if self.name is not None and defines(text, self.name):
                return p
        return None


def parse_replacement(value: str, where: str = "") -> Replacement:
    what = f"{where}{SUPERSEDED_BY}"
    if '"' in value:
        path, sep, rest = value.partition(':"')
        if not sep or not rest.endswith('"') or len(rest) < 2:
            raise PatchkitError(f'{what}: expected \'<wheel path>:"<literal text>"\', found \'{value}\'')
        return Replacement(_paths(path, what), literal=rest[:-1])
    path, sep, name = value.rpartition(":")
    if not sep or not _DOTTED_RE.fullmatch(name.strip()):
        raise PatchkitError(f"{what}: expected '<wheel path>:<Class.method | function | Class>' or "
                            f"'<wheel path>:\"<text>\"', found '{value}'")
    return Replacement(_paths(path, what), name=name.strip())


def replacements_of(trailers: list[tuple[str, str]], where: str = "") -> list[Replacement]:
    return [parse_replacement(v, where) for k, v in trailers if k == SUPERSEDED_BY]


def _body_defs(body) -> dict[str, ast.AST]:
    """Definitions in a module or class body, looking into if/try blocks (guarded definitions)."""
    out = {}
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, (ast.If, ast.Try)):
            for part in (node.body, node.orelse, getattr(node, "finalbody", []),
                         *[h.body for h in getattr(node, "handlers", [])]):
                out.update(_body_defs(part))
    return out


def defines(source: str, dotted: str) -> bool:
    """Whether Python `source` defines `dotted` (a module-level function or class, or Class.member)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    node: ast.AST = tree
    for part in dotted.split("."):
        if not isinstance(node, (ast.Module, ast.ClassDef)):
            return False
        node = _body_defs(node.body).get(part)
        if node is None:
            return False
    return True


def superseded_by(replacements: list[Replacement], read: Reader) -> list[str] | None:
    """'FILE:NAME' for each replacement when all of them are found on the tree; None otherwise (or none given)."""
    if not replacements:
        return None
    found = []
    for r in replacements:
        where = r.found_in(read)
        if where is None:
            return None
        found.append(f"{where}:{r.name if r.name is not None else repr(r.literal)}")
    return found


def tree_reader(root: Path, prefix: str = "") -> Reader:
    """A reader of wheel paths on a directory tree (`prefix`: where the wheel root lives in it, e.g. 'python/')."""
    root = Path(root)

    def read(rel: str) -> bytes | None:
        f = root / prefix / rel
        return f.read_bytes() if f.is_file() else None
    return read
