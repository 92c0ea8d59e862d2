"""Command line: apply / status / revert / check / worktree / export."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from . import PatchkitError, UsageError
from .conditions import conditions_of, unreached_reasons
from .engine import Engine
from .lock import repo_lock
from .export_pr import depends_on_errors
from .report import format_state, table
from .state import APPLIED, PRISTINE
from .worktree import build_worktree, export_series, roundtrip_differences, write_series


def _target(engine: Engine, args, prepare: bool) -> Path:
    if args.target:
        return Path(args.target)
    return engine.prepare_default_target() if prepare else engine.default_target


def cmd_apply(engine, args) -> int:
    engine.apply(_target(engine, args, prepare=True), dry_run=args.dry_run)
    return 0


def cmd_revert(engine, args) -> int:
    target = _target(engine, args, prepare=False)
    engine.revert(target, dry_run=args.dry_run)
    return 0


def cmd_status(engine, args) -> int:
    state = engine.status(_target(engine, args, prepare=False))
    print(format_state(state))
    return 0 if state.summary in (APPLIED, PRISTINE) else 1


def cmd_check(engine, args) -> int:
    rows, failed = [], False
    for name, up in engine.lock.upstreams.items():
        series = engine.series(name)
        chain = engine.chain(name, log=print)
        pristine = engine.pristine(name)
        trips = {p.split(":")[0]: p for p in roundtrip_differences(series, pristine, up.root, f"{up.package} {up.version}")}
        for p in series.patches:
            problems = []
            if p.name in chain.offsets:
                problems.append("applies with offset: " + "; ".join(chain.offsets[p.name]))
            if p.missing_trailers():
                problems.append("header lacks " + ", ".join(p.missing_trailers()))
            if p.name in trips:
                problems.append(trips[p.name].split(": ", 1)[1])
            broken, unreached = reach_problems(p, chain, pristine)
            broken += depends_on_errors(series, p)
            problems += broken
            failed |= bool(problems)
            verdict = "FAIL" if problems else "warn" if unreached else "ok"
            rows.append([name, p.name, verdict, "; ".join(problems + unreached) or "exact, round-trips"])
        for rel in series.unclaimed:
            failed = True
            rows.append([name, f"overlay/{rel}", "FAIL", f"no patch claims it (add 'Overlay: {rel}' to one)"])
    print(table(rows, ["upstream", "patch", "check", "detail"]) if rows else "no patches in any series")
    return 1 if failed else 0


def cmd_fetch(engine, args) -> int:
    import shutil
    for name, up in engine.lock.upstreams.items():
        path = engine.pristine(name, print).wheel
        print(f"{up.package} {up.version}: {path} (sha256 ok)")
        if args.into:
            Path(args.into).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, Path(args.into) / path.name)
    return 0


def reach_problems(patch, chain, pristine) -> tuple[list[str], list[str]]:
    """(errors, warnings) of a patch's Reached-If / Unreached-If trailers on the pinned release.

    A trailer that does not parse is an error. One that says "not reached" is a warning: a rebase may
    knowingly keep such a patch (it reports it), but the user should see it on every check.
    """
    try:
        conds = conditions_of(patch.trailers, f"{patch.name}: ")
    except PatchkitError as exc:
        return [str(exc)], []

    def read(path):
        if path in chain.files:
            return chain.files[path].final
        return pristine.read(path) if pristine.has(path) else None

    return [], [f"not reached on the pin: {r}" for r in unreached_reasons(conds, read)]


def cmd_worktree(engine, args) -> int:
    up = engine.lock.upstream(args.upstream)
    dest = Path(args.dir) if args.dir else engine.build_root / "work" / args.upstream
    build_worktree(dest, engine.series(args.upstream), engine.pristine(args.upstream, print), up.root,
                   f"{up.package} {up.version}")
    print(f"{dest}: pristine {up.package} {up.version} (tag 'pristine') + {len(engine.series(args.upstream).patches)} patch commit(s).")
    print(f"Edit and commit there (one commit per patch, trailers in the message), then: python apply.py export {args.upstream}")
    return 0


def cmd_export(engine, args) -> int:
    src = Path(args.dir) if args.dir else engine.build_root / "work" / args.upstream
    if not (src / ".git").is_dir():
        raise PatchkitError(f"{src}: expected a worktree made by 'apply.py worktree {args.upstream}', found none")
    with tempfile.TemporaryDirectory(prefix="patchkit-export-") as tmp, \
            repo_lock(engine.build_root, engine.patches_root.parent, "export"):
        exported = export_series(src, Path(tmp))
        write_series(exported, engine.patches_root / args.upstream)
        engine.series(args.upstream)   # validates headers and overlay claims of the new series
    print(f"wrote {len(exported)} patch(es) to {engine.patches_root / args.upstream}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="apply.py", description="Apply, check and revert the patch set on a pinned upstream.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_text, target=True, dry=False):
        p = sub.add_parser(name, help=help_text, description=help_text)
        if target:
            p.add_argument("--target", metavar="DIR", help="directory holding the upstream packages (an unpacked wheel or site-packages); default: build/site")
        if dry:
            p.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
        p.set_defaults(func=func)
        return p

    add("apply", cmd_apply, "apply every series (and overlay files) to the target", dry=True)
    add("status", cmd_status, "per patch and overlay file: pristine / applied / partial / modified")
    add("revert", cmd_revert, "restore the pristine bytes and remove overlay files", dry=True)
    add("check", cmd_check, "every patch applies exactly to the pin and the series round-trips byte for byte", target=False)
    p = add("fetch", cmd_fetch, "download and verify the pinned artifacts into the cache", target=False)
    p.add_argument("--into", metavar="DIR", help="also copy them to DIR (for a machine without internet: PATCHKIT_CACHE=PARENT with DIR=PARENT/artifacts)")
    p = add("worktree", cmd_worktree, "make a git repo with the pristine release and the series as commits, to edit patches", target=False)
    p.add_argument("upstream"); p.add_argument("--dir", help="default: build/work/UPSTREAM")
    p = add("export", cmd_export, "regenerate patches/UPSTREAM from a worktree's commits", target=False)
    p.add_argument("upstream"); p.add_argument("--dir", help="default: build/work/UPSTREAM")
    for extension in _extensions():
        extension(sub)
    return parser


def _extensions():
    """Subcommands contributed by other modules (each exposes add_parser(subparsers))."""
    found = []
    for module in ("patchkit.rebase", "patchkit.export_pr", "serving.doctor"):
        try:
            mod = __import__(module, fromlist=["add_parser"])
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                continue
            raise
        found.append(mod.add_parser)
    return found


def main(repo: Path, argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        engine = Engine.from_repo(repo)
        return args.func(engine, args)
    except UsageError as exc:
        print(f"error: {exc} (usage: apply.py {args.command} --help)", file=sys.stderr)
        return 2
    except PatchkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:   # the machine's (a full disk, a permission): still one line, never a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 1
