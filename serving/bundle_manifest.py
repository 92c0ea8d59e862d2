"""The bundle's manifest: every file with its size, sha256 and why it is there; the size limit; verification.

Layout of a bundle directory (serving/bundle.py builds it):

    manifest.json          this manifest (not listed in itself)
    payload.tar.xz         wheels/*.whl (stored, re-packed), stubs/..., jit-cache/..., and the pinned wheels
                           split (artifacts/<wheel>.frame/.members/.layout.json) in one xz stream
    artifacts/*.whl        the pinned upstream wheels, byte for byte, where they are not split (--whole-wheels)

`files` lists the bundle's own files; `payload` lists every member of payload.tar.xz; `artifacts` lists every
pinned wheel install rebuilds from the payload (size and sha256 of the wheel itself). Install checks all three
before it writes anything.
"""
from __future__ import annotations

import json
import lzma
import tarfile
from pathlib import Path

from patchkit import PatchkitError, jsonio
from patchkit.hashing import sha256_file
from patchkit.paths import clean_relpath

MANIFEST = "manifest.json"
PAYLOAD = "payload.tar.xz"
FORMAT = 2          # 2: the pinned wheels may travel split in the payload ('artifacts', bundle_rezip.py)
MIB = 1 << 20


class BundleError(Exception):
    """A user-facing failure: one line naming what was expected and what was found."""


def entry(path: Path, rel: str, why: str, **extra) -> dict:
    return {"path": rel, "size": Path(path).stat().st_size, "sha256": sha256_file(path), "why": why, **extra}


def write_payload(staging: Path, dest: Path) -> None:
    """tar staging/ (sorted, no owners or times) into one xz stream at dest."""
    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    tmp = dest.with_name(dest.name + ".part")
    with lzma.open(tmp, "wb", preset=9) as xz, tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in staging.rglob("*") if p.is_file()):
            tar.add(path, arcname=path.relative_to(staging).as_posix(), recursive=False, filter=clean)
    tmp.replace(dest)


def extract_payload(payload: Path, dest: Path) -> None:
    with tarfile.open(payload, "r:xz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or member.name.startswith(("/", "..")) or "/../" in member.name:
                raise BundleError(f"{payload}: expected plain relative files, found member {member.name!r}")
        try:
            tar.extractall(dest, filter="data")
        except TypeError:           # Python without extraction filters (< 3.11.4): members were checked above
            tar.extractall(dest)


def size_report(bundle: Path, manifest: dict, limit_mib: float) -> tuple[int, list[tuple[str, int]]]:
    """(total bytes of the bundle directory, biggest items): top-level files, and payload members uncompressed."""
    total = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    items = [(f["path"], f["size"]) for f in manifest["files"]]
    items += [(f"{PAYLOAD}:{m['path']} (uncompressed)", m["size"]) for m in manifest["payload"]]
    return total, sorted(items, key=lambda kv: -kv[1])


def check_size(bundle: Path, manifest: dict, limit_mib: float) -> int:
    total, items = size_report(bundle, manifest, limit_mib)
    if total > limit_mib * MIB:
        biggest = ", ".join(f"{name} {size / MIB:.1f} MiB" for name, size in items[:4])
        raise BundleError(f"bundle {bundle} is {total / MIB:.1f} MiB, expected at most {limit_mib:g} MiB; "
                          f"biggest: {biggest}")
    return total


def write_manifest(bundle: Path, manifest: dict) -> None:
    (bundle / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")


def _entries_problem(entries, key: str) -> str | None:
    if not isinstance(entries, list):
        return f"expected '{key}' as a list, found {type(entries).__name__}"
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("path"), str) and type(e.get("size")) is int
                and isinstance(e.get("sha256"), str) and len(e["sha256"]) == 64):
            return f"expected each of '{key}' as {{path, size, sha256}}, found {str(e)[:80]}"
        try:
            clean_relpath(e["path"], f"{key} path")
        except PatchkitError as exc:
            return str(exc)
    return None


def manifest_problem(manifest) -> str | None:
    """What is wrong with a manifest's shape (the fields install reads), None if nothing."""
    if not isinstance(manifest, dict):
        return f"expected a JSON object, found {type(manifest).__name__}"
    if manifest.get("format") != FORMAT:
        return f"expected manifest format {FORMAT}, found {manifest.get('format')!r}"
    target = manifest.get("target")
    if not (isinstance(target, dict) and isinstance(target.get("python"), str)):
        return "expected 'target' as an object with 'python' (a string)"
    return (_entries_problem(manifest.get("files"), "files") or _entries_problem(manifest.get("payload"), "payload")
            or _entries_problem(manifest.get("artifacts"), "artifacts"))


def read_manifest(bundle: Path) -> dict:
    path = Path(bundle) / MANIFEST
    if not path.is_file():
        raise BundleError(f"{bundle}: expected a bundle made by 'make bundle' ({MANIFEST}), found no {MANIFEST}")
    # size- and depth-limited, never through a link; a bundle copied from another machine may be another user's
    return jsonio.read(path, "a bundle manifest", manifest_problem, owned=False, error=BundleError)


def _check(path: Path, want: dict, label: str) -> None:
    if not path.is_file():
        raise BundleError(f"{label}: expected a file of {want['size']} bytes (sha256 {want['sha256'][:16]}), found none")
    size = path.stat().st_size
    found = sha256_file(path) if size == want["size"] else None
    if found != want["sha256"]:
        raise BundleError(f"{label}: expected sha256 {want['sha256'][:16]} ({want['size']} bytes), found "
                          f"{(found or sha256_file(path))[:16]} ({size} bytes); nothing installed")


def verify_files(bundle: Path, manifest: dict) -> None:
    """Every listed top-level file is there with its sha256, and nothing unlisted is there."""
    listed = {f["path"] for f in manifest["files"]}
    for f in manifest["files"]:
        _check(bundle / f["path"], f, str(bundle / f["path"]))
    extra = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*")
                   if p.is_file() and p.name != MANIFEST and p.relative_to(bundle).as_posix() not in listed)
    if extra:
        raise BundleError(f"{bundle}: expected only the files its manifest lists, found also {extra[0]}; nothing installed")


def verify_payload(unpacked: Path, manifest: dict) -> None:
    listed = {m["path"] for m in manifest["payload"]}
    for m in manifest["payload"]:
        _check(unpacked / m["path"], m, f"{PAYLOAD}:{m['path']}")
    extra = sorted(p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*")
                   if p.is_file() and p.relative_to(unpacked).as_posix() not in listed)
    if extra:
        raise BundleError(f"{PAYLOAD}: expected only the members the manifest lists, found also {extra[0]}; nothing installed")
