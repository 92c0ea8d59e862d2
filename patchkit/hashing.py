"""The one sha256 helper: hex digests of bytes and files, and the wheel RECORD form (PEP 376/427)."""
from __future__ import annotations

import base64
import hashlib
from pathlib import Path

_CHUNK = 1 << 20  # stream files: wheels are hundreds of MB


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return sha256_stream(fh)


def sha256_stream(fh) -> str:
    """The digest of an open binary file from its current position to its end."""
    digest = hashlib.sha256()
    for chunk in iter(lambda: fh.read(_CHUNK), b""):
        digest.update(chunk)
    return digest.hexdigest()


def record_digest(data: bytes) -> str:
    """A wheel RECORD entry's hash: 'sha256=' + urlsafe base64 without padding."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
