"""`apply.py check`: the rules every patch of every series must meet on its pinned release.

Errors (the check fails): a hunk that applies only at an offset, a header that lacks a required trailer,
a patch that does not round-trip byte for byte, a Reached-If / Unreached-If or Depends-On trailer that
does not parse or names no earlier patch, a reach condition whose file or anchor is missing on the pin, a
Superseded-By that already matches on the pristine pin, an overlay file no patch claims, a series or overlay file
that changed without a new patch-set version and its CHANGELOG entry (patchset.py). Warnings: a patch whose own
trailers say it is not reached on the pin (a rebase may keep such a patch knowingly; check shows it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import PatchkitError, patchset
from .chain import Chain
from .conditions import conditions_of, pin_problems, replacements_of, superseded_by, unreached_reasons
from .patchfile import PatchFile
from .pristine import Pristine
from .series import Series
from .worktree import roundtrip_differences


@dataclass
class Finding:
    upstream: str
    item: str                     # a patch file name, or overlay/<path> for an unclaimed overlay file
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ok_detail: str = "exact, round-trips"

    @property
    def verdict(self) -> str:
        return "FAIL" if self.errors else "warn" if self.warnings else "ok"

    @property
    def detail(self) -> str:
        return "; ".join(self.errors + self.warnings) or self.ok_detail


def check_repository(engine, log=print) -> list[Finding]:
    findings = []
    for name, up in engine.lock.upstreams.items():
        pristine = engine.pristine(name)       # first: a root that matches nothing in the wheel is named as such
        series = engine.series(name)
        chain = engine.chain(name, log=log)
        trips = {p.split(":")[0]: p.split(": ", 1)[1]
                 for p in roundtrip_differences(series, pristine, up.root, up.label)}
        for p in series.patches:
            found = Finding(name, p.name)
            if p.name in chain.offsets:
                found.errors.append("applies with offset: " + "; ".join(chain.offsets[p.name]))
            if p.missing_trailers():
                found.errors.append("header lacks " + ", ".join(p.missing_trailers()))
            if p.name in trips:
                found.errors.append(trips[p.name])
            broken, unreached = reach_problems(p, chain, pristine)
            found.errors += broken + depends_on_errors(series, p)
            found.warnings += unreached
            findings.append(found)
        for rel in series.unclaimed:
            findings.append(Finding(name, f"overlay/{rel}", [f"no patch claims it (add 'Overlay: {rel}' to one)"]))
    ident = patchset.identify(engine)
    row = Finding("patch set", f"{ident.line} {ident.version or 'unversioned'}",
                  ok_detail=f"{patchset.CHANGELOG} records series digest {ident.digest[:16]}")
    if engine.lock.patchsets:      # once a repository versions a line, every change of a line must be versioned
        row.errors += patchset.problems(engine, ident)
    else:
        row.warnings.append(f"unversioned: {engine.lock.path.name} has no [patchset] table")
    findings.append(row)
    return findings


def reach_problems(patch: PatchFile, chain: Chain, pristine: Pristine) -> tuple[list[str], list[str]]:
    """(errors, warnings) of a patch's Reached-If / Unreached-If trailers on the pinned release.

    A trailer that does not parse is an error. One that says "not reached" is a warning: a rebase may
    knowingly keep such a patch (it reports it), but the user should see it on every check.
    """
    try:
        conds = conditions_of(patch.trailers, f"{patch.name}: ")
        replacements = replacements_of(patch.trailers, f"{patch.name}: ")
    except PatchkitError as exc:
        return [str(exc)], []

    def read(path):
        if path in chain.files:
            return chain.files[path].final
        return pristine.read(path) if pristine.has(path) else None

    def read_pristine(path):
        return pristine.read(path) if pristine.has(path) else None

    # a condition whose file or anchor is missing on the pin would be stale from the start
    errors = [f"condition {p}" for p in pin_problems(conds, read)]
    found = superseded_by(replacements, read_pristine)
    if found:     # a replacement that matches where the patch was written recognises nothing
        errors.append(f"Superseded-By already matches on the pin ({', '.join(found)}): expected it to match only "
                      "once upstream does the patch's job")
    return errors, [f"not reached on the pin: {r}" for r in unreached_reasons(conds, read)]


def depends_on_errors(series: Series, patch: PatchFile) -> list[str]:
    """One message per Depends-On: trailer that does not name a patch earlier in the same series."""
    names = [p.name for p in series.patches]
    earlier = names[: names.index(patch.name)]
    return [f"Depends-On: {dep}: expected a patch earlier in the {series.name} series, found "
            + ("it at or after this patch" if dep in names else "no such patch")
            for dep in patch.trailer("Depends-On") if dep not in earlier]
