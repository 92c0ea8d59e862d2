"""The patch set's own version, one per release line, and the digest that ties a version to its bytes.

A release line is the upstream release a series is written for (`Lock.line`: its key in pin.lock's
[line."LINE"...] tables). pin.lock's `[line."LINE".patchset] version = "..."` names the patch set's version on it;
CHANGELOG.md holds one entry per version, each recording the series digest of that version:

    ## 0.5.14 line
    ### 0.1.0 (2026-12-02)
    Series-Digest: <64 hex digits>

The series digest is the sha256 of `files()` written as `sha256sum` lines ("<sha256>  <path>\\n", repository
paths, series order): every series listing, patch file and claimed overlay file. `check` recomputes it, so a
patch byte that changes without a new version (and a CHANGELOG entry that records the new digest) fails.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .hashing import sha256_bytes, sha256_file

CHANGELOG = "CHANGELOG.md"
_LINE_HEADING = re.compile(r"^## (\S+) line\s*$")
_VERSION_HEADING = re.compile(r"^### (\S+)(?:\s.*)?$")
_DIGEST_LINE = re.compile(r"^Series-Digest: ([0-9a-f]{64})\s*$")


@dataclass(frozen=True)
class PatchSetId:
    """Which patch set a repository holds: its release line, version (None: unversioned) and digest."""
    line: str
    version: str | None
    digest: str
    files: tuple[tuple[str, str], ...]     # (repository path, sha256) in digest order

    @property
    def label(self) -> str:
        return f"line {self.line}, version {self.version or 'unversioned'}, series digest {self.digest[:16]}"


def files(engine) -> list[tuple[str, str]]:
    """(path, sha256) of every series listing, patch (in series order) and claimed overlay file; paths are
    named as in a repository (patches/LINE/NAME/..., overlay/LINE/...) wherever the engine reads them from."""
    out, line = [], engine.lock.line
    for name in engine.lock.upstreams:
        series = engine.series(name)
        listing = series.directory / "series"
        if listing.is_file():
            out.append((f"patches/{line}/{name}/series", sha256_file(listing)))
        out += [(f"patches/{line}/{name}/{p.name}", sha256_file(p.path)) for p in series.patches]
        out += [(f"overlay/{line}/{rel}", sha256_file(series.overlay_root / rel))
                for rel in sorted(series.overlay_owner)]
    return out


def digest_of(entries) -> str:
    return sha256_bytes("".join(f"{sha}  {path}\n" for path, sha in entries).encode())


def identify(engine) -> PatchSetId:
    entries = tuple(files(engine))
    line = engine.lock.line
    return PatchSetId(line, engine.lock.patchsets.get(line), digest_of(entries), entries)


def changelog_entries(text: str) -> list[tuple[str, str, str | None, int]]:
    """(line, version, recorded digest or None, line number) of every `### VERSION` under a `## LINE line`."""
    entries, line = [], None
    for number, raw in enumerate(text.splitlines(), 1):
        if m := _LINE_HEADING.match(raw):
            line = m.group(1)
        elif raw.startswith("## "):
            line = None
        elif (m := _VERSION_HEADING.match(raw)) and line is not None:
            entries.append([line, m.group(1), None, number])
        elif (m := _DIGEST_LINE.match(raw)) and entries and entries[-1][2] is None and line == entries[-1][0]:
            entries[-1][2] = m.group(1)
    return [tuple(e) for e in entries]


def problems(engine, ident: PatchSetId | None = None) -> list[str]:
    """Why the repository's patch set is not a released version: [] when pin.lock names a version for its line
    and CHANGELOG.md has exactly one entry for it, recording the digest the series has now."""
    ident = ident or identify(engine)
    lock_name = Path(engine.lock.path).name
    bump = (f"bump [line.\"{ident.line}\".patchset] version in {lock_name} and add a CHANGELOG.md entry "
            f"'### VERSION' under '## {ident.line} line' with 'Series-Digest: {ident.digest}'")
    if ident.version is None:
        return [f"{lock_name}: expected a [line.\"{ident.line}\".patchset] version for release line {ident.line}, "
                f"found none ({'versioned lines: ' + ', '.join(engine.lock.patchsets) if engine.lock.patchsets else 'no patchset table'})"]
    path = engine.repo / CHANGELOG
    if not path.is_file():
        return [f"{path}: expected a changelog with an entry for {ident.line} {ident.version}, found no file"]
    mine = [e for e in changelog_entries(path.read_text(encoding="utf-8"))
            if e[0] == ident.line and e[1] == ident.version]
    if not mine:
        return [f"{CHANGELOG}: expected an entry '### {ident.version}' under '## {ident.line} line', found none "
                f"(series digest now {ident.digest})"]
    if len(mine) > 1:
        return [f"{CHANGELOG}: expected one entry for {ident.line} {ident.version}, found {len(mine)} "
                f"(lines {', '.join(str(e[3]) for e in mine)})"]
    recorded = mine[0][2]
    if recorded is None:
        return [f"{CHANGELOG}:{mine[0][3]}: expected 'Series-Digest: {ident.digest}' in the entry for "
                f"{ident.line} {ident.version}, found none"]
    if recorded != ident.digest:
        return [f"series or overlay changed since {ident.line} {ident.version} (CHANGELOG.md records digest "
                f"{recorded[:16]}, the files give {ident.digest[:16]}): {bump}"]
    return []
