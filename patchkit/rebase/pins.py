"""One release line's pins in, one line's pins out: which versions a rebase moves to, and why.

The leading upstream (the first one `--to` names, in pin.lock order) drives the rest: another upstream it
requires exactly (`==`) follows it unless `--to NAME=VERSION` names one, which must satisfy the
requirement; each [runtime] package follows the leading release's requirement, or else the requirement of
another [runtime] package's new version (e.g. a compiler pinned by the framework); `--to KEY=VALUE`
overrides a [runtime] value (an offline wheelhouse). Requirements are read from the wheels' own metadata
(requires.py). pin.lock will hold several release lines: this module only ever sees one.

Every upstream's release (moved or kept) is checked against what every other one requires of it: moving
FlashInfer alone past the FlashInfer the line's SGLang pins is refused like naming one the new SGLang does
not accept. `force` proceeds anyway; each such pin's Moved then says which requirement it breaks (`forced`),
and the rebase prints it and notes it in pin.lock.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .. import PatchkitError, UsageError
from .requires import pinned_version, requirement, requires_dist, satisfies

RUNTIME_FIXED = ("python",)     # [runtime] keys that are not package versions


@dataclass
class Pins:
    upstreams: dict[str, str]                   # upstream name -> version
    runtime: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Moved:
    what: str
    old: str
    new: str
    why: str
    forced: str = ""     # the requirement this pin breaks, when --force took it anyway

    def line(self) -> str:
        return f"{self.what} {self.old} -> {self.new} ({self.why})" + (
            f"; forced: {self.forced}" if self.forced else "")


def pins_of(lock) -> Pins:
    return Pins({n: u.version for n, u in lock.upstreams.items()}, dict(lock.runtime))


def follow(lock, targets: dict[str, str], runtime_overrides: dict[str, str], reqs=requires_dist,
           force: bool = False) -> tuple[Pins, list[Moved]]:
    """The pins after the move `targets` asks for, and every pin that moved with its reason."""
    before = pins_of(lock)
    after = Pins(dict(before.upstreams), dict(before.runtime))
    moved: list[Moved] = []
    named = [n for n in lock.upstreams if n in targets]
    if not named:
        return after, moved
    lead = lock.upstream(named[0])
    lead_version = targets[lead.name]
    after.upstreams[lead.name] = lead_version
    lead_reqs = reqs(lead.package, lead_version, lead.artifact)
    who = f"{lead.package} {lead_version}"
    for name, up in lock.upstreams.items():
        if name == lead.name:
            continue
        spec = requirement(lead_reqs, up.package)
        if name in targets:
            after.upstreams[name] = targets[name]
            why = "--to"
        elif spec and not satisfies(up.version, spec):
            exact = pinned_version(spec)
            if not exact:
                raise PatchkitError(f"rebase: {who} requires {up.package}{spec}, and the pin {up.version} does not "
                                    f"satisfy it; name one with --to {name}=VERSION")
            after.upstreams[name] = exact
            why = f"{who} requires {up.package}{spec}"
        else:
            continue
        if after.upstreams[name] != up.version:
            moved.append(Moved(name, up.version, after.upstreams[name], why))
    if lead_version != lead.version:
        moved.insert(0, Moved(lead.name, lead.version, lead_version, "--to"))
    for name, up in lock.upstreams.items():
        broken = _broken_requirement(lock, after, name, targets, reqs)
        if not broken:
            continue
        if not force:
            raise UsageError(f"rebase --to {name}={after.upstreams[name]}: expected a version {broken[0]} accepts "
                             f"({broken[1]}), found {after.upstreams[name]}; add --force to rebase onto it anyway "
                             "(the mismatch is printed and noted in pin.lock)")
        note = f"{broken[0].split(' (')[0]} requires {broken[1]}"
        i = next((i for i, m in enumerate(moved) if m.what == name), None)
        if i is None:          # a pin that does not move but no longer fits (named as it is, or forced before)
            moved.append(Moved(name, up.version, up.version, "kept", note))
        else:
            moved[i] = dataclasses.replace(moved[i], forced=note)
    _follow_runtime(lock, after, moved, lead_reqs, who, runtime_overrides, reqs)
    return after, moved


def _broken_requirement(lock, after: Pins, name: str, targets: dict[str, str], reqs) -> tuple[str, str] | None:
    """(release, requirement) of the first other upstream, at its version after the move, that does not accept
    upstream `name` at its new version; None when all do (or none says)."""
    up = lock.upstream(name)
    for other, o in lock.upstreams.items():
        if other == name:
            continue
        spec = requirement(reqs(o.package, after.upstreams[other], o.artifact), up.package)
        if spec and not satisfies(after.upstreams[name], spec):
            kept = "" if other in targets else " (the line's pin)"
            return f"{o.package} {after.upstreams[other]}{kept}", f"{up.package}{spec}"
    return None


def _follow_runtime(lock, after: Pins, moved: list[Moved], lead_reqs: list[str], who: str,
                    overrides: dict[str, str], reqs) -> None:
    unknown = [k for k in overrides if k not in lock.runtime or k in RUNTIME_FIXED]
    if unknown:
        raise PatchkitError(f"rebase --to {unknown[0]}=...: expected an upstream or a [runtime] package of pin.lock "
                            f"({', '.join(list(lock.upstreams) + [k for k in lock.runtime if k not in RUNTIME_FIXED])})")
    keys = [k for k in lock.runtime if k not in RUNTIME_FIXED]
    decided: dict[str, tuple[str, str]] = {}
    for k in keys:
        if k in overrides:
            decided[k] = (overrides[k], f"--to {k}=")
        else:
            exact = pinned_version(requirement(lead_reqs, k) or "")
            if exact:
                decided[k] = (exact, f"{who} requires {k}{requirement(lead_reqs, k)}")
    like = lock.upstream(next(iter(lock.upstreams))).artifact
    for k in keys:          # what the packages decided above require in turn (torch pins its triton)
        if k in decided:
            continue
        for other, (version, _) in list(decided.items()):
            spec = requirement(reqs(other, version, like), k)
            exact = pinned_version(spec or "")
            if exact:
                decided[k] = (exact, f"{other} {version} requires {k}{spec}")
                break
    for k, (version, why) in decided.items():
        if version != lock.runtime[k]:
            after.runtime[k] = version
            moved.append(Moved(f"[runtime] {k}", lock.runtime[k], version, why))
