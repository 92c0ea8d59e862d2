"""One checked, compressed payload to copy to an air-gapped GPU machine, and its install there.

    python3 -m bench.airgapped.carry pack-dir SRC --keep lib,site,SOURCES.json --out build/carry-peer-0.7.4
    python3 -m bench.airgapped.carry install build/carry-peer-0.7.4 --into /tmp/peer-0.7.4        # on the GPU machine

What is copied beside the tree should be a small copy (the checkout and the bundle take 48 MiB at most), so it is packed small: one
deterministic `payload.tar.xz` (sorted members, no times or owners, xz -9) and `manifest.json` (every
member's size and sha256, the payload's sha256, and whatever the packer records about where it came
from). `install` checks the payload and each member against the manifest before anything is written,
unpacks into a folder beside INTO and renames it into place: a wrong byte is refused with one line and
INTO stays as it was. bench/airgapped/carry_triton.py packs a Triton release this way; `pack-dir` packs the
named parts of a folder (a built FlashInfer peer, say).
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import shutil
import sys
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

PAYLOAD = "payload.tar.xz"
MANIFEST = "manifest.json"
MIB = 1 << 20


class CarryError(Exception):
    """One line: what was expected, what was found."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextmanager
def written_whole(dest: Path):
    """A fresh folder beside DEST to fill: renamed onto DEST when the block ends, removed if it raises, so DEST is
    either as it was or whole."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)


def pack(entries: Iterable[tuple[str, bytes, int]], out: Path, meta: dict) -> dict:
    """OUT/payload.tar.xz of (name, bytes, mode) entries, sorted by name, and OUT/manifest.json (meta + the
    members + the payload's sha256 and size). OUT is written whole or not at all."""
    manifest = {**meta, "members": []}
    with written_whole(out) as tmp:
        with lzma.open(tmp / PAYLOAD, "wb", preset=9) as xz, \
                tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data, mode in sorted(entries, key=lambda e: e[0]):
                member = tarfile.TarInfo(name)
                member.size, member.mtime, member.uid, member.gid, member.mode = len(data), 0, 0, 0, mode
                tar.addfile(member, io.BytesIO(data))
                manifest["members"].append({"path": name, "size": len(data), "sha256": sha256(data)})
        if not manifest["members"]:
            raise CarryError(f"expected files to pack into {out}, found none")
        manifest["payload_sha256"] = file_sha256(tmp / PAYLOAD)
        manifest["payload_size"] = (tmp / PAYLOAD).stat().st_size
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def dir_entries(src: Path, keep: list[str]) -> Iterable[tuple[str, bytes, int]]:
    """Every file under each of SRC's `keep` paths (a file or a folder), named relative to SRC."""
    for part in keep:
        top = src / part
        if not top.exists():
            raise CarryError(f"{src}: expected {part} to pack, found nothing there")
        for f in sorted([top] if top.is_file() else (p for p in top.rglob("*") if p.is_file())):
            if f.is_symlink():
                raise CarryError(f"{f}: expected a plain file, found a symbolic link")
            yield f.relative_to(src).as_posix(), f.read_bytes(), 0o755 if os.access(f, os.X_OK) else 0o644


def read_manifest(src: Path) -> dict:
    try:
        manifest = json.loads((src / MANIFEST).read_text())
        if not isinstance(manifest["members"], list) or not isinstance(manifest["payload_sha256"], str):
            raise TypeError("members / payload_sha256 of the wrong type")
        return manifest
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CarryError(f"expected {src / MANIFEST} as a packer writes it, found: {type(exc).__name__}: {exc}") from None


def install(src: Path, into: Path) -> dict:
    """Unpack SRC's payload into INTO after checking it and each member against the manifest."""
    manifest = read_manifest(src)
    payload = src / PAYLOAD
    if not payload.is_file() or file_sha256(payload) != manifest["payload_sha256"]:
        found = file_sha256(payload)[:16] if payload.is_file() else "no file"
        raise CarryError(f"{payload}: expected sha256 {manifest['payload_sha256'][:16]}, found {found}; nothing written")
    want = {m["path"]: m["sha256"] for m in manifest["members"]}
    with written_whole(into) as tmp:
        seen = set()
        with tarfile.open(payload, "r:xz") as tar:
            for member in tar:
                name = member.name
                if name not in want or not member.isfile() or name.startswith("/") or ".." in Path(name).parts:
                    raise CarryError(f"{payload}: expected only the manifest's files, found {name!r}; nothing written")
                data = tar.extractfile(member).read()
                if sha256(data) != want[name]:
                    raise CarryError(f"{payload}: {name}: expected sha256 {want[name][:16]}, "
                                     f"found {sha256(data)[:16]}; nothing written")
                dest = tmp / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                dest.chmod(member.mode & 0o755)
                seen.add(name)
        if seen != set(want):
            raise CarryError(f"{payload}: expected {len(want)} files, found {len(seen)}; nothing written")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack-dir", help="pack the named parts of a folder")
    p.add_argument("src", type=Path)
    p.add_argument("--keep", required=True, help="comma-separated files / folders of SRC to pack")
    p.add_argument("--out", type=Path, required=True)
    i = sub.add_parser("install", help="check and unpack a payload (on the GPU box)")
    i.add_argument("src", type=Path)
    i.add_argument("--into", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        if args.command == "pack-dir":
            keep = [k for k in args.keep.split(",") if k]
            m = pack(dir_entries(args.src, keep), args.out, {"source": args.src.name, "kept": keep})
            print(f"{args.out / PAYLOAD}: {len(m['members'])} files, "
                  f"{sum(x['size'] for x in m['members']) / MIB:.1f} MiB unpacked, {m['payload_size'] / MIB:.1f} MiB packed")
        else:
            m = install(args.src, args.into)
            print(f"{args.into}: {len(m['members'])} files checked against {args.src / MANIFEST}")
    except CarryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
