"""Fail at once, in one line, when the disk cannot hold what CI installs (instead of ENOSPC deep in a pip run).

    python3 .ci/disk_check.py GIB      # GIB free wanted where the checkout and the temp directory live
"""
from __future__ import annotations

import shutil
import sys
import tempfile


def main(argv: list[str]) -> int:
    try:
        (gib,) = argv
        need = float(gib) * 2**30
    except ValueError:
        print(f"usage: disk_check.py GIB (expected one number, found {argv!r})", file=sys.stderr)
        return 2
    for what, path in (("this checkout", "."), ("the temp directory", tempfile.gettempdir())):
        free = shutil.disk_usage(path).free
        if free < need:
            print(f"CI needs about {need / 2**30:.0f} GiB free for {what} ({path}), found {free / 2**30:.1f} GiB",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
