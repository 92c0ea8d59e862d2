"""Reach conditions: header trailers that say when a patch's code is on the path it was written for.

A patch states them in its trailer block, one per line, as a wheel path and a Python regular
expression searched in that file (multi-line mode):

    Reached-If: sglang/srt/foo.py ~ <regex that must match for the patched code to run>
    Unreached-If: sglang/srt/bar.py ~ <regex whose match means a new default routes around it>

A patch is "no longer reached" on a release where any Reached-If fails (its file gone or the regex
unmatched) or any Unreached-If matches. `rebase` evaluates them on the new release with the series
replayed; on the pinned release every condition must say "reached" (`apply.py check` enforces it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from . import PatchkitError
from .paths import clean_relpath

KEYS = ("Reached-If", "Unreached-If")


@dataclass(frozen=True)
class Condition:
    key: str          # Reached-If | Unreached-If
    path: str
    pattern: str

    def text(self) -> str:
        return f"{self.key}: {self.path} ~ {self.pattern}"

    def with_path(self, path: str) -> "Condition":
        return Condition(self.key, path, self.pattern)


def parse_condition(key: str, value: str, where: str = "") -> Condition:
    path, sep, pattern = value.partition(" ~ ")
    if not sep or not path.strip() or not pattern:
        raise PatchkitError(f"{where}{key}: expected '<wheel path> ~ <regex>', found '{value}'")
    clean_relpath(path.strip(), f"{where}{key}")
    try:
        re.compile(pattern, re.M)
    except re.error as exc:
        raise PatchkitError(f"{where}{key}: invalid regex '{pattern}' ({exc})") from None
    return Condition(key, path.strip(), pattern)


def conditions_of(trailers: list[tuple[str, str]], where: str = "") -> list[Condition]:
    return [parse_condition(k, v, where) for k, v in trailers if k in KEYS]


def unreached_reasons(conditions: list[Condition], read: Callable[[str], bytes | None]) -> list[str]:
    """Why the patch is off the path on the tree `read` gives access to; empty = reached."""
    reasons = []
    for c in conditions:
        data = read(c.path)
        text = data.decode("utf-8", "replace") if data is not None else None
        hit = text is not None and re.search(c.pattern, text, re.M) is not None
        if c.key == "Reached-If" and not hit:
            reasons.append(f"{c.path} {'is gone' if text is None else 'no longer matches ' + repr(c.pattern)}")
        elif c.key == "Unreached-If" and hit:
            reasons.append(f"{c.path} now matches {c.pattern!r}")
    return reasons
