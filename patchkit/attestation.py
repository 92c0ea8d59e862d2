"""The attestation manifest: which patch set a target carries, written into the target by apply.

`DIR/.patchkit-attestation.json` names the release line, the patch-set version, the series digest and every
series, patch and overlay file with its sha256 (patchset.py), plus the releases it was applied to. apply
writes it right after its transaction (and refreshes it when the tree is already applied), revert removes it;
`status --target`, doctor and the patched program itself read it back. This module says what the manifest
holds; the file itself is one of the target's own files (bookkeeping.TargetFiles, key KEY): never read or
written through a link, a regular file of this user, bounded JSON. A manifest is a claim about the set,
not about the bytes: status still hashes every file.
"""
from __future__ import annotations

import re
from pathlib import Path

from . import PatchkitError
from .bookkeeping import TargetFiles
from .patchset import PatchSetId, digest_of

MANIFEST = TargetFiles.NAMES["attestation"]
KEY = "attestation"              # its key among the target's own files (read and written only through them)
FORMAT = 1
_HEX64 = re.compile(r"[0-9a-f]{64}")


def record(ident: PatchSetId, releases: list[str]) -> dict:
    return {"format": FORMAT, "line": ident.line, "version": ident.version, "series_digest": ident.digest,
            "applied_to": list(releases), "files": [{"path": p, "sha256": s} for p, s in ident.files]}


def _problem(data) -> str | None:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return f"expected an object with \"format\": {FORMAT}"
    if not isinstance(data.get("line"), str) or not (data.get("version") is None or isinstance(data["version"], str)):
        return "expected 'line' (a string) and 'version' (a string or null)"
    if not (isinstance(data.get("series_digest"), str) and _HEX64.fullmatch(data["series_digest"])):
        return "expected 'series_digest' as 64 hex digits"
    if not (isinstance(data.get("applied_to"), list) and all(isinstance(r, str) for r in data["applied_to"])):
        return "expected 'applied_to' as a list of strings"
    files = data.get("files")
    if not (isinstance(files, list) and all(isinstance(f, dict) and set(f) == {"path", "sha256"}
                                            and isinstance(f["path"], str) and isinstance(f["sha256"], str)
                                            and _HEX64.fullmatch(f["sha256"]) for f in files)):
        return "expected 'files' as a list of {path, sha256}"
    if digest_of((f["path"], f["sha256"]) for f in files) != data["series_digest"]:
        return "its 'series_digest' is not the digest of its 'files'"
    return None


def read(target: Path) -> dict | None:
    """The manifest of `target`, None if it has none; a malformed one (or not a regular file of ours) is a
    one-line PatchkitError."""
    return TargetFiles(target).read_json(KEY, _problem)


def describe(target: Path, ident: PatchSetId | None = None) -> str:
    """One line for status and doctor: what the target attests, and whether it is the set `ident` names."""
    try:
        data = read(target)
    except PatchkitError as exc:
        return f"attestation: unreadable: {exc}"
    if data is None:
        return f"attestation: none ({MANIFEST} absent: apply writes it)"
    said = (f"attestation: line {data['line']}, version {data['version'] or 'unversioned'}, "
            f"series digest {data['series_digest'][:16]}")
    if ident is None:
        return said
    if data["series_digest"] == ident.digest and data["version"] == ident.version and data["line"] == ident.line:
        return said + " (this patch set)"
    if data["line"] != ident.line:      # another release line: apply refuses this target, its own line fits it
        return said + f" (NOT this patch set: {ident.label}; the target is line {data['line']}'s)"
    return said + f" (NOT this patch set: {ident.label}; apply refreshes it)"


def carried_line(target: Path) -> str:
    """Which line the target's manifest names, in words for status."""
    try:
        data = read(target)
    except PatchkitError:
        return "an unreadable attestation"
    return "no attested line" if data is None else f"line {data['line']}"
