"""Where CI's `make test` keeps pytest's temporary files: a folder on the machine's RAM-backed file system when it
has room, else the checkout's own build/pytest-tmp (make test's default).

The tests unpack whole release trees and build git repositories from them, tens of thousands of small files; on
a disk that limits writes per second those writes, not the CPU, set how long such a test takes (BENCHMARKS.md,
"What the two commands cost", has the run that measured it).
The folder is named after the checkout, so a second run of one checkout empties its own and no other; make test
removes it after a green run, as it removes build/pytest-tmp.

    python3 .ci/test_tmp.py MIN_GIB      prints the folder (pass it as make test PYTEST_TMP=...)
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

RAM_FS = Path("/dev/shm")
DEFAULT = "build/pytest-tmp"


def ram_backed(path: Path) -> bool:
    """`path` is a mount point of a tmpfs (/proc/mounts), not a disk folder that happens to carry the name."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(f.split()[1:3] == [str(path), "tmpfs"] for f in mounts if len(f.split()) >= 3)


def available_memory() -> int:
    """Bytes the kernel says new allocations can get without swapping (MemAvailable), 0 where it says nothing."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def folder_for(checkout: Path, min_gib: float) -> str:
    """The RAM-backed folder for `checkout` when RAM_FS is a tmpfs with `min_gib` free and as much memory is
    available (its pages are memory), else DEFAULT."""
    need = int(min_gib * 2**30)
    if not ram_backed(RAM_FS) or shutil.disk_usage(RAM_FS).free < need or available_memory() < 2 * need:
        return DEFAULT
    tag = hashlib.sha256(str(checkout.resolve()).encode()).hexdigest()[:12]
    return str(RAM_FS / f"dsv4-sm120-overlay-pytest-{tag}")


def main(argv: list[str]) -> int:
    try:
        (min_gib,) = map(float, argv)
    except ValueError:
        print(f"usage: python3 .ci/test_tmp.py MIN_GIB (expected one number, found {argv!r})", file=sys.stderr)
        return 2
    print(folder_for(Path(os.getcwd()), min_gib))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
