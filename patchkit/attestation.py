"""The attestation manifest: which patch set a target carries, written into the target by apply.

`DIR/.patchkit-attestation.json` names the release line, the patch-set version, the series digest and every
series, patch and overlay file with its sha256 (patchset.py), plus the releases it was applied to. apply
writes it right after its transaction (and refreshes it when the tree is already applied), revert removes it;
`status --target`, doctor and the patched program itself read it back. A manifest is a claim about the set,
not about the bytes: status still hashes every file.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from . import PatchkitError, fsio
from .patchset import PatchSetId, digest_of

MANIFEST = ".patchkit-attestation.json"
FORMAT = 1
_HEX64 = re.compile(r"[0-9a-f]{64}")


def path_in(target: Path) -> Path:
    return Path(target) / MANIFEST


def record(ident: PatchSetId, releases: list[str]) -> dict:
    return {"format": FORMAT, "line": ident.line, "version": ident.version, "series_digest": ident.digest,
            "applied_to": list(releases), "files": [{"path": p, "sha256": s} for p, s in ident.files]}


def _encode(data: dict) -> bytes:
    return (json.dumps(data, indent=1) + "\n").encode()


def refuse_if_foreign(target: Path) -> bytes | None:
    """The manifest's bytes, None if absent; a link, directory or another user's file at its name is refused
    (apply and revert call this before their first write, so nothing is written)."""
    return fsio.read_owned(path_in(target), "an attestation manifest", limit=1 << 20)


def write(target: Path, data: dict) -> bool:
    """Write the manifest unless it already holds `data` (a malformed one of ours is replaced); True if it wrote."""
    new = _encode(data)
    if refuse_if_foreign(target) == new:
        return False
    fsio.atomic_write(path_in(target), new)
    return True


def remove(target: Path) -> bool:
    """Remove the manifest (malformed or not); True if there was one."""
    if refuse_if_foreign(target) is None:
        return False
    path_in(target).unlink()
    return True


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
    """The manifest of `target`, None if it has none; a malformed one is a one-line PatchkitError."""
    path = path_in(target)
    raw = fsio.read_owned(path, "an attestation manifest", limit=1 << 20)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise PatchkitError(f"{path}: expected an attestation manifest (JSON), found {exc}") from None
    problem = _problem(data)
    if problem:
        raise PatchkitError(f"{path}: {problem}")
    return data


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
    if data["series_digest"] == ident.digest:
        return said + " (this patch set)"
    return said + f" (NOT this patch set: {ident.label}; apply refreshes it)"
