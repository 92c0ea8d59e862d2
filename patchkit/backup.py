"""The repository data a rebase may rewrite (pin.lock, patches/, overlay/): a backup and an exact restore."""
from __future__ import annotations

import shutil
from pathlib import Path


def snapshot(repo: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    shutil.copy2(repo / "pin.lock", dest / "pin.lock")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in ("patches", "overlay"):
        if (repo / d).is_dir():
            shutil.copytree(repo / d, dest / d, ignore=ignore)
        else:
            (dest / d).mkdir()


def _files(root: Path) -> dict[str, Path]:
    if not root.is_dir():
        return {}
    return {f.relative_to(root).as_posix(): f for f in root.rglob("*")
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"}


def mirror(src: Path, dst: Path) -> None:
    """Make dst hold exactly src's files (ignoring bytecode), writing only what differs."""
    want, have = _files(src), _files(dst)
    for rel, f in have.items():
        if rel not in want:
            f.unlink()
    for rel, f in want.items():
        target = dst / rel
        if rel not in have or target.read_bytes() != f.read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    for d in sorted((p for p in dst.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()


def restore(repo: Path, backup: Path) -> None:
    (repo / "pin.lock").write_bytes((backup / "pin.lock").read_bytes())
    for d in ("patches", "overlay"):
        (repo / d).mkdir(exist_ok=True)
        mirror(backup / d, repo / d)
