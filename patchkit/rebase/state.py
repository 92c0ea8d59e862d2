"""The typed state of a rebase: the plan per upstream, each patch's outcome, and where it stopped.

It is saved as build/rebase/state.json between runs (a stop at a conflict, `--continue`) and written
as the `--json` report. Read back, it is data: from_json checks every field before any of it is used,
and confines the names and paths in it, because they are joined to build paths.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from .. import PatchkitError, jsonio
from ..fsio import atomic_write
from ..lockfile import Upstream
from ..paths import clean_relpath, safe_name

STATE = "state.json"
CLEAN, OFFSET, CONFLICT, UPSTREAM, RESOLVED, DROPPED, PENDING, SUPERSEDED = (
    "clean", "offset", "conflict", "already upstream", "resolved", "dropped", "pending", "superseded")
RESULTS = (CLEAN, OFFSET, CONFLICT, UPSTREAM, RESOLVED, DROPPED, PENDING, SUPERSEDED)
PIN_KEYS = ("version", "artifact", "sha256", "tag")   # what a rebase changes in an [upstream.NAME] table


class _Checker:
    """One-line schema errors about one state file, each ending in what to do."""

    def __init__(self, where: Path):
        self.where = where

    def fail(self, what: str):
        raise PatchkitError(f"{self.where}: expected {what}; run 'rebase --abort'")

    def need(self, ok: bool, what: str) -> None:
        if not ok:
            self.fail(what)

    def confined(self, check, value, what: str) -> None:
        """A name or path from the file that is joined to a directory: safe_name / clean_relpath."""
        try:
            check(value, f"{self.where}: {what}")
        except PatchkitError as exc:
            raise PatchkitError(f"{exc}; run 'rebase --abort'") from None


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


@dataclass
class Outcome:
    """What replaying one patch did."""
    patch: str
    subject: str
    result: str
    detail: list[str] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)
    overlay_moves: dict[str, str] = field(default_factory=dict)
    conflicted: list[str] = field(default_factory=list)      # files holding conflict markers
    stale: list[str] = field(default_factory=list)           # reach conditions that mean nothing here
    superseded: list[str] = field(default_factory=list)      # FILE:NAME of upstream code doing its job
    kept: str = ""                                           # why it is kept although superseded
    partly: str = ""                                         # "calls/of" where reach.toml's figure holds

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data, check: _Checker) -> Outcome:
        what = "each result as {" + ", ".join(f.name for f in fields(cls)) + "}"
        names = {f.name for f in fields(cls)}
        # "partly" came later: a state saved before it has none
        check.need(isinstance(data, dict) and set(data) in (names, names - {"partly"}), what)
        data = {"partly": "", **data}
        check.need(isinstance(data["partly"], str), what)
        check.need(isinstance(data["patch"], str) and isinstance(data["subject"], str)
                   and data["result"] in RESULTS and _strings(data["detail"]) and _strings(data["unreached"])
                   and _strings(data["conflicted"]) and isinstance(data["overlay_moves"], dict)
                   and _strings(data["stale"]) and _strings(data["superseded"]) and isinstance(data["kept"], str)
                   and _strings(list(data["overlay_moves"].values())), what)
        for rel in data["conflicted"]:
            check.confined(clean_relpath, rel, "conflicted file")
        for old, new in data["overlay_moves"].items():
            check.confined(clean_relpath, old, "overlay move")
            check.confined(clean_relpath, new, "overlay move")
        return cls(**data)


@dataclass(frozen=True)
class Pin:
    """The new release's identity, as it will be written to pin.lock."""
    version: str
    artifact: str
    sha256: str
    tag: str

    @classmethod
    def of(cls, up: Upstream) -> Pin:
        return cls(**{k: getattr(up, k) for k in PIN_KEYS})

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in PIN_KEYS}


@dataclass
class UpstreamRebase:
    """One upstream carried from its pinned version to `pin`: the old series' commits in the rebase repo,
    the patches' names, one outcome per patch, and the index of the next patch to replay."""
    name: str
    from_version: str
    pin: Pin
    commits: list[str]
    patches: list[str]
    results: list[Outcome]
    next: int = 0
    head: str = ""     # the rebase repo's HEAD once results[:next] are in ("" = not replayed yet)

    @property
    def label(self) -> str:
        return f"{self.name} {self.from_version} -> {self.pin.version}"

    def to_json(self) -> dict:
        return {"name": self.name, "from": self.from_version, "pin": self.pin.to_json(), "commits": self.commits,
                "patches": self.patches, "results": [r.to_json() for r in self.results], "next": self.next,
                "head": self.head}

    @classmethod
    def from_json(cls, e, check: _Checker, names: list[str]) -> UpstreamRebase:
        check.need(isinstance(e, dict) and e.get("name") in names, f"each upstream named in pin.lock ({', '.join(names)})")
        check.need(isinstance(e.get("from"), str), "'from' as the version the rebase started from")
        check.need(_strings(e.get("patches")), "'patches' as a list of names")
        for p in e["patches"]:
            check.confined(safe_name, p, "patch")
        n = len(e["patches"])
        check.need(_strings(e.get("commits")) and len(e["commits"]) == n and all(c.isalnum() for c in e["commits"]),
                   "one commit id per patch")
        check.need(isinstance(e.get("results"), list) and len(e["results"]) == n, "one result per patch")
        results = [Outcome.from_json(r, check) for r in e["results"]]
        check.need([r.patch for r in results] == e["patches"], "the results in the order of 'patches'")
        check.need(type(e.get("next")) is int and 0 <= e["next"] <= n, "'next' as a patch index")
        pin = e.get("pin")
        check.need(isinstance(pin, dict) and set(pin) == set(PIN_KEYS) and all(isinstance(pin[k], str) for k in PIN_KEYS),
                   "'pin' with version, artifact, sha256 and tag")
        check.confined(safe_name, pin["artifact"], "pin artifact")
        check.need(isinstance(e.get("head"), str) and (e["head"] == "" or e["head"].isalnum()),
                   "'head' as a commit id or \"\"")
        return cls(e["name"], e["from"], Pin(**pin), list(e["commits"]), list(e["patches"]), results, e["next"],
                   e["head"])


@dataclass
class Stop:
    """Where a rebase stopped: the conflicted patch, the rebase repo's HEAD then, the files with markers."""
    upstream: str
    index: int
    head: str
    files: list[str]

    def to_json(self) -> dict:
        return {"upstream": self.upstream, "index": self.index, "head": self.head, "files": self.files}

    @classmethod
    def from_json(cls, s, check: _Checker, entries: list[UpstreamRebase]) -> Stop:
        check.need(isinstance(s, dict) and isinstance(s.get("upstream"), str) and type(s.get("index")) is int
                   and isinstance(s.get("head"), str) and _strings(s.get("files")),
                   "'stopped' as {upstream, index, head, files}")
        for f in s["files"]:
            check.confined(clean_relpath, f, "conflicted file")
        entry = next((e for e in entries if e.name == s["upstream"]), None)
        check.need(entry is not None, f"'stopped' at an upstream of the rebase, found {s['upstream']!r}")
        check.need(0 <= s["index"] < len(entry.patches), "'stopped' at one of its upstream's patches")
        return cls(s["upstream"], s["index"], s["head"], list(s["files"]))


@dataclass
class RebaseState:
    dry_run: bool
    upstreams: list[UpstreamRebase]
    stopped: Stop | None = None
    keep: dict[str, str] = field(default_factory=dict)    # patch name -> why it is kept although superseded
    runtime: dict[str, str] = field(default_factory=dict)  # [runtime] key -> new value (those that move)
    moved: list[str] = field(default_factory=list)         # every pin that moves, and why (for the report)
    forced: dict[str, str] = field(default_factory=dict)   # upstream -> the requirement --force let it break

    def entry(self, name: str) -> UpstreamRebase:
        return next(e for e in self.upstreams if e.name == name)

    def to_json(self) -> dict:
        return {"dry_run": self.dry_run, "upstreams": [e.to_json() for e in self.upstreams],
                "stopped": self.stopped.to_json() if self.stopped else None, "keep": self.keep,
                "runtime": self.runtime, "moved": self.moved, "forced": self.forced}

    def save(self, base: Path) -> None:
        # atomic: a kill mid-write leaves the previous state whole, so --continue still works
        atomic_write(base / STATE, json.dumps(self.to_json(), indent=1).encode(), fault="state")

    @classmethod
    def load(cls, base: Path, names: list[str]) -> RebaseState:
        """The saved state of the rebase in progress, checked against its schema (`names`: pin.lock's upstreams)."""
        where = base / STATE
        try:   # size- and depth-limited, never through a link (jsonio)
            data = jsonio.read(where, "the rebase state")
            if data is None:
                raise FileNotFoundError(f"no such file: {where}")
        except (OSError, PatchkitError) as exc:
            raise PatchkitError(f"{where}: unreadable rebase state ({exc}); run 'rebase --abort'") from None
        return cls.from_json(data, where, names)

    @classmethod
    def from_json(cls, data, where: Path, names: list[str]) -> RebaseState:
        check = _Checker(where)
        check.need(isinstance(data, dict) and isinstance(data.get("upstreams"), list), "an object with an 'upstreams' list")
        check.need(data.get("dry_run") is False, "'dry_run': false")
        entries = [UpstreamRebase.from_json(e, check, names) for e in data["upstreams"]]
        stop = data.get("stopped")
        keep = data.get("keep")
        check.need(isinstance(keep, dict) and _strings(list(keep.values())), "'keep' as {patch: reason}")
        runtime, moved = data.get("runtime"), data.get("moved")
        check.need(isinstance(runtime, dict) and _strings(list(runtime.values())), "'runtime' as {key: value}")
        check.need(_strings(moved), "'moved' as a list of lines")
        forced = data.get("forced", {})      # absent in a state saved before --force existed
        check.need(isinstance(forced, dict) and set(forced) <= set(names) and _strings(list(forced.values())),
                   "'forced' as {upstream: requirement}")
        return cls(False, entries, None if stop is None else Stop.from_json(stop, check, entries), dict(keep),
                   dict(runtime), list(moved), dict(forced))
