"""`apply.py rebase`: carry every series to a new upstream release.

Fetches and verifies the new release's artifact (same kind as the pinned one, sha256 from the index),
replays each series in a scratch git repo under build/rebase/ (see replay.py) and classifies each patch:
clean, offset, conflict, already upstream, and whether its code is still reached (conditions.py).
patches/, overlay/ and pin.lock are written only once every patch is resolved; a backup taken before
the first write (complete once its manifest is written, last) lets `--abort` put them back byte for byte.
One rebase at a time: every rebase command holds the repository's lock (lock.repo_lock).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path

from . import PatchkitError, UsageError, faults
from .backup import backup_problem, mirror, restore, snapshot
from .fetch import fetch, find_release
from .lockedit import update_lock_text
from .lock import repo_lock
from .lockfile import Upstream, load_lock
from .paths import clean_relpath, safe_name
from .pristine import Pristine
from .replay import (CONFLICT, DROPPED, PENDING, RESOLVED, UPSTREAM, Outcome, Replayer, build_rebase_repo,
                     conflicted_files, git, has_markers)
from .report import table
from .series import load_series
from .worktree import export_series, roundtrip_differences, write_series

STATE = "state.json"
REFRESHING = "REFRESHING"    # written before the refresh's first write to the repository: --abort must restore
_RESERVED = {"to", "dry-run", "continue", "abort", "json", "help"}


# -- command line ---------------------------------------------------------------------------------
def _lock_names() -> list[str]:
    """Upstream names of the pin.lock next to the entry script (or in the cwd): each gets --NAME VERSION."""
    for base in (Path(sys.argv[0]).resolve().parent, Path.cwd()):
        try:
            return list(load_lock(base / "pin.lock").upstreams)
        except (PatchkitError, OSError):
            continue
    return []


def add_parser(sub) -> None:
    help_text = "carry every series to a new upstream release (3-way, rename-aware), then refresh patches/ and pin.lock"
    p = sub.add_parser("rebase", help=help_text, description=help_text)
    p.add_argument("--to", action="append", default=[], metavar="[NAME=]VERSION",
                   help="target version; a bare VERSION means the first upstream in pin.lock (repeatable)")
    for name in _lock_names()[1:]:
        if name not in _RESERVED:
            p.add_argument(f"--{name}", dest=f"upstream_{name}", metavar="VERSION", help=f"target version of {name}")
    p.add_argument("--dry-run", action="store_true", help="print the report, write nothing")
    p.add_argument("--continue", dest="cont", action="store_true", help="go on after resolving a conflict in build/rebase/repos/NAME")
    p.add_argument("--abort", action="store_true", help="drop the rebase in progress; patches/, overlay/, pin.lock restored")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.set_defaults(func=run)


def run(engine, args) -> int:
    if args.abort + args.cont + bool(args.to) > 1:
        raise UsageError("rebase: expected one of --to VERSION, --continue or --abort, found several")
    targets = None if args.abort or args.cont else _targets(engine.lock, args)
    with repo_lock(engine.build_root, _repo_root(engine), "rebase"):
        if args.abort:
            return abort(engine)
        if args.cont:
            return resume(engine, args.json)
        return start(engine, targets, args.dry_run, args.json)


def _targets(lock, args) -> dict[str, str]:
    names = list(lock.upstreams)
    targets = {}
    for spec in args.to:
        name, sep, version = spec.partition("=")
        if not sep:
            name, version = names[0], spec
        lock.upstream(name)
        targets[name] = version
    for key, value in vars(args).items():
        if key.startswith("upstream_") and value:
            targets[key[len("upstream_"):]] = value
    if not targets:
        raise UsageError("rebase: expected --to VERSION (or --continue / --abort), found none")
    return targets


# -- state ----------------------------------------------------------------------------------------
def work_dir(engine) -> Path:
    return engine.build_root / "rebase"


def _progress(msg: str) -> None:
    print(f"rebase: {msg}", file=sys.stderr, flush=True)


def _new_pin(lock, name: str, version: str) -> Upstream:
    up = lock.upstream(name)
    rel = find_release(up.package, version, up.artifact, log=lambda m: _progress(f"[{name}] {m}"))
    safe_name(rel.artifact, f"package index: artifact of {up.package} {version}")
    tag = up.tag.replace(up.version, version) if up.version in up.tag else up.tag
    return dataclasses.replace(up, version=version, artifact=rel.artifact, sha256=rel.sha256, tag=tag)


def _repo_root(engine) -> Path:
    return Path(engine.lock.path).resolve().parent


# -- the replay -----------------------------------------------------------------------------------
def start(engine, targets: dict[str, str], dry_run: bool, json_out: str | None) -> int:
    repo = _repo_root(engine)
    work = work_dir(engine)
    if not dry_run and ((work / STATE).exists() or (work / REFRESHING).exists()):
        raise PatchkitError(f"a rebase is already in progress ({work}): "
                            "resolve and run 'rebase --continue', or 'rebase --abort'")
    plan = []
    for name in engine.lock.upstreams:
        if name not in targets:
            continue
        old = engine.lock.upstream(name)
        if targets[name] == old.version:
            _progress(f"[{name}] already at {old.version}: nothing to do")
            continue
        new = _new_pin(engine.lock, name, targets[name])
        _progress(f"[{name}] {new.artifact}: sha256 verified ({new.sha256[:12]}…)")
        plan.append((old, new))
    if not plan:
        print("rebase: every named upstream is already at the requested version; nothing to do")
        return 0
    tmp = tempfile.TemporaryDirectory(prefix="patchkit-rebase-") if dry_run else None
    base = Path(tmp.name) if tmp else work
    try:
        if not dry_run:
            if base.exists():
                shutil.rmtree(base)
            snapshot(repo, base / "backup")
            src = base / "backup"
        else:
            src = repo
        staged = base / "overlay"
        if staged.exists():
            shutil.rmtree(staged)
        shutil.copytree(src / "overlay", staged, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        state = {"dry_run": dry_run, "upstreams": [], "stopped": None}
        for old, new in plan:
            series = load_series(old.name, src / "patches", src / "overlay", old.root)
            _progress(f"[{old.name}] building {old.version} -> {new.version} in a scratch repo")
            commits = build_rebase_repo(base / "repos" / old.name, series.patches,
                                        Pristine(fetch(old)), Pristine(fetch(new)), old.root,
                                        f"{old.package} {old.version}", f"{new.package} {new.version}")
            state["upstreams"].append({
                "name": old.name, "from": old.version,
                "pin": {k: getattr(new, k) for k in ("version", "artifact", "sha256", "tag")},
                "commits": commits, "patches": [p.name for p in series.patches],
                "results": [Outcome(p.name, p.subject, PENDING).to_dict() for p in series.patches],
                "next": 0,
            })
        if not dry_run:
            _save(base, state)
        return _drive(engine, base, src, state, json_out)
    finally:
        if tmp:
            tmp.cleanup()


def _save(base: Path, state: dict) -> None:
    (base / STATE).write_text(json.dumps(state, indent=1))


def _drive(engine, base: Path, src: Path, state: dict, json_out: str | None) -> int:
    dry_run = state["dry_run"]
    for entry in state["upstreams"]:
        name = entry["name"]
        up = engine.lock.upstream(name)
        series = load_series(name, src / "patches", src / "overlay", up.root)
        replayer = Replayer(base / "repos" / name, base / "overlay")
        total = len(entry["patches"])
        while entry["next"] < total:
            i = entry["next"]
            faults.point("replay", i)
            patch = series.patches[i]
            _progress(f"[{name} {i + 1}/{total}] {patch.name}")
            outcome = replayer.replay(entry["commits"][i], patch)
            entry["results"][i] = outcome.to_dict()
            _progress(f"[{name} {i + 1}/{total}] {patch.name}: {outcome.result}"
                      + ("; no longer reached" if outcome.unreached else ""))
            if outcome.result == CONFLICT:
                if dry_run:
                    replayer.abandon()
                else:
                    state["stopped"] = {"upstream": name, "index": i, "head": replayer.head(),
                                        "files": outcome.conflicted}
                    _save(base, state)
                    print(format_report(state))
                    _write_json(json_out, state, "stopped")
                    print(_instructions(base, name, outcome))
                    return 1
            entry["next"] = i + 1
        if not dry_run:
            _save(base, state)
    print(format_report(state))
    if dry_run:
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


def resume(engine, json_out: str | None) -> int:
    base = work_dir(engine)
    if not (base / STATE).exists():
        raise PatchkitError(f"rebase --continue: expected a rebase in progress ({base / STATE}), found none")
    state = load_state(base, engine.lock)
    stop = state.get("stopped")
    src = base / "backup"
    if stop:
        entry = next((e for e in state["upstreams"] if e["name"] == stop["upstream"]), None)
        if entry is None:
            raise PatchkitError(f"{base / STATE}: stopped at upstream {stop['upstream']!r}, found no entry for it")
        up = engine.lock.upstream(stop["upstream"])
        series = load_series(up.name, src / "patches", src / "overlay", up.root)
        replayer = Replayer(base / "repos" / up.name, base / "overlay")
        left = [f for f in stop["files"] if has_markers(replayer.repo / f)]
        left += [f for f in conflicted_files(replayer.repo) if f not in left and has_markers(replayer.repo / f)]
        if left:
            raise PatchkitError(f"rebase --continue: expected the conflicts resolved, found markers still in {', '.join(left)}")
        i = stop["index"]
        if not 0 <= i < len(series.patches) or entry["patches"] != [p.name for p in series.patches]:
            raise PatchkitError(f"{base / STATE}: expected the stop to name a patch of the backed-up series, found "
                                f"index {i} of {len(series.patches)}; run 'rebase --abort'")
        patch = series.patches[i]
        outcome = Outcome(**entry["results"][i])
        if replayer.head() != stop["head"] and git(replayer.repo, "status", "--porcelain").stdout.strip() == "":
            outcome = replayer.adopt(entry["commits"][i], patch, outcome)     # the user committed the resolution themselves
        else:
            outcome = replayer.finish(entry["commits"][i], patch, outcome)
            if outcome.result == CONFLICT:
                outcome.result = RESOLVED
        outcome.detail.append("resolved by hand" if outcome.result != DROPPED else "")
        outcome.detail = [d for d in outcome.detail if d]
        entry["results"][i] = outcome.to_dict()
        entry["next"] = i + 1
        state["stopped"] = None
        _save(base, state)
        _progress(f"[{up.name}] {patch.name}: {outcome.result}")
    return _drive(engine, base, src, state, json_out)


def abort(engine) -> int:
    """Drop the rebase in progress. If it had started rewriting pin.lock, patches/ and overlay/, put them
    back, but only from a backup whose manifest vouches for every file: with any other backup, restore
    and remove nothing and say what to do. If it had not, they are left as they are."""
    base = work_dir(engine)
    repo = _repo_root(engine)
    if not base.exists():
        print("rebase --abort: no rebase in progress")
        return 0
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


def load_state(base: Path, lock) -> dict:
    """state.json, checked against its schema: names and paths in it are used to build paths."""
    where = base / STATE
    try:
        state = json.loads(where.read_text())
    except (OSError, ValueError) as exc:
        raise PatchkitError(f"{where}: unreadable rebase state ({exc}); run 'rebase --abort'") from None

    def need(ok: bool, what: str):
        if not ok:
            raise PatchkitError(f"{where}: expected {what}; run 'rebase --abort'")

    need(isinstance(state, dict) and isinstance(state.get("upstreams"), list), "an object with an 'upstreams' list")
    need(state.get("dry_run") is False, "'dry_run': false")
    for e in state["upstreams"]:
        need(isinstance(e, dict) and e.get("name") in lock.upstreams, f"each upstream named in pin.lock ({', '.join(lock.upstreams)})")
        n = len(e.get("patches") or [])
        need(isinstance(e.get("patches"), list) and all(isinstance(p, str) for p in e["patches"]), "'patches' as a list of names")
        for p in e["patches"]:
            safe_name(p, f"{where}: patch")
        need(isinstance(e.get("commits"), list) and len(e["commits"]) == n
             and all(isinstance(c, str) and c.isalnum() for c in e["commits"]), "one commit id per patch")
        need(isinstance(e.get("results"), list) and len(e["results"]) == n
             and all(isinstance(r, dict) for r in e["results"]), "one result per patch")
        need(type(e.get("next")) is int and 0 <= e["next"] <= n, "'next' as a patch index")
        need(isinstance(e.get("pin"), dict) and all(isinstance(e["pin"].get(k), str) for k in ("version", "artifact", "sha256", "tag")),
             "'pin' with version, artifact, sha256 and tag")
        safe_name(e["pin"]["artifact"], f"{where}: pin artifact")
    stop = state.get("stopped")
    if stop is not None:
        need(isinstance(stop, dict) and isinstance(stop.get("upstream"), str) and type(stop.get("index")) is int
             and isinstance(stop.get("head"), str) and isinstance(stop.get("files"), list), "'stopped' as {upstream, index, head, files}")
        for f in stop["files"]:
            clean_relpath(f, f"{where}: conflicted file")
    return state


# -- the refresh ------------------------------------------------------------------------------------
def _refresh(engine, base: Path, state: dict) -> None:
    """Write patches/, overlay/ and pin.lock, then prove the result applies and round-trips; else restore."""
    from .engine import Engine

    repo = _repo_root(engine)
    exported = {}
    for entry in state["upstreams"]:
        exported[entry["name"]] = export_series(base / "repos" / entry["name"], base / "export" / entry["name"])
    lock_text = update_lock_text((base / "backup" / "pin.lock").read_text(),
                                 {e["name"]: e["pin"] for e in state["upstreams"]})
    problem = backup_problem(base / "backup")
    if problem:
        raise PatchkitError(f"rebase: refusing to rewrite pin.lock, patches/ and overlay/ without a complete backup "
                            f"({problem}); nothing written")
    (base / REFRESHING).write_text("pin.lock, patches/ and overlay/ are being rewritten\n")
    try:
        step = 0
        for name, files in exported.items():
            faults.point("refresh", step)
            write_series(files, repo / "patches" / name)
            step += 1
        faults.point("refresh", step)
        (repo / "overlay").mkdir(exist_ok=True)
        mirror(base / "overlay", repo / "overlay")
        faults.point("refresh", step + 1)
        (repo / "pin.lock").write_text(lock_text)
        fresh = Engine.from_repo(repo)
        for name in exported:
            up = fresh.lock.upstream(name)
            fresh.chain(name)                        # applies to the new release, overlay claims valid
            problems = roundtrip_differences(fresh.series(name), fresh.pristine(name), up.root, f"{up.package} {up.version}")
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
    shutil.rmtree(base)
    for e in state["upstreams"]:
        print(f"rebase: {e['name']} {e['from']} -> {e['pin']['version']}: wrote {len(exported[e['name']])} patch(es), pin.lock updated")


# -- report ---------------------------------------------------------------------------------------
def format_report(state: dict) -> str:
    rows, notes = [], []
    for e in state["upstreams"]:
        for r in e["results"]:
            reached = "NO" if r["unreached"] else ("-" if r["result"] in (PENDING, UPSTREAM, DROPPED) else "yes")
            rows.append([f"{e['name']} {e['from']} -> {e['pin']['version']}", r["patch"], r["result"], reached])
            lines = r["detail"] + [f"no longer reached: {u}" for u in r["unreached"]]
            if lines:
                notes.append(f"{e['name']}/{r['patch']}:\n" + "\n".join(f"    {d}" for d in lines))
    out = [table(rows, ["upstream", "patch", "result", "reached"])]
    if notes:
        out += ["", "details:"] + notes
    upstreamed = [r["patch"] for e in state["upstreams"] for r in e["results"] if r["result"] == UPSTREAM]
    if upstreamed:
        out.append("already upstream (dropped from the refreshed series): " + ", ".join(upstreamed))
    dropped = [r["patch"] for e in state["upstreams"] for r in e["results"] if r["result"] == DROPPED]
    if dropped:
        out.append("dropped (empty after resolution; not in the refreshed series): " + ", ".join(dropped))
    unreached = [r["patch"] for e in state["upstreams"] for r in e["results"]
                 if r["unreached"] and r["result"] not in (UPSTREAM, DROPPED)]
    if unreached:
        out.append("no longer reached on the new release (kept; add a hunk that routes to it, or drop it): "
                   + ", ".join(unreached))
    return "\n".join(out)


def _write_json(path: str | None, state: dict, status: str) -> None:
    if path:
        Path(path).write_text(json.dumps({"status": status, "upstreams": state["upstreams"]}, indent=1))
