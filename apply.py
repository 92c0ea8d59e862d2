#!/usr/bin/env python3
"""Apply, check, report and revert this repository's patch set on its pinned upstream (see README.md)."""
import sys
from pathlib import Path

import serving.doctor
from patchkit.cli import main as patchkit_main


def find_repo() -> Path | None:
    """The checkout holding pin.lock: this script's directory, else the current directory or a parent."""
    here = Path(__file__).resolve().parent
    if (here / "pin.lock").is_file():
        return here
    cwd = Path.cwd()
    return next((d for d in (cwd, *cwd.parents) if (d / "pin.lock").is_file()), None)


def main() -> int:
    repo = find_repo()
    if repo is None:
        print(f"error: expected a pin.lock beside {Path(__file__).name} or in {Path.cwd()} or a parent, found none",
              file=sys.stderr)
        return 1
    return patchkit_main(repo, sys.argv[1:], extensions=[serving.doctor.add_parser])


if __name__ == "__main__":
    sys.exit(main())
