#!/usr/bin/env python3
"""Apply, check, report and revert this repository's patch set on its pinned upstream (see README.md).

Run from a checkout (`python apply.py`), it works on that checkout. Installed (`pip install .`: the `patchkit`
command, this file as dsv4_sm120_overlay.apply beside the pin.lock, patches/ and overlay/ shipped with it), it
works on the checkout it is run from, else `--repo DIR`, else the shipped series (read-only).
"""
import sys
from pathlib import Path

if __package__:     # installed: dsv4_sm120_overlay.apply
    from .serving import doctor, field_check, field_report
else:               # a checkout: python apply.py, or `import apply` with the checkout on sys.path
    from serving import doctor, field_check, field_report
from patchkit.cli import main as patchkit_main

HERE = Path(__file__).resolve().parent
# Imported as dsv4_sm120_overlay.apply, HERE is an installed package's read-only data (pin.lock, patches/ and
# overlay/ beside this file) unless it holds pyproject.toml, which a wheel never ships: an editable install's
# checkout. Run as a script (python apply.py), HERE is always the checkout.
INSTALLED = bool(__package__) and not (HERE / "pyproject.toml").is_file()


def find_checkout() -> Path | None:
    """The checkout holding pin.lock: this script's own directory (in a checkout), else the current directory
    or a parent. The installed package's own directory is never taken for a checkout: it is read-only data."""
    if not INSTALLED and (HERE / "pin.lock").is_file():
        return HERE
    cwd = Path.cwd().resolve()
    return next((d for d in (cwd, *cwd.parents) if (d / "pin.lock").is_file() and d != HERE), None)


def main() -> int:
    shipped = HERE if INSTALLED and (HERE / "pin.lock").is_file() else None
    return patchkit_main(find_checkout(), sys.argv[1:], extensions=[doctor.add_parser, field_check.add_parser, field_report.add_parser], shipped=shipped)


if __name__ == "__main__":
    sys.exit(main())
