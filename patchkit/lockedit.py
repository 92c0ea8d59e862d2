"""Rewrite pin.lock in place, keeping comments and layout: values inside one line's [line."LINE".upstream.NAME] and
[line."LINE".runtime] tables, or a copy of a line's tables under a new line name.

A pin that `rebase --force` took although another pinned release does not accept it carries a comment line right
above its `version` key, starting with FORCED_NOTE; every rewrite of that version replaces or drops it."""
from __future__ import annotations

import json
import re

from . import PatchkitError

_TABLE_RE = re.compile(r"^\s*\[([^\]]+)\]\s*(#.*)?$")
_KEY_RE = re.compile(r'^(\s*)([A-Za-z0-9_-]+)(\s*=\s*)("(?:[^"\\]|\\.)*")(.*)$')
FORCED_NOTE = "# rebase --force:"


def _prefix(line: str) -> str:
    return f'line."{line}".'


def update_lock_text(text: str, updates: dict[str, dict[str, str]], runtime: dict[str, str] | None = None, *,
                     line: str, notes: dict[str, str] | None = None) -> str:
    """updates: upstream name -> {key: new string value}; runtime: [runtime] key -> new value, all in the tables of
    release line `line`. Every key must already be in its table. notes: upstream name -> the requirement its new
    version breaks (written above its `version` key; an old note there goes with any rewrite of the version)."""
    lines = text.splitlines(keepends=True)
    table = None
    pending = {f"{_prefix(line)}upstream.{name}": dict(values) for name, values in updates.items()}
    noted = {f"{_prefix(line)}upstream.{name}": note for name, note in (notes or {}).items()}
    if runtime:
        pending[f"{_prefix(line)}runtime"] = dict(runtime)
    out = []
    for raw in lines:
        m = _TABLE_RE.match(raw.rstrip("\n"))
        if m:
            table = m.group(1).strip()
            out.append(raw)
            continue
        name = table
        km = _KEY_RE.match(raw.rstrip("\n")) if table else None
        if name in pending and km and km.group(2) in pending[name]:
            new = json.dumps(pending[name].pop(km.group(2)))
            old_len = len(km.group(4))
            rest = km.group(5)
            # keep trailing comments aligned where the new value is not longer than the padding allows
            if rest.startswith(" ") and len(new) > old_len:
                pad = len(rest) - len(rest.lstrip(" "))
                rest = " " * max(1, pad - (len(new) - old_len)) + rest.lstrip(" ")
            elif rest.startswith(" ") and len(new) < old_len:
                rest = " " * (old_len - len(new)) + rest
            end = "\n" if raw.endswith("\n") else ""
            if km.group(2) == "version":
                if out and out[-1].lstrip().startswith(FORCED_NOTE):
                    out.pop()
                if name in noted:
                    out.append(f"{km.group(1)}{FORCED_NOTE} {noted.pop(name)}\n")
            raw = f"{km.group(1)}{km.group(2)}{km.group(3)}{new}{rest}{end}"
        out.append(raw)
    missing = [f"[{n}] {k}" for n, vals in pending.items() for k in vals] + [f"[{n}] version" for n in noted]
    if missing:
        raise PatchkitError(f"pin.lock: expected keys to rewrite, found none for {', '.join(missing)}")
    return "".join(out)


def copy_line_text(text: str, old: str, new: str) -> str:
    """pin.lock with every [line."OLD"...] table (its keys and comments) appended again as [line."NEW"...]."""
    blocks, keep = [], False
    for raw in text.splitlines(keepends=True):
        m = _TABLE_RE.match(raw.rstrip("\n"))
        if m:
            keep = m.group(1).strip().startswith(_prefix(old))
            if keep:
                blocks.append("[" + _prefix(new) + m.group(1).strip()[len(_prefix(old)):] + "]\n")
                continue
        if keep:
            blocks.append(raw)
    if not blocks:
        raise PatchkitError(f'pin.lock: expected [line."{old}"...] tables to copy, found none')
    body = "".join(blocks).rstrip("\n") + "\n"
    return text.rstrip("\n") + f"\n\n# The {new} line, started from the {old} line by rebase --new-line.\n" + body
