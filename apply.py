#!/usr/bin/env python3
"""Apply, check, report and revert this repository's patch set on its pinned upstream (see README.md)."""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))

from patchkit.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(REPO))
