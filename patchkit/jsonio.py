"""The one way patchkit (and serving) reads a JSON file it did not just compute: bounded, then schema-checked.

json.loads recurses once per nesting level, so a file of 100 000 '[' raises RecursionError (a traceback,
not an error line); and a huge file is read whole. Every JSON read goes through `parse`/`read`, which
refuse a document over `max_bytes` or nested deeper than `max_depth` before parsing it, and then hand the
value to the caller's schema check (`schema(value) -> problem or None`). Errors are one line naming the
file, what was expected and what was found.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

from . import PatchkitError, fsio

MAX_BYTES = 4 << 20
MAX_DEPTH = 32
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET_RE = re.compile(r"[\[\]{}]")


def _depth(text: str) -> int:
    """How deep the arrays and objects of `text` nest (brackets inside strings do not count)."""
    depth = deepest = 0
    for b in _BRACKET_RE.findall(_STRING_RE.sub("", text)):
        depth += 1 if b in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse(raw: bytes | str, where, schema: Callable | None = None, *, max_bytes: int = MAX_BYTES,
          max_depth: int = MAX_DEPTH, error: type[Exception] = PatchkitError):
    """The JSON value of `raw` (from `where`), within the limits and accepted by `schema`, else `error`."""
    if len(raw) > max_bytes:
        raise error(f"{where}: expected JSON of at most {max_bytes} bytes, found {len(raw)}")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{where}: expected UTF-8 JSON, found a byte that is not UTF-8 (at offset {exc.start})") from None
    depth = _depth(raw)
    if depth > max_depth:
        raise error(f"{where}: expected JSON nested at most {max_depth} levels deep, found {depth}")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise error(f"{where}: expected JSON, found {str(exc).splitlines()[0][:120]}") from None
    problem = schema(value) if schema else None
    if problem:
        raise error(f"{where}: {problem}")
    return value


def read(path: Path, what: str, schema: Callable | None = None, *, owned: bool = True,
         max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, error: type[Exception] = PatchkitError):
    """The JSON value of the file at `path` (None if absent), read without following a link; `owned`: it must
    also belong to this user (patchkit's own bookkeeping)."""
    try:
        raw = fsio.read_owned(path, what, limit=max_bytes) if owned else fsio.read_regular(path, what, limit=max_bytes)
    except PatchkitError as exc:
        if error is PatchkitError:
            raise
        raise error(str(exc)) from None
    if raw is None:
        return None
    return parse(raw, path, schema, max_bytes=max_bytes, max_depth=max_depth, error=error)
