"""Find a release's artifact on a PEP 503 package index: the file of the same kind as a pinned one.

"Same kind" is read off the pinned file name, never configured: a wheel keeps its python, ABI and
platform tags (cp311-cp311-manylinux_2_34_x86_64 stays that), an sdist keeps its archive suffix.
The sha256 comes from the index page's `#sha256=` fragment; an index that does not publish one is
refused, because the download could then not be verified.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from . import PatchkitError
from .fetch import cache_dir, index_links
from .names import canonical_name

_SDIST_SUFFIXES = (".tar.gz", ".tar.bz2", ".zip", ".tgz")


@dataclass(frozen=True)
class Release:
    artifact: str
    url: str
    sha256: str


def artifact_kind(filename: str) -> tuple[str, ...]:
    """('wheel', python, abi, platform) or ('sdist', suffix)."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        if len(parts) < 5:
            raise PatchkitError(f"{filename}: expected a wheel name NAME-VERSION-PY-ABI-PLATFORM.whl")
        return ("wheel", *parts[-3:])
    for suffix in _SDIST_SUFFIXES:
        if filename.endswith(suffix):
            return ("sdist", suffix)
    raise PatchkitError(f"{filename}: expected a wheel or an sdist file name")


def artifact_version(filename: str) -> str:
    if filename.endswith(".whl"):
        return filename[:-4].split("-")[1]
    stem = next((filename[: -len(s)] for s in _SDIST_SUFFIXES if filename.endswith(s)), filename)
    return stem.rsplit("-", 1)[-1]


def _same_version(a: str, b: str) -> bool:
    norm = lambda v: re.sub(r"[-_.]+", ".", v).lower()
    return norm(a) == norm(b)


def choose_artifact(links, package: str, version: str, like: str) -> Release:
    """The file of `version` whose kind matches the pinned artifact `like`."""
    kind = artifact_kind(like)
    of_version = [(n, u, d) for n, u, d in links
                  if _safe_kind(n) is not None and _same_version(artifact_version(n), version)]
    if not of_version:
        raise PatchkitError(f"package index: expected {package} {version}, found no files of that version")
    matches = [(n, u, d) for n, u, d in of_version if _safe_kind(n) == kind]
    if not matches:
        found = ", ".join(sorted(n for n, _, _ in of_version)[:6])
        raise PatchkitError(f"package index: expected a {package} {version} file of the same kind as {like} "
                            f"({'-'.join(kind[1:])}), found only: {found}")
    name, url, digest = matches[0]
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise PatchkitError(f"package index: {name} has no #sha256= digest on the index page; cannot verify it")
    return Release(name, url, digest)


def _safe_kind(name: str):
    try:
        return artifact_kind(name)
    except PatchkitError:
        return None


def _remembered() -> Path:
    return cache_dir().parent / "releases.json"


def find_release(index_url: str, package: str, version: str, like: str) -> Release:
    """Ask the index; remember the answer so that a later run without network can reuse it."""
    key = f"{index_url} {canonical_name(package)} {version} {'-'.join(artifact_kind(like))}"
    memory = _remembered()
    try:
        known = json.loads(memory.read_text()) if memory.exists() else {}
    except ValueError:
        known = {}
    try:
        rel = choose_artifact(index_links(index_url, package), package, version, like)
    except PatchkitError as exc:
        remembered = known.get(key) if isinstance(known, dict) else None
        if (isinstance(remembered, dict) and set(remembered) == {"artifact", "url", "sha256"}
                and str(exc).startswith("cannot read package index page")):
            return Release(**remembered)
        raise
    known = known if isinstance(known, dict) else {}
    known[key] = rel.__dict__
    tmp = memory.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
    os.replace(tmp, memory)
    return rel
