"""The distribution's version, read from pin.lock's [line."NAME".patchset] version tables: pyproject.toml takes
VERSION from here at build time, so there is no second copy to keep in step.

pin.lock versions the patch set per release line; one distribution ships every line. Where the lines agree
(the usual case) that is the version. Where they differ, the highest: the distribution is never older than
any line it ships, and a change released on a line under a version above every other line's raises it too.
Read with the standard library alone: the build runs this file before anything is installed.
"""
from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pyproject.toml's build requirements bring tomli
    import tomli as tomllib


def _key(version: str) -> tuple:
    # as patchkit.lockfile.version_key: numeric parts as numbers ('0.1.9' < '0.1.10')
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.+-]", version))


def distribution_version(lock: Path) -> str:
    """The highest [line."NAME".patchset] version of `lock`; a one-line ValueError where no line has one."""
    lines = tomllib.loads(Path(lock).read_text(encoding="utf-8")).get("line", {})
    versions = [t["patchset"]["version"] for t in lines.values()
                if isinstance(t, dict) and isinstance(t.get("patchset"), dict) and "version" in t["patchset"]]
    if not versions:
        raise ValueError(f"{lock}: expected a [line.\"NAME\".patchset] version to version the distribution, found none")
    return max(versions, key=_key)


VERSION = distribution_version(Path(__file__).with_name("pin.lock"))
