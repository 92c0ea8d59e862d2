"""A scratch git repository holding the pristine release as one commit and the series as commits on top.

Developers edit patches there (`apply.py worktree`, commit, `apply.py export`); `check` uses the same
round trip to prove that importing and re-exporting the series reproduces every patch byte for byte.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from . import PatchkitError
from .fsio import atomic_write
from .gitcmd import git, init_repo
from .patchfile import PatchFile
from .pristine import Pristine
from .series import Series

FORMAT_PATCH_ARGS = ("format-patch", "--zero-commit", "--full-index", "--no-signature", "--no-stat",
                     "-N", "--encoding=UTF-8")
PRISTINE_TAG = "pristine"


def unpack_release(dest: Path, pristine: Pristine, root: str) -> None:
    """The release's files under `root` in dest, without its dist-info (not part of the upstream repo)."""
    pristine.unpack(dest, root=root)
    shutil.rmtree(dest / pristine.dist_info(), ignore_errors=True)


def build_worktree(dest: Path, series: Series, pristine: Pristine, root: str, label: str,
                   full_tree: bool = True) -> Path:
    """Create dest as a git repo: pristine commit (tagged), then one commit per patch via `git am`."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise PatchkitError(f"{dest}: expected an empty or new directory, found existing files")
    init_repo(dest)
    if full_tree:
        unpack_release(dest, pristine, root)
    else:
        for p in series.patches:
            for path in p.paths:
                if pristine.has(path):
                    (dest / path).parent.mkdir(parents=True, exist_ok=True)
                    (dest / path).write_bytes(pristine.read(path))
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "--allow-empty", "-m", f"pristine {label}")
    git(dest, "tag", PRISTINE_TAG)
    commit_patches(dest, series.patches, label)
    return dest


def commit_patches(repo: Path, patches: list[PatchFile], label: str) -> list[str]:
    """One commit per patch on HEAD (`git am`: each keeps its patch's author, date and message); their ids."""
    start = git(repo, "rev-parse", "HEAD").stdout.strip()
    for p in patches:
        proc = git(repo, "am", "-q", "--committer-date-is-author-date", str(p.path.resolve()), check=False)
        if proc.returncode != 0:
            git(repo, "am", "--abort", check=False)
            raise PatchkitError(f"{p.path}: expected it to apply to pristine {label}, found git am failing: "
                                f"{(proc.stderr or proc.stdout).strip().splitlines()[0]}")
    return git(repo, "rev-list", "--reverse", f"{start}..HEAD").stdout.split()


def export_series(worktree: Path, out_dir: Path) -> list[Path]:
    """format-patch every commit after the pristine tag into out_dir; returns the files in order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    proc = git(Path(worktree), *FORMAT_PATCH_ARGS, "-o", str(out_dir.resolve()), f"{PRISTINE_TAG}..HEAD")
    return [Path(line) for line in proc.stdout.splitlines() if line.strip()]


def roundtrip_differences(series: Series, pristine: Pristine, root: str, label: str) -> list[str]:
    """Import the series and export it again; name every patch file that does not come back identical."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="patchkit-roundtrip-") as tmp:
        wt = build_worktree(Path(tmp) / "wt", series, pristine, root, label, full_tree=False)
        exported = export_series(wt, Path(tmp) / "out")
        names = [p.name for p in exported]
        for original in series.patches:
            if original.name not in names:
                problems.append(f"{original.name}: re-export names it {names[series.patches.index(original)] if len(names) > series.patches.index(original) else '?'}")
                continue
            new = exported[names.index(original.name)].read_bytes()
            if new != original.path.read_bytes():
                problems.append(f"{original.name}: re-export differs from the file in the series")
    return problems


def write_series(exported: list[Path], directory: Path) -> None:
    """Replace directory's *.patch files and series listing with `exported`, in order."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.patch"):
        old.unlink()
    for f in exported:
        atomic_write(directory / f.name, f.read_bytes())
    atomic_write(directory / "series", "".join(f.name + "\n" for f in exported).encode())
