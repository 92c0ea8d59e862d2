"""`apply.py rebase`: carry every series to a new upstream release.

Downloads the new release's artifact through pip (same tags as the pinned one; its sha256 recorded in pin.lock),
replays each series in a scratch git repo under build/rebase/ (see replay.py) and classifies each patch:
clean, offset, conflict, already upstream, and whether its code is still reached (conditions.py).
patches/, overlay/ and pin.lock are written only once every patch is resolved; a backup taken before
the first write (complete once its manifest is written, last) lets `--abort` put them back byte for byte.
One rebase at a time: every rebase command holds the repository's lock (bookkeeping.RepoFiles).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import PatchkitError, UsageError, faults
from ..bookkeeping import RepoFiles
from ..engine import Engine
from ..fetch import Release, find_release
from ..fsio import atomic_write
from ..lines import follow_moves
from ..lockedit import update_lock_text
from ..lockfile import Upstream
from ..paths import safe_name
from ..pristine import Pristine
from ..report import table
from ..series import load_series
from ..worktree import export_series, roundtrip_differences, write_series
from .backup import backup_problem, mirror, restore, snapshot
from .undo import done_dir, keep_undo, undo
from .pins import follow
from .reach import load_partly
from .requires import cached_wheel, is_version
from .replay import Replayer, build_rebase_repo
from .state import (CONFLICT, DROPPED, PENDING, RESOLVED, STATE, SUPERSEDED, UPSTREAM, Outcome, Pin, RebaseState,
                    Stop, UpstreamRebase)

REFRESHING = "REFRESHING"    # written before the refresh's first write to the repository: --abort must restore
LINE_FILE = "LINE"           # the release line the rebase in progress carries (--continue works on it)


# -- command line ---------------------------------------------------------------------------------
def add_parser(sub) -> None:
    help_text = "carry every series to a new upstream release (3-way, rename-aware), then refresh patches/ and pin.lock"
    p = sub.add_parser("rebase", help=help_text, description=help_text)
    p.add_argument("--to", action="append", default=[], metavar="[NAME=]VERSION",
                   help="target version of upstream NAME; a bare VERSION means the first upstream in pin.lock (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print the report, write nothing")
    p.add_argument("--force", action="store_true",
                   help="rebase onto a version another pinned upstream does not accept (e.g. a FlashInfer the "
                        "line's SGLang does not pin): the mismatch is printed and noted in pin.lock")
    p.add_argument("--new-line", action="store_true",
                   help="start a new release line named after the first --to version: copy the --line's patches/, "
                        "overlay/ and pin.lock tables under that name, then rebase the copy (the old line is untouched)")
    p.add_argument("--continue", dest="cont", action="store_true", help="go on after resolving a conflict in build/rebase/repos/NAME")
    p.add_argument("--abort", action="store_true", help="drop the rebase in progress; patches/, overlay/, pin.lock restored")
    p.add_argument("--keep", action="append", default=[], metavar="PATCH=REASON",
                   help="keep a patch that upstream now supersedes; REASON is recorded in its header as a "
                        "Superseded-Kept: trailer (repeatable)")
    p.add_argument("--json", metavar="FILE", help="also write the report (or the matrix) as JSON")
    p.add_argument("--matrix", action="store_true",
                   help="dry-run the series onto the pin and every later release of the first upstream (each with "
                        "the pins it requires), and each other upstream's series onto its releases no such release "
                        "requires yet; print the tables and write docs/compat.md")
    p.add_argument("--from", dest="after", metavar="VERSION", help="--matrix: only releases after VERSION")
    p.add_argument("--releases", metavar="V1,NAME=V2",
                   help="--matrix: only these releases (a bare version is the first upstream's; NAME=VERSION another "
                        "upstream's own, the first held at its pin); docs/compat.md is not written")
    p.add_argument("--out", metavar="FILE", help="--matrix: write the table here instead of docs/compat.md")
    p.set_defaults(func=run)


def run(engine: Engine, args) -> int:
    if args.matrix:
        if args.abort or args.cont or args.to or args.dry_run or args.keep or args.force:
            raise UsageError("rebase --matrix: expected only --from, --releases, --json and --out with it")
        from .matrix import check_arguments, run_matrix
        check_arguments(args.after, args.releases)
        with RepoFiles(engine.build_root, engine.repo).lock("rebase"):
            return run_matrix(engine, start, _progress, args.after, args.releases, args.json, args.out)
    if args.after or args.releases or args.out:
        raise UsageError("rebase: --from, --releases and --out go with --matrix")
    if args.abort + args.cont + bool(args.to) > 1:
        raise UsageError("rebase: expected one of --to VERSION, --continue or --abort, found several")
    targets = None if args.abort or args.cont else _targets(engine.lock, args.to)
    runtime = None if targets is None else _runtime_overrides(engine.lock, args.to)
    if args.new_line and targets is None:
        raise UsageError("rebase --new-line: expected --to VERSION (no --continue or --abort)")
    if args.force and targets is None:
        raise UsageError("rebase --force: expected --to VERSION (it allows a version another pin does not accept)")
    with RepoFiles(engine.build_root, engine.repo).lock("rebase"):
        if args.new_line and not args.dry_run:
            follow(engine.lock, targets, runtime, force=args.force)   # refuse before the line is copied
            engine = new_line(engine, next(iter(targets.values())))   # named after the leading upstream's release
        if args.abort:
            return abort(engine)
        if args.cont:
            return resume(engine, args.json)
        return start(engine, targets, args.dry_run, args.json, _keeps(args.keep), runtime, args.force)


def _targets(lock, specs: list[str]) -> dict[str, str]:
    """upstream name -> version, from `--to [NAME=]VERSION` flags."""
    names = list(lock.upstreams)
    targets = {}
    for spec in specs:
        name, sep, version = spec.partition("=")
        if not sep:
            name, version = names[0], spec
        if name in lock.runtime and name not in lock.upstreams:
            continue         # a [runtime] value (--to torch=2.14.1): _runtime_overrides
        lock.upstream(name)
        if not is_version(version):     # said here, not as pip's "Invalid requirement" after the lock is taken
            raise UsageError(f"rebase --to: expected [NAME=]VERSION with a version (e.g. 1.2.3), found {spec!r}")
        targets[name] = version
    if not targets:
        raise UsageError("rebase: expected --to VERSION (or --continue / --abort), found none")
    return targets


def _runtime_overrides(lock, specs: list[str]) -> dict[str, str]:
    """[runtime] key -> value from `--to KEY=VALUE` flags that name a [runtime] package, not an upstream."""
    out = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if sep and name in lock.runtime and name not in lock.upstreams:
            out[name] = value
    return out


def _keeps(specs: list[str]) -> dict[str, str]:
    """patch name (or its number, e.g. 0004) -> reason, from `--keep PATCH=REASON` flags."""
    out = {}
    for spec in specs:
        name, sep, reason = spec.partition("=")
        if not sep or not name.strip() or not reason.strip() or "\n" in reason:
            raise UsageError(f"rebase --keep: expected PATCH=REASON (one line), found {spec!r}")
        out[name.strip()] = reason.strip()
    return out


def _keep_for(keep: dict[str, str], names: list[str]) -> dict[str, str]:
    """The --keep reasons by full patch name (a number or a unique prefix names a patch)."""
    out = {}
    for key, reason in keep.items():
        hits = [n for n in names if n == key or n.startswith(key)]
        if len(hits) != 1:
            raise UsageError(f"rebase --keep {key}: expected one patch of the series, found "
                             f"{', '.join(hits) if hits else 'none'}")
        out[hits[0]] = reason
    return out


def work_dir(engine: Engine) -> Path:
    return engine.build_root / "rebase"


def _rebase_line(engine: Engine, base: Path) -> Engine:
    """The engine of the line the rebase in progress carries (recorded at its start), whatever --line says."""
    saved = (base / LINE_FILE).read_text().strip() if (base / LINE_FILE).is_file() else engine.lock.line
    return engine if saved == engine.lock.line else engine.for_line(saved)


def _progress(msg: str) -> None:
    print(f"rebase: {msg}", file=sys.stderr, flush=True)


def new_line(engine: Engine, name: str) -> Engine:
    """Copy the engine's line (patches/LINE/, overlay/LINE/, its pin.lock tables) to line `name`; its engine."""
    from ..lockedit import copy_line_text
    old, repo, work = engine.lock.line, engine.repo, work_dir(engine)
    if (work / STATE).exists() or (work / REFRESHING).exists():
        raise PatchkitError(f"a rebase is already in progress ({work}): "
                            "resolve and run 'rebase --continue', or 'rebase --abort'")
    if name in engine.lock.lines:
        raise PatchkitError(f"rebase --new-line: expected a new line name, found line {name} already in pin.lock "
                            f"(lines: {', '.join(engine.lock.lines)}); rebase it with --line {name}")
    for d in ("patches", "overlay"):
        if (repo / d / name).exists():
            raise PatchkitError(f"rebase --new-line: expected no {d}/{name}/ yet, found one; nothing written")
    text = copy_line_text((repo / "pin.lock").read_text(), old, name)
    for d in ("patches", "overlay"):
        if (repo / d / old).is_dir():
            shutil.copytree(repo / d / old, repo / d / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    atomic_write(repo / "pin.lock", text.encode(), fault="pin-lock")
    _progress(f"new line {name}: patches/{name}/, overlay/{name}/ and pin.lock [line.\"{name}\"] copied from line {old}")
    return engine.for_line(name)


# -- the plan -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Move:
    """One upstream's step from its pin to a new release, whose artifact is already fetched and verified."""
    old: Upstream
    new: Upstream
    new_wheel: Path


def _new_pin(lock, name: str, version: str) -> tuple[Upstream, Path]:
    """The new release's pin and its wheel, downloaded and in the cache."""
    up = lock.upstream(name)
    wanted = dataclasses.replace(up, version=version).label
    known = cached_wheel(up.package, version, up.artifact)
    if known:           # cached, with the digest the index publishes for it: no second download
        rel = Release(*known)
    else:
        rel = find_release(up.package, version, up.artifact, log=lambda m: _progress(f"[{name}] {m}"))
    safe_name(rel.artifact, f"package index: artifact of {wanted}")
    tag = up.tag.replace(up.version, version) if up.version in up.tag else up.tag
    return dataclasses.replace(up, version=version, artifact=rel.artifact, sha256=rel.sha256, tag=tag), rel.path


def plan(engine: Engine, targets: dict[str, str]) -> list[Move]:
    moves = []
    for name, old in engine.lock.upstreams.items():
        if name not in targets:
            continue
        if targets[name] == old.version:
            _progress(f"[{name}] already at {old.version}: nothing to do")
            continue
        new, wheel = _new_pin(engine.lock, name, targets[name])
        _progress(f"[{name}] {new.artifact}: sha256 verified ({new.sha256[:12]}…)")
        moves.append(Move(old, new, wheel))
    return moves


# -- the replay -----------------------------------------------------------------------------------
def start(engine: Engine, targets: dict[str, str], dry_run: bool, json_out: str | None,
          keep: dict[str, str] | None = None, runtime: dict[str, str] | None = None, force: bool = False) -> int:
    work = work_dir(engine)
    if not dry_run and ((work / STATE).exists() or (work / REFRESHING).exists()):
        raise PatchkitError(f"a rebase is already in progress ({work}): "
                            "resolve and run 'rebase --continue', or 'rebase --abort'")
    for name in engine.lock.upstreams:      # a bad reach.toml is refused before anything is written
        load_partly(engine.series(name).directory, engine.series(name).patches, _progress)
    pins, moved = follow(engine.lock, targets, runtime or {}, force=force)
    for m in moved:
        if m.forced:
            _progress(f"warning: {m.what} {m.new}: {m.forced} (--force: going on)")
    targets = {n: v for n, v in pins.upstreams.items() if n in targets or v != engine.lock.upstream(n).version}
    moves = plan(engine, targets)
    new_runtime = {k: v for k, v in pins.runtime.items() if v != engine.lock.runtime.get(k)}
    if not moves and not new_runtime:
        print("rebase: every named upstream is already at the requested version; nothing to do")
        return 0
    tmp = tempfile.TemporaryDirectory(prefix="patchkit-rebase-") if dry_run else None
    base = Path(tmp.name) if tmp else work
    try:
        if not dry_run:
            if base.exists():
                shutil.rmtree(base)
            snapshot(engine.repo, base / "backup")
            src = base / "backup"
        else:
            src = engine.repo
        staged = base / "overlay"
        if staged.exists():
            shutil.rmtree(staged)
        line = engine.lock.line
        (base / LINE_FILE).parent.mkdir(parents=True, exist_ok=True)
        if not dry_run:
            atomic_write(base / LINE_FILE, line.encode() + b"\n")
        shutil.copytree(src / "overlay" / line, staged, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        names = [p.name for n in engine.lock.upstreams for p in load_series(
            n, src / "patches" / line, src / "overlay" / line, engine.lock.upstream(n).root).patches]
        state = RebaseState(dry_run, [], keep=_keep_for(keep or {}, names), runtime=new_runtime,
                            moved=[m.line() for m in moved], forced={m.what: m.forced for m in moved if m.forced})
        for moved_pin in state.moved:
            _progress(f"pin: {moved_pin}")
        for move in moves:
            old, new = move.old, move.new
            series = load_series(old.name, src / "patches" / line, src / "overlay" / line, old.root)
            _progress(f"[{old.name}] building {old.version} -> {new.version} in a scratch repo")
            commits = build_rebase_repo(base / "repos" / old.name, series.patches, engine.pristine(old.name),
                                        Pristine(move.new_wheel), old.root, old.label, new.label)
            state.upstreams.append(UpstreamRebase(
                old.name, old.version, Pin.of(new), commits, [p.name for p in series.patches],
                [Outcome(p.name, p.subject, PENDING) for p in series.patches]))
        if not dry_run:
            state.save(base)
        return _drive(engine, base, src, state, json_out)
    finally:
        if tmp:
            tmp.cleanup()


def _drive(engine: Engine, base: Path, src: Path, state: RebaseState, json_out: str | None) -> int:
    line = engine.lock.line
    for entry in state.upstreams:
        up = engine.lock.upstream(entry.name)
        series = load_series(entry.name, src / "patches" / line, src / "overlay" / line, up.root)
        replayer = Replayer(base / "repos" / entry.name, base / "overlay", state.keep,
                            load_partly(src / "patches" / line / entry.name, series.patches, lambda _: None))
        total = len(entry.patches)
        if not state.dry_run and entry.next < total:
            replayer.reset_to(entry.head)     # a kill after a commit but before its state write: redo that patch
        while entry.next < total:
            i = entry.next
            faults.point("replay", i)
            patch = series.patches[i]
            where = f"[{entry.name} {i + 1}/{total}] {patch.name}"
            _progress(where)
            outcome = replayer.replay(entry.commits[i], patch)
            entry.results[i] = outcome
            _progress(f"{where}: {outcome.result}" + ("; no longer reached" if outcome.unreached else ""))
            if outcome.result == CONFLICT:
                if state.dry_run:
                    replayer.abandon()
                else:
                    state.stopped = Stop(entry.name, i, replayer.head(), outcome.conflicted)
                    state.save(base)
                    print(format_report(state))
                    _write_json(json_out, state, "stopped")
                    print(_instructions(base, entry.name, outcome))
                    return 1
            entry.next = i + 1
            if not state.dry_run:
                entry.head = replayer.head()
                state.save(base)
    print(format_report(state))
    if state.dry_run:
        _write_json(json_out, state, "dry-run")
        print("rebase --dry-run: nothing written")
        return 0
    _refresh(engine, base, state)
    _write_json(json_out, state, "done")
    return 0


def _instructions(base: Path, name: str, outcome: Outcome) -> str:
    files = "\n".join(f"  {base / 'repos' / name / f}" for f in outcome.conflicted)
    return (f"\nconflict in {outcome.patch}: edit these files (remove the markers; overlay files are staged in "
            f"{base / 'overlay'}):\n{files}\nthen run: python apply.py rebase --continue   "
            f"(or: python apply.py rebase --abort)")


def resume(engine: Engine, json_out: str | None) -> int:
    base = work_dir(engine)
    if not (base / STATE).exists():
        raise PatchkitError(f"rebase --continue: expected a rebase in progress ({base / STATE}), found none")
    engine = _rebase_line(engine, base)
    line = engine.lock.line
    state = RebaseState.load(base, list(engine.lock.upstreams))
    stop = state.stopped
    src = base / "backup"
    if stop:
        entry = state.entry(stop.upstream)
        up = engine.lock.upstream(stop.upstream)
        series = load_series(up.name, src / "patches" / line, src / "overlay" / line, up.root)
        replayer = Replayer(base / "repos" / up.name, base / "overlay", state.keep,
                            load_partly(src / "patches" / line / up.name, series.patches, _progress))
        left = replayer.unresolved(stop.files)
        if left:
            raise PatchkitError(f"rebase --continue: expected the conflicts resolved, found markers still in {', '.join(left)}")
        clashes = [line for lines in replayer.collisions(stop.files, stop.head).values() for line in lines]
        if clashes:
            raise PatchkitError(f"rebase --continue: expected the merged modules consistent, found {clashes[0]}")
        i = stop.index
        if entry.patches != [p.name for p in series.patches]:
            raise PatchkitError(f"{base / STATE}: expected the stop to name a patch of the backed-up series, found "
                                f"index {i} of {len(series.patches)}; run 'rebase --abort'")
        patch = series.patches[i]
        outcome = entry.results[i]
        if replayer.committed_since(stop.head):
            outcome = replayer.adopt(patch, outcome)
        else:
            outcome = replayer.finish(entry.commits[i], patch, outcome)
            if outcome.result == CONFLICT:
                outcome.result = RESOLVED
        if outcome.result != DROPPED:
            outcome.detail.append("resolved by hand")
        entry.results[i] = outcome
        entry.next = i + 1
        entry.head = replayer.head()
        state.stopped = None
        state.save(base)
        _progress(f"[{up.name}] {patch.name}: {outcome.result}")
    return _drive(engine, base, src, state, json_out)


def abort(engine: Engine) -> int:
    """Drop the rebase in progress. If it had started rewriting pin.lock, patches/ and overlay/, put them
    back, but only from a backup whose manifest vouches for every file: with any other backup, restore
    and remove nothing and say what to do. If it had not, they are left as they are."""
    base = work_dir(engine)
    repo = engine.repo
    if not base.exists():
        return undo(repo, done_dir(engine))
    refreshing = (base / REFRESHING).exists()
    problem = backup_problem(base / "backup")
    if refreshing and problem:
        raise PatchkitError(
            f"rebase --abort: the rebase had started rewriting pin.lock, patches/ and overlay/, and its backup is "
            f"not complete ({problem}); nothing restored or removed: restore them from version control "
            f"(e.g. git checkout -- pin.lock patches overlay), then remove {base}")
    if refreshing:
        try:
            restore(repo, base / "backup")
        except OSError as exc:
            raise PatchkitError(f"rebase --abort: restoring from {base / 'backup'} failed ({exc}); the backup is "
                                "kept: fix the cause and run 'rebase --abort' again") from None
        shutil.rmtree(base)
        print(f"rebase --abort: restored pin.lock, patches/ and overlay/ from the verified backup; removed {base}")
        return 0
    shutil.rmtree(base)
    print(f"rebase --abort: pin.lock, patches/ and overlay/ were never written by this rebase (left as they are); "
          f"removed {base}")
    return 0


# -- the refresh ------------------------------------------------------------------------------------
def _refresh(engine: Engine, base: Path, state: RebaseState) -> None:
    """Write patches/, overlay/ and pin.lock, then prove the result applies and round-trips; else restore."""
    repo, line = engine.repo, engine.lock.line
    exported = {e.name: export_series(base / "repos" / e.name, base / "export" / e.name) for e in state.upstreams}
    lock_text = update_lock_text((base / "backup" / "pin.lock").read_text(),
                                 {e.name: e.pin.to_json() for e in state.upstreams}, state.runtime, line=line,
                                 notes={e.name: state.forced[e.name] for e in state.upstreams if e.name in state.forced})
    problem = backup_problem(base / "backup")
    if problem:
        raise PatchkitError(f"rebase: refusing to rewrite pin.lock, patches/ and overlay/ without a complete backup "
                            f"({problem}); nothing written")
    atomic_write(base / REFRESHING, b"pin.lock, patches/ and overlay/ are being rewritten\n")
    try:
        step = 0
        for name, files in exported.items():
            faults.point("refresh", step)
            write_series(files, repo / "patches" / line / name)
            step += 1
        faults.point("refresh", step)
        (repo / "overlay" / line).mkdir(parents=True, exist_ok=True)
        mirror(base / "overlay", repo / "overlay" / line)
        # the reasons overlay/copies.toml keeps for a moved file follow it (it is under overlay/: in the backup)
        moved = follow_moves(repo, line, {old: new for e in state.upstreams for r in e.results
                                          for old, new in r.overlay_moves.items()})
        faults.point("refresh", step + 1)
        atomic_write(repo / "pin.lock", lock_text.encode(), fault="pin-lock")
        fresh = Engine.from_repo(repo, line=line)
        for name in exported:
            up = fresh.lock.upstream(name)
            fresh.chain(name)                        # applies to the new release, overlay claims valid
            problems = roundtrip_differences(fresh.series(name), fresh.pristine(name), up.root, up.label)
            if problems:
                raise PatchkitError(f"refreshed series {name} does not round-trip: {problems[0]}")
    except BaseException as exc:
        try:
            restore(repo, base / "backup")
        except (OSError, PatchkitError) as again:
            raise PatchkitError(f"rebase: the refresh failed ({exc}) and restoring pin.lock, patches/ and overlay/ "
                                f"failed too ({again}); the backup is kept in {base / 'backup'}: fix the cause and "
                                "run 'rebase --abort'") from None
        (base / REFRESHING).unlink()
        raise
    keep_undo(repo, base, done_dir(engine))
    for e in state.upstreams:
        print(f"rebase: {e.label}: wrote {len(exported[e.name])} patch(es), pin.lock updated")
    for moved_pin in state.moved:
        print(f"rebase: pin {moved_pin}")
    for said in moved:
        print(f"rebase: {said}")
    for name, note in state.forced.items():
        print(f"rebase: warning: {name}: {note} (--force; noted in pin.lock)")
    print(f"rebase: done. To undo it: python apply.py rebase --abort (restores pin.lock, patches/ and overlay/ "
          f"from {done_dir(engine) / 'backup'})")


# -- report ---------------------------------------------------------------------------------------
def format_report(state: RebaseState) -> str:
    rows, notes = [], []
    outcomes = [(e, r) for e in state.upstreams for r in e.results]
    for e, r in outcomes:
        reached = ("NO" if r.unreached else "-" if r.result in (PENDING, UPSTREAM, DROPPED, SUPERSEDED)
                   else "stale" if r.stale else r.partly or "yes")
        rows.append([e.label, r.patch, r.result, reached])
        lines = r.detail + [f"no longer reached: {u}" for u in r.unreached]
        if lines:
            notes.append(f"{e.name}/{r.patch}:\n" + "\n".join(f"    {d}" for d in lines))
    out = [table(rows, ["upstream", "patch", "result", "reached"])]
    if state.moved:
        out += ["", "pins that move:"] + [f"    {line}" for line in state.moved]
    if state.forced:
        out += ["", "warning: --force took pins another pinned release does not accept:"] + [
            f"    {name}: {note}" for name, note in state.forced.items()]
    if notes:
        out += ["", "details:"] + notes
    upstreamed = [r.patch for _, r in outcomes if r.result == UPSTREAM]
    if upstreamed:
        out.append("already upstream (dropped from the refreshed series): " + ", ".join(upstreamed))
    dropped = [r.patch for _, r in outcomes if r.result == DROPPED]
    if dropped:
        out.append("dropped (empty after resolution; not in the refreshed series): " + ", ".join(dropped))
    superseded = [f"{r.patch} (superseded by upstream {', '.join(r.superseded)})" for _, r in outcomes
                  if r.result == SUPERSEDED]
    if superseded:
        out.append("superseded (dropped from the refreshed series; --keep PATCH=REASON keeps one): "
                   + "; ".join(superseded))
    for e, r in outcomes:     # one line per stale condition: patch, condition, file
        out += [f"stale: {e.name}/{r.patch}: {line}" for line in r.stale]
    unreached = [r.patch for _, r in outcomes if r.unreached and r.result not in (UPSTREAM, DROPPED)]
    if unreached:
        out.append("no longer reached on the new release (kept; add a hunk that routes to it, or drop it): "
                   + ", ".join(unreached))
    return "\n".join(out)


def _write_json(path: str | None, state: RebaseState, status: str) -> None:
    if path:
        Path(path).write_text(json.dumps({"status": status, "upstreams": state.to_json()["upstreams"],
                                          "pins_moved": state.moved, "runtime": state.runtime,
                                          "forced": state.forced}, indent=1))
