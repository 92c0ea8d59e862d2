"""The checkout as it is copied to the air-gapped GPU machine: its tracked and untracked (not ignored) files, less
the raw output recorded under bench/runs/, which stays in git and is read here (BENCHMARKS.md cites it, the plots are
drawn from it) but is never needed there. So recording a run adds nothing to the copy nor to the bundle's budget;
a run folder's RUN.md, bench/runs/INDEX.md and the scripts kept beside their output do travel.

    python3 -m serving.bundle tree-copy --out DIR    # writes the copy (make tree-copy); the budget counts the same files
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .bundle_manifest import BundleError

RUNS = "bench/runs/"
# What of bench/runs/ is copied: the records (RUN.md, INDEX.md) and the scripts that made an output. The rest of a
# run folder is its raw output.
RECORD_SUFFIXES = (".md", ".py", ".sh", ".cu")


def checkout_files(repo: Path) -> list[str]:
    """The checkout's files as git sees them: tracked, and untracked but not ignored (that exist)."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout
    return sorted(name for name in set(listed.split("\0")) if name and (Path(repo) / name).is_file())


def is_raw_output(rel: str) -> bool:
    return rel.startswith(RUNS) and not rel.endswith(RECORD_SUFFIXES)


def carried_files(repo: Path) -> list[str]:
    """What is copied to the GPU machine: the checkout's files less recorded raw output."""
    return [rel for rel in checkout_files(repo) if not is_raw_output(rel)]


def write_copy(repo: Path, out: Path) -> list[str]:
    """carried_files(repo) into `out` (absent or empty), each with its bytes and mode; returns them."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"tree-copy: expected an absent or empty folder, found {out} with files in it")
    files = carried_files(repo)
    for rel in files:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(repo) / rel, out / rel, follow_symlinks=False)
    return files
