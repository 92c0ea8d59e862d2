"""Paths that come from data (patch headers, diffs, wheel entries, bookkeeping files, rebase state).

Each one must be a normalised relative POSIX path, and is joined to its root only after that check,
so that `sglang/../../../x`, `/etc/x` or `C:\\x` can never name a file outside the root.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path

from . import PatchkitError

_DRIVE_RE = re.compile(r"^[A-Za-z]:")


def clean_relpath(rel, what: str) -> str:
    """`rel` itself if it is a normalised relative path; otherwise a one-line PatchkitError about `what`."""
    if not isinstance(rel, str) or not rel:
        raise PatchkitError(f"{what}: expected a relative path, found {rel!r}")
    if "\0" in rel or "\\" in rel or rel.startswith("/") or _DRIVE_RE.match(rel):
        raise PatchkitError(f"{what}: expected a relative path inside its root, found {rel!r}")
    if posixpath.normpath(rel) != rel or rel == "." or rel.split("/")[0] == "..":
        raise PatchkitError(f"{what}: expected a normalised path inside its root (no '..', '.' or '//'), found {rel!r}")
    return rel


def under(rel: str, top: str, what: str) -> str:
    """A clean path that lies below the directory `top` (itself a clean relative path)."""
    clean_relpath(rel, what)
    if not rel.startswith(top.rstrip("/") + "/"):
        raise PatchkitError(f"{what}: expected a path under {top}/, found {rel!r}")
    return rel


def within(root: Path, rel, what: str) -> Path:
    """root / rel, once rel is known to stay inside root."""
    return Path(root) / clean_relpath(rel, what)


def safe_name(name, what: str) -> str:
    """A single path component (an upstream name, an artifact file name)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", name) or ".." in name:
        raise PatchkitError(f"{what}: expected a plain file name (letters, digits, . _ + -), found {name!r}")
    return name
