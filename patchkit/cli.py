"""Command line: apply / status / revert / check / fetch / worktree / export, rebase and export-pr.

The caller (apply.py) names the repository and may add subcommands of its own (`extensions`, each an
`add_parser(subparsers)`); patchkit's own are registered here.
"""
from __future__ import annotations

import argparse
import errno
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from . import PatchkitError, UsageError, attestation, faults, patchset
from .check import check_repository
from .engine import EditedFileError, Engine
from .lines import COPIES, copies_problems
from .patchfile import parse_patch
from .bookkeeping import RepoFiles
from .pr import export as export_pr
from .pr import wheelrepo
from .rebase import run as rebase
from .report import format_state, printable_streams, table
from .series import refuse_linked_data
from .state import APPLIED, PRISTINE
from .paths import under
from .worktree import build_worktree, export_series, overlay_claims, write_overlay, write_series


def _target(engine: Engine, args, prepare: bool) -> Path:
    if args.target:
        return Path(args.target)
    if engine.read_only:
        raise PatchkitError(engine.needs_checkout("--target DIR"))
    return engine.prepare_default_target() if prepare else engine.default_target


def _worktree_dir(engine: Engine, args) -> Path:
    if args.dir:
        return Path(args.dir)
    if engine.read_only:
        raise PatchkitError(engine.needs_checkout("--dir DIR"))
    return engine.build_root / "work" / engine.lock.line / args.upstream


def _print_change(state) -> None:
    if state.before is not None:     # something was written: show each patch's move
        print(format_state(state))


def cmd_apply(engine, args) -> int:
    _print_change(engine.apply(_target(engine, args, prepare=True), dry_run=args.dry_run,
                               discard_edits=args.discard_edits))
    return 0


def cmd_revert(engine, args) -> int:
    _print_change(engine.revert(_target(engine, args, prepare=False), dry_run=args.dry_run,
                                discard_edits=args.discard_edits))
    return 0


def _discard_hint(prog: str, args) -> str:
    """How to get past a file edited by hand. build/site-LINE is the tool's own copy of the release: rewrite it.
    A --target is the user's: the edit is kept unless they ask, once they have kept a copy."""
    line = getattr(args, "line", None) or args.global_line
    command = " ".join([f"python {prog}" if prog.endswith(".py") else prog, args.command,
                        *(["--line", shlex.quote(line)] if line else []),
                        *(["--target", shlex.quote(args.target)] if args.target else []), "--discard-edits"])
    if args.target:
        return f"your edit is kept; keep a copy of it and run {command} to rewrite it from the pinned release"
    return f"to rewrite it from the pinned release, discarding the edit: {command}"


def cmd_status(engine, args) -> int:
    target = _target(engine, args, prepare=False)
    state = engine.status(target)
    ident = engine.patch_set()
    print(f"patch set: {ident.label}")          # first: the summary stays the last line
    print(f"line: {engine.lock.line}; the target carries {attestation.carried_line(target)}")
    print(attestation.describe(target, ident))
    stale = engine.stale_attestation(target, "apply")
    if stale:                                   # the way out apply and revert give, here too
        print(stale)
    print(format_state(state))
    return 0 if state.summary in (APPLIED, PRISTINE) else 1


def print_version(engine) -> int:
    ident = engine.patch_set()
    print(f"patch set: line {ident.line}, version {ident.version or 'unversioned'}, series digest {ident.digest} "
          f"({engine.repo})")
    for problem in patchset.problems(engine, ident):
        print(f"  not a released version: {problem}")
    return 0


def cmd_check(engine, args) -> int:
    """One line (--line), else every line of pin.lock and the overlay copies rule between them."""
    lines = [engine.lock.line] if args.line else list(engine.lock.lines)
    failed = False
    for line in lines:
        findings = check_repository(engine if line == engine.lock.line else engine.for_line(line))
        rows = [[f.upstream, f.item, f.verdict, f.detail] for f in findings]
        print(f"line {line}:")
        print(table(rows, ["upstream", "patch", "check", "detail"]))
        failed |= any(f.errors for f in findings)
    if not args.line:
        copies = copies_problems(engine.repo, lines)
        print(f"lines {', '.join(lines)}: {COPIES}: " + ("FAIL: " + "; ".join(copies) if copies else
                                                          "ok (same-name overlay files and upstream tests agree or say why not)"))
        failed |= bool(copies)
    return 1 if failed else 0


def cmd_fetch(engine, args) -> int:
    for name, up in engine.lock.upstreams.items():
        path = engine.pristine(name, print).wheel
        print(f"{up.label}: {path} (sha256 ok)")
        if args.into:
            Path(args.into).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, Path(args.into) / path.name)
    return 0


def cmd_worktree(engine, args) -> int:
    up = engine.lock.upstream(args.upstream)
    dest = _worktree_dir(engine, args)
    series = engine.series(args.upstream)
    build_worktree(dest, series, engine.pristine(args.upstream, print), up.root, up.label)
    print(f"{dest}: pristine {up.label} (tag 'pristine') + {len(series.patches)} patch commit(s), each with the "
          f"overlay files it claims ({len(series.overlay_owner)} in all).")
    print(f"Edit and commit there (one commit per patch, trailers in the message; an overlay file changes only in "
          f"the commit that claims it), then: python apply.py export {args.upstream}")
    return 0


def cmd_export(engine, args) -> int:
    refuse_linked_data(engine.patches_root, engine.overlay_root)    # never written through a link
    src = _worktree_dir(engine, args)
    if not (src / ".git").is_dir():
        raise PatchkitError(f"{src}: expected a worktree made by 'apply.py worktree {args.upstream}', found none")
    root = engine.lock.upstream(args.upstream).root
    with tempfile.TemporaryDirectory(prefix="patchkit-export-") as tmp, \
            RepoFiles(engine.build_root, engine.repo).lock("export"):
        # refused before anything is written: an overlay file claimed badly or changed outside its commit, a
        # symlink, a mode change, an unreadable name
        overlay = overlay_claims(src)
        for rel in overlay:
            under(rel, root, f"{src}: Overlay")
        exported = export_series(src, Path(tmp), leave_out=list(overlay))
        for f in exported:
            parse_patch(f)
        try:
            dropped = [rel for rel in engine.series(args.upstream).overlay_owner if rel not in overlay]
        except PatchkitError:      # the series being replaced does not load: nothing of it to drop
            dropped = []
        write_series(exported, engine.patches_root / args.upstream)
        write_overlay(overlay, dropped, engine.overlay_root)
        engine.series(args.upstream)   # validates headers and overlay claims of the new series
    print(f"wrote {len(exported)} patch(es) to {engine.patches_root / args.upstream} and {len(overlay)} overlay "
          f"file(s) to {engine.overlay_root}")
    return 0


def build_parser(extensions=()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Apply, check and revert the patch set on a pinned upstream.")
    parser.add_argument("--version", action="store_true",
                        help="print the patch set's release line, version and series digest, then exit")
    parser.add_argument("--line", metavar="NAME", dest="global_line",
                        help="the release line for --version (or put --line after the command)")
    parser.add_argument("--repo", metavar="DIR", dest="data_repo", help="the repository holding pin.lock, patches/ and overlay/ "
                        "(default: the checkout this runs from, else the series an installed package ships)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name, func, help_text, target=True, dry=False):
        p = sub.add_parser(name, help=help_text, description=help_text)
        if target:
            p.add_argument("--target", metavar="DIR", help="directory holding the upstream packages (an unpacked wheel or site-packages); default: build/site-LINE")
        if dry:
            p.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
            p.add_argument("--discard-edits", action="store_true",
                           help="rewrite a file edited by hand (bytes of no state of the series) from the pinned "
                                "release instead of refusing it; the edit is lost")
        p.set_defaults(func=func)
        return p

    add("apply", cmd_apply, "apply every series (and overlay files) to the target", dry=True)
    add("status", cmd_status, "per patch and overlay file: pristine / applied / partial / modified")
    add("revert", cmd_revert, "restore the pristine bytes and remove overlay files", dry=True)
    add("check", cmd_check, "every patch applies exactly to the pin and the series round-trips byte for byte", target=False)
    p = add("fetch", cmd_fetch, "download and verify the pinned artifacts into the cache", target=False)
    p.add_argument("--into", metavar="DIR", help="also copy them to DIR (for a machine without internet: PATCHKIT_CACHE=PARENT with DIR=PARENT/artifacts)")
    p = add("worktree", cmd_worktree, "make a git repo with the pristine release and the series as commits, to edit patches", target=False)
    p.add_argument("upstream"); p.add_argument("--dir", help="default: build/work/LINE/UPSTREAM")
    p = add("export", cmd_export, "regenerate patches/UPSTREAM from a worktree's commits", target=False)
    p.add_argument("upstream"); p.add_argument("--dir", help="default: build/work/LINE/UPSTREAM")
    rebase.add_parser(sub)
    export_pr.add_parser(sub)
    wheelrepo.add_parser(sub)
    for extension in extensions:
        extension(sub)
    for p in sub.choices.values():      # every command works on one release line
        p.add_argument("--line", metavar="NAME", help="the release line (pin.lock [line.\"NAME\"]); default: the newest"
                       + ("; check: every line and the copies rule" if p is sub.choices.get("check") else ""))
    return parser


def _engine(args, repo: Path | None, shipped: Path | None) -> Engine:
    """--repo DIR, else the checkout the caller found, else the data an installed package ships (read-only)."""
    line = getattr(args, "line", None) or args.global_line
    if args.data_repo:     # (export-pr's own --repo, after the command, is the upstream checkout)
        if not (Path(args.data_repo) / "pin.lock").is_file():
            raise UsageError(f"--repo {args.data_repo}: expected a directory holding pin.lock, found none")
        return Engine.from_repo(Path(args.data_repo), line=line)
    if repo is not None:
        return Engine.from_repo(repo, line=line)
    if shipped is not None:
        return Engine.from_repo(shipped, read_only=True, line=line)
    raise PatchkitError(f"expected a checkout (pin.lock in {Path.cwd()} or a parent) or --repo DIR, found neither")


def os_error(exc: OSError) -> str:
    """An error of the machine in one line, naming the file it was about (as git and pip do)."""
    text = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    if exc.errno == errno.ENOSPC:
        text += " (the disk holding it is full: free space there and run the command again)"
    return text


def main(repo: Path | None, argv=None, extensions=(), shipped: Path | None = None) -> int:
    """Run one command on the repository `repo` (a checkout, None if none was found), else `shipped` (an
    installed package's own pin.lock, patches/ and overlay/, read-only); `extensions` add the caller's own
    subcommands."""
    printable_streams()
    parser = build_parser(extensions)
    args = parser.parse_args(argv)
    if not args.version and args.command is None:
        parser.error("expected a COMMAND (or --version), found none")
    if faults.problem():     # bad input: refused before anything is read or written
        print(f"error: {faults.problem()}", file=sys.stderr)
        return 2
    try:
        engine = _engine(args, repo, shipped)
        if args.version:
            return print_version(engine)
        return args.func(engine, args)
    except EditedFileError as exc:
        print(f"error: {exc}; {_discard_hint(parser.prog, args)}", file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"error: {exc} (usage: {' '.join(filter(None, (parser.prog, args.command)))} --help)", file=sys.stderr)
        return 2
    except PatchkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:   # the machine's (a full disk, a permission): still one line, never a traceback
        print(f"error: {os_error(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 1
