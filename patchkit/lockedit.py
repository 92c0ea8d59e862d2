"""Rewrite values inside pin.lock's [upstream.NAME] and [runtime] tables in place, keeping comments and layout."""
from __future__ import annotations

import json
import re

from . import PatchkitError

_TABLE_RE = re.compile(r"^\s*\[([^\]]+)\]\s*(#.*)?$")
_KEY_RE = re.compile(r'^(\s*)([A-Za-z0-9_-]+)(\s*=\s*)("(?:[^"\\]|\\.)*")(.*)$')


def update_lock_text(text: str, updates: dict[str, dict[str, str]], runtime: dict[str, str] | None = None) -> str:
    """updates: upstream name -> {key: new string value}; runtime: [runtime] key -> new value. Every key must
    already be in its table."""
    lines = text.splitlines(keepends=True)
    table = None
    pending = {f"upstream.{name}": dict(values) for name, values in updates.items()}
    if runtime:
        pending["runtime"] = dict(runtime)
    for i, line in enumerate(lines):
        m = _TABLE_RE.match(line.rstrip("\n"))
        if m:
            table = m.group(1).strip()
            continue
        if not table:
            continue
        name = table
        km = _KEY_RE.match(line.rstrip("\n"))
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
            end = "\n" if line.endswith("\n") else ""
            lines[i] = f"{km.group(1)}{km.group(2)}{km.group(3)}{new}{rest}{end}"
    missing = [f"[{n}] {k}" for n, vals in pending.items() for k in vals]
    if missing:
        raise PatchkitError(f"pin.lock: expected keys to rewrite, found none for {', '.join(missing)}")
    return "".join(lines)
