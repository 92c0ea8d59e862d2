"""Carry a pinned wheel in the bundle's xz payload and rebuild it byte for byte on the GPU machine.

A wheel deflates each member on its own; xz over the uncompressed members of both pinned wheels is about half
the size (sglang 0.5.14 + flashinfer-python 0.6.12: 26.2 MB as wheels, 12.4 MB as xz of their contents). patchkit
verifies a wheel by the sha256 of its bytes (pin.lock), so the bundle must hand it the very same file. `split`
keeps every byte of the wheel except its deflated streams (the 'frame': local headers, stored members, central
directory), the streams' uncompressed bytes (the 'members') and where each stream goes with its zlib level (the
'layout'); `join` deflates the members again and puts the wheel back together, checking every stream's length
and the whole file's sha256. A wheel whose streams this zlib does not reproduce exactly is not split (carried as
it is); a machine whose zlib deflates differently gets a one-line refusal from `join` (build the bundle with
--whole-wheels for it).
"""
from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path

LEVELS = (6, 9, 1, 2, 3, 4, 5, 7, 8)   # zipfile's and pip's default first: every member of both pinned wheels is 6
SUFFIXES = (".frame", ".members", ".layout.json")


class RezipError(Exception):
    """One line: what was expected, what was found."""


def _deflate(data: bytes, level: int) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, -15)   # raw deflate, zlib's default memLevel and strategy, as zipfile
    return c.compress(data) + c.flush()


def _streams(blob: bytes) -> list[tuple[int, int, int, str]]:
    """(offset of the compressed data, compressed size, method, name) of every member, from the central directory."""
    end = blob.rfind(b"PK\x05\x06")
    if end < 0:
        raise RezipError("expected a zip file, found no end of central directory")
    count, _, cd_offset = struct.unpack_from("<HII", blob, end + 10)
    out, pos = [], cd_offset
    for _ in range(count):
        if blob[pos:pos + 4] != b"PK\x01\x02":
            raise RezipError(f"expected a central directory entry at byte {pos}, found none")
        method, = struct.unpack_from("<H", blob, pos + 10)
        csize, _, nlen, xlen, clen = struct.unpack_from("<IIHHH", blob, pos + 20)
        local, = struct.unpack_from("<I", blob, pos + 42)
        name = blob[pos + 46:pos + 46 + nlen].decode("utf-8", "replace")
        if blob[local:local + 4] != b"PK\x03\x04" or csize == 0xFFFFFFFF or local == 0xFFFFFFFF:
            raise RezipError(f"expected a plain (non-zip64) local header for {name}, found another layout")
        lnlen, lxlen = struct.unpack_from("<HH", blob, local + 26)
        out.append((local + 30 + lnlen + lxlen, csize, method, name))
        pos += 46 + nlen + xlen + clen
    return sorted(out)


def split(wheel: Path, dest: Path) -> dict | None:
    """Write dest/<wheel>.frame, .members and .layout.json; return the layout, or None (and write nothing) when
    this zlib does not reproduce every deflated stream of the wheel (then it is carried whole)."""
    wheel = Path(wheel)
    blob = wheel.read_bytes()
    try:
        streams = _streams(blob)
    except (RezipError, struct.error, UnicodeDecodeError):
        return None
    layout, frame, members, pos = [], [], [], 0
    for offset, csize, method, name in streams:
        if method != 8:          # stored (or another method): left in the frame as it is
            continue
        raw = blob[offset:offset + csize]
        try:
            data = zlib.decompress(raw, -15)
        except zlib.error:
            return None
        level = next((lv for lv in LEVELS if _deflate(data, lv) == raw), None)
        if level is None:
            return None
        frame.append(blob[pos:offset])
        members.append(data)
        layout.append([offset, csize, len(data), level])
        pos = offset + csize
    frame.append(blob[pos:])
    info = {"wheel": wheel.name, "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest(),
            "zlib": zlib.ZLIB_RUNTIME_VERSION, "streams": layout}
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{wheel.name}.frame").write_bytes(b"".join(frame))
    (dest / f"{wheel.name}.members").write_bytes(b"".join(members))
    (dest / f"{wheel.name}.layout.json").write_text(json.dumps(info, separators=(",", ":")) + "\n")
    return info


def join(src: Path, name: str, out: Path) -> Path:
    """Rebuild wheel `name` from src/<name>.{frame,members,layout.json} into out/<name>; its sha256 is checked."""
    info = json.loads((src / f"{name}.layout.json").read_text())
    frame, members = (src / f"{name}.frame").read_bytes(), (src / f"{name}.members").read_bytes()
    parts, fpos, mpos, orig = [], 0, 0, 0
    for offset, csize, usize, level in info["streams"]:
        parts.append(frame[fpos:fpos + offset - orig])
        fpos += offset - orig
        stream = _deflate(members[mpos:mpos + usize], level)
        if len(stream) != csize:
            raise RezipError(f"{name}: expected the member at byte {offset} to deflate to {csize} bytes at level "
                             f"{level} (zlib {info['zlib']}), found {len(stream)} with zlib {zlib.ZLIB_RUNTIME_VERSION}: "
                             f"this Python's zlib deflates differently; build the bundle with --whole-wheels")
        parts.append(stream)
        mpos += usize
        orig = offset + csize
    parts.append(frame[fpos:])
    blob = b"".join(parts)
    digest = hashlib.sha256(blob).hexdigest()
    if len(blob) != info["size"] or digest != info["sha256"]:
        raise RezipError(f"{name}: expected sha256 {info['sha256'][:16]} ({info['size']} bytes) after rebuilding, found "
                         f"{digest[:16]} ({len(blob)} bytes) with zlib {zlib.ZLIB_RUNTIME_VERSION} (built with zlib "
                         f"{info['zlib']}); build the bundle with --whole-wheels")
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{name}.part"
    tmp.write_bytes(blob)
    tmp.replace(out / name)
    return out / name
