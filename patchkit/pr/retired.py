"""What the data says about a patch on the PR's base, before it is exported: upstream already has it, a later
release line retired it, or the base routes (partly) around it.

A release line records the patches of earlier lines it no longer carries in `patches/LINE/UPSTREAM/retired.toml`:

    [[retired]]
    label = "..."                # the patch's label (its upstream-pr.toml `label`): export-pr names it so
    subject = "..."              # the patch's subject, as the earlier line's series has it
    status = "superseded"        # "superseded": upstream does its job another way; "upstream": upstream has the
                                 # change itself; "retired": dropped although upstream lacks it (`reason` says why)
    by = ['pkg/mod.py:Class.method', 'pkg/other.py:"literal text"']   # Superseded-By syntax (conditions.py):
                                 # upstream's definitions that replaced it, at the paths of this line's release
    release = "0.5.16"           # the first upstream release that has it (superseded / upstream)
    reason = "..."               # retired: why (required there)
    when = ['pkg/mod.py ~ regex']   # retired: where the reason holds, as reach conditions (every one must match)

Every line's records apply to a base they match (a record knows the release it was written on, so a patch of
an earlier line exported onto a later base is judged by the later line's knowledge): `by` all found there, or
for a retired record every `when` condition live and matching. A record of the patch's own line that has no
`when` applies on any base.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import PatchkitError
from ..conditions import Condition, Reader, parse_condition, parse_replacement, stale_reasons, superseded_by, \
    unreached_reasons
from ..lockfile import tomllib

FILE = "retired.toml"
STATUSES = ("superseded", "upstream", "retired")
_KEYS = {"subject", "status", "by", "release", "reason", "when", "label"}


@dataclass(frozen=True)
class Record:
    line: str
    path: Path
    subject: str
    status: str
    by: tuple = ()
    release: str = ""
    reason: str = ""
    when: tuple[Condition, ...] = ()
    label: str = ""          # the README's short name of the patch (P3), where the record gives one

    def where(self) -> str:
        return f"line {self.line}'s {self.path.name}"


def _strings(where: str, value, key: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise PatchkitError(f"{where}: expected {key} as a non-empty list of strings, found {value!r}")
    return value


def load_records(lines_root: Path, upstream: str) -> list[Record]:
    """Every line's records for `upstream` (lines_root/LINE/UPSTREAM/retired.toml), each checked."""
    out = []
    for path in sorted(Path(lines_root).glob(f"*/{upstream}/{FILE}")):
        line = path.parent.parent.name
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise PatchkitError(f"{path}: expected TOML, found {exc}") from None
        if set(data) - {"retired"} or not isinstance(data.get("retired", []), list):
            raise PatchkitError(f"{path}: expected only [[retired]] tables, found {sorted(set(data) - {'retired'})}")
        for n, r in enumerate(data.get("retired", []), 1):
            where = f"{path}: [[retired]] {n}"
            if not isinstance(r, dict) or set(r) - _KEYS or not {"subject", "status"} <= set(r):
                raise PatchkitError(f"{where}: expected subject, status and some of {sorted(_KEYS - {'subject', 'status'})}, "
                                    f"found {sorted(r) if isinstance(r, dict) else r!r}")
            status = r["status"]
            if status not in STATUSES:
                raise PatchkitError(f"{where}: expected status as one of {', '.join(STATUSES)}, found {status!r}")
            by = tuple(parse_replacement(v, f"{where}: by: ") for v in _strings(where, r["by"], "by")) if "by" in r else ()
            when = tuple(parse_condition("Reached-If", c, f"{where}: when: ") for c in _strings(where, r["when"], "when")) \
                if "when" in r else ()
            if status != "retired" and not by:
                raise PatchkitError(f"{where}: expected 'by' (upstream's replacing definitions) for status {status!r}, found none")
            if status == "retired" and not str(r.get("reason", "")).strip():
                raise PatchkitError(f"{where}: expected 'reason' for status 'retired', found none")
            out.append(Record(line, path, r["subject"], status, by, str(r.get("release", "")),
                              str(r.get("reason", "")).strip(), when, str(r.get("label", ""))))
    return out


def describe(r: Record) -> str:
    """What a record says, in one clause, wherever the base: why the line does not carry the patch."""
    if r.status == "retired":
        return f"retired by {r.where()}: {r.reason}"
    what = "has it" if r.status == "upstream" else "does its job another way"
    since = f" since release {r.release}" if r.release else ""
    return f"upstream {what}{since} ({', '.join(b.text() for b in r.by)}), recorded by {r.where()}"


def matches(r: Record, subject: str, label: str) -> bool:
    """The record is of this patch: the same subject, or the same label (labels outlive a rewritten subject)."""
    return r.subject == subject or bool(label and r.label and r.label.upper() == label.upper())


def verdict(patch, own_line: str, records: list[Record], read: Reader) -> str | None:
    """Why the patch must not go upstream on the base `read` gives (None: nothing says so)."""
    for r in records:
        if r.subject != patch.subject:
            continue
        if r.status == "retired":
            holds = (not stale_reasons(list(r.when), read) and not unreached_reasons(list(r.when), read)) if r.when \
                else r.line == own_line
            if holds:
                return f"retired by {r.where()}: {r.reason}"
            continue
        found = superseded_by(list(r.by), read)
        if found:
            since = f" (since release {r.release})" if r.release else ""
            what = "has it" if r.status == "upstream" else "does its job another way"
            return f"upstream already {what} on the base{since}: {', '.join(found)}, recorded by {r.where()}"
    return None


def reach_warnings(patch, partly, read: Reader) -> list[str]:
    """Not refusals: the base routes around the patch (its Reached-If / Unreached-If) or runs it on only part of
    the calls (`partly`: its reach.toml record, or None)."""
    from ..conditions import conditions_of
    reasons = unreached_reasons(conditions_of(patch.trailers), read)
    if reasons:
        return [f"not reached on the base ({reasons[0]})"]
    if partly is not None and partly.holds(read):
        return [f"partly reached on the base ({partly.fraction}: {partly.calls} of {partly.of} {partly.unit})"]
    return []
