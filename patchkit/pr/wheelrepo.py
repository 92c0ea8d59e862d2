"""`apply.py wheel-checkout UPSTREAM --dir DIR`: a git repository of the pinned wheel's files, laid out as the
upstream repository lays them out (`repo_prefix`), one commit on branch `main`, tagged as the release.

For working without the git host: export-pr needs a git checkout, and a machine that reaches only a package
index can still build one from the wheel it verifies. It is NOT upstream's history and NOT upstream's whole
tree: only what the wheel ships (no tests/, no .github/, no build files), so a PR exported onto it must be
rebased onto upstream's real branch before it is opened. The commit message says so.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from .. import UsageError
from ..gitcmd import git
from ..worktree import commit_release

MESSAGE = ("{package} {version}: the files of {artifact}, at the repository's layout\n\n"
           "Built from the pinned wheel, not cloned: this is not {repo}'s history, and it holds only what\n"
           "the wheel ships. Rebase a branch made on it onto the upstream branch before opening a PR.\n")


def add_parser(sub) -> None:
    help_text = ("make a git repository of the pinned wheel's files at the upstream repository's layout (one "
                 "commit, tagged as the release; not upstream's history): a base for export-pr without the git host")
    p = sub.add_parser("wheel-checkout", help=help_text, description=help_text)
    p.add_argument("upstream", help="which pinned upstream of the line (e.g. sglang, flashinfer)")
    p.add_argument("--dir", required=True, metavar="DIR", help="a new (or empty) directory for the repository")
    p.set_defaults(func=run)


def build(engine, name: str, dest: Path) -> str:
    """Make the repository at `dest`; returns the tag. Nothing is left behind on failure."""
    if name not in engine.lock.upstreams:
        raise UsageError(f"wheel-checkout: expected an upstream of line {engine.lock.line} "
                         f"({', '.join(engine.lock.upstreams)}), found '{name}'")
    up = engine.lock.upstream(name)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"wheel-checkout: --dir {dest}: expected a new or empty directory, found "
                            f"{'a non-empty directory' if dest.is_dir() else 'a file'}; nothing written")
    pristine = engine.pristine(name)
    tag = up.tag or f"v{up.version}"
    made = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        git(dest, "init", "-q", "-b", "main")
        commit_release(dest, pristine, up.root, MESSAGE.format(package=up.package, version=up.version,
                                                               artifact=up.artifact, repo=up.repo or up.package),
                       prefix=up.repo_prefix or "")
        git(dest, "reset", "-q", "--hard")           # the files, written once by git
        git(dest, "tag", tag)
    except BaseException:
        if made:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for child in dest.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise
    return tag


def run(engine, args) -> int:
    dest = Path(args.dir)
    tag = build(engine, args.upstream, dest)
    up = engine.lock.upstream(args.upstream)
    print(f"wheel-checkout: {dest}: {up.package} {up.version} from {up.artifact} as one commit on main, tagged {tag} "
          "(the wheel's files at the repository's layout; not upstream's history)")
    print(f"  set an identity for export-pr: git -C {dest} config user.name NAME; git -C {dest} config user.email EMAIL")
    return 0
