"""Helpers for engine tests: a scratch copy of this repository's data and snapshots of target trees."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from patchkit.hashing import sha256_file

REPO = Path(__file__).resolve().parents[1]


def copy_repo_data(dest: Path) -> Path:
    """pin.lock, CHANGELOG.md, patches/, overlay/ and the CLI of this repo (apply.py, patchkit/, serving/ for its doctor
    subcommand), so a test can damage them freely."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / "pin.lock", dest / "pin.lock")
    shutil.copy2(REPO / "apply.py", dest / "apply.py")
    shutil.copy2(REPO / "CHANGELOG.md", dest / "CHANGELOG.md")
    for sub in ("patchkit", "serving", "patches", "overlay"):
        if (REPO / sub).exists():
            shutil.copytree(REPO / sub, dest / sub, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (dest / sub).mkdir()
    return dest


def snapshot(root: Path) -> dict[str, str]:
    """Path -> sha256 of every file under root (plus '<dir>/' entries so new directories show; a symlink,
    never followed, as 'link:' + where it points; a FIFO or other special file as its kind)."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif not p.is_dir() and not p.is_file():
            out[rel] = "special"
        elif p.is_dir():
            out[rel + "/"] = "dir"
        else:
            out[rel] = sha256_file(p)
    return out


def first_patch_with_hunk(repo: Path) -> Path:
    for series in sorted((repo / "patches" / "0.5.14").glob("*/series")):
        for name in series.read_text().split():
            return series.parent / name
    raise AssertionError("the repository's series holds no patch")
