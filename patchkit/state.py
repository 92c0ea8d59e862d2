"""What state a target is in, per upstream, per patch and per overlay file."""
from __future__ import annotations

from dataclasses import dataclass, field

APPLIED, PRISTINE, PARTIAL, MODIFIED, ABSENT = "applied", "pristine", "partial", "modified", "absent"
EMPTY = "no patches"
OUTDATED = "outdated"   # written by an earlier version of the series: apply refreshes it, revert restores it


@dataclass
class FileState:
    path: str
    digest: str | None
    position: int | None          # index into the file's chain states; None = matches no known state
    applied_through: int | None   # index of the last patch applied to it (-1 = none)
    stale: bool = False           # no state of the current series, but bytes this tool wrote earlier


@dataclass
class PatchState:
    name: str
    subject: str
    state: str
    files: list[str]


@dataclass
class UpstreamState:
    name: str
    pin: str                      # "sglang 0.5.14 (artifact, sha256 prefix)"
    present: bool
    found_version: str | None = None
    version_ok: bool = True
    patches: list[PatchState] = field(default_factory=list)
    overlay: list[tuple[str, str]] = field(default_factory=list)
    modified: list[FileState] = field(default_factory=list)
    leftover: list[FileState] = field(default_factory=list)   # ours, from patches no longer in the series

    @property
    def summary(self) -> str:
        if not self.present:
            return ABSENT
        if not self.version_ok or self.modified:
            return MODIFIED
        states = {p.state for p in self.patches} | {s for _, s in self.overlay}
        if self.leftover:
            states.add(OUTDATED)
        if not states:
            return EMPTY
        if states <= {APPLIED}:
            return APPLIED
        if states <= {PRISTINE}:
            return PRISTINE
        return PARTIAL


@dataclass
class TargetState:
    target: str
    upstreams: list[UpstreamState]
    journal: dict | None = None
    temp_files: list[str] = field(default_factory=list)   # left by an interrupted write; apply/revert remove them
    before: TargetState | None = None    # after an apply/revert that wrote: the state it started from
    running: tuple[int, str] | None = None   # (pid, command) of another command holding the target's lock now

    @property
    def summary(self) -> str:
        if self.running is not None:     # its journal and temp files are its work in progress, not leftovers
            return f"{self.running[1]} running (pid {self.running[0]})"
        if self.journal is not None:
            return f"interrupted {self.journal.get('op', '')}".strip()
        present = [u.summary for u in self.upstreams if u.present]
        if not present:
            return ABSENT
        present = [s for s in present if s != EMPTY] or [APPLIED]
        for s in (MODIFIED, OUTDATED, PARTIAL):
            if s in present:
                return s
        if set(present) == {APPLIED}:
            return APPLIED
        if set(present) == {PRISTINE}:
            return PRISTINE
        return PARTIAL
