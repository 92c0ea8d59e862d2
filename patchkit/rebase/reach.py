"""Partial reach: where a patch's code runs on only some of the calls that reach its function, kept as data.

A Reached-If / Unreached-If trailer says yes or no. Some patches sit on a path the release takes for some calls
and routes around for others; how many is a figure, measured or worked out, not something a regex can read.
The optional file `reach.toml` next to a series (patches/LINE/NAME/) records it, one [[partly]] table a patch:

    [[partly]]
    subject = "<the patch's subject line>"   # survives the renumbering a rebase does
    when = ["<wheel path>[, <wheel path>...] ~ <regex> [anchor: <text>]", ...]   # where the figure holds:
                                             # every one matches (Reached-If syntax)
    calls = 1                                # calls that run the patch's code ...
    of = 86                                  # ... of this many calls of the same kind
    unit = "<what one call is>"
    how = "<measured or derived, with what, on which release>"
    source = "<the raw file, or the upstream files and lines, it comes from>"

Where every `when` condition holds (on the tree the trailers are read on: the release with the series replayed
so far; paths follow the release's moves), the patch is "partly reached (calls/of)" there, in place of what its
trailers say; where one does not hold, or is stale (its file or anchor gone: name the code the figure was
worked out on, so a release without it keeps the trailers' verdict), the trailers' verdict stands. The figure is the file's,
never the code's: nothing here knows any upstream.

The same file also records, per model a user serves and per kind of forward, which patches of the series that
forward runs and which upstream paths it takes on the pinned release, one [[model]] table a row:

    [[model]]
    model = "<the model's name>"
    forward = "<the kind of forward: decode, a verify step, a prefill chunk ...>"
    reaches = ["<a patch's subject line>", ...]    # the series' patches whose code this forward runs ([] for none)
    upstream = ["<area>: <the upstream path taken>", ...]
    held_by = "<the test that drives the release's own dispatch and checks this row>"

`rebase --matrix` prints these rows under the line's table (matrix.py); a test that holds a row compares what the
release's dispatch does against it, so a stale row fails there, not here.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from .. import PatchkitError
from ..conditions import Condition, Reader, parse_condition, stale_reasons, unreached_reasons

FILE = "reach.toml"
_KEYS = {"subject": str, "when": list, "calls": int, "of": int, "unit": str, "how": str, "source": str}
_MODEL_KEYS = {"model": str, "forward": str, "reaches": list, "upstream": list, "held_by": str}
_TABLES = ("partly", "model")


@dataclass(frozen=True)
class Partly:
    subject: str
    when: tuple[Condition, ...]
    calls: int
    of: int
    unit: str
    how: str
    source: str

    @property
    def fraction(self) -> str:
        return f"{self.calls}/{self.of}"

    def describe(self) -> str:
        return f"{self.calls} of {self.of} {self.unit}. How: {self.how}. Source: {self.source}."

    def holds(self, read: Reader, renames: dict[str, str] | None = None) -> bool:
        """Whether every `when` condition is live and matches on the tree `read` gives access to."""
        conds = [c.moved(renames or {}) for c in self.when]
        return not stale_reasons(conds, read) and not unreached_reasons(conds, read)


@dataclass(frozen=True)
class ModelReach:
    model: str
    forward: str
    reaches: tuple[str, ...]     # patch file names, in series order
    upstream: tuple[str, ...]
    held_by: str


def _read(series_dir: Path) -> tuple[Path, dict]:
    path = Path(series_dir) / FILE
    if not path.is_file():
        return path, {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PatchkitError(f"{path}: expected TOML, found {exc}") from None
    bad = sorted(k for k in data if k not in _TABLES or not isinstance(data[k], list))
    if bad:
        raise PatchkitError(f"{path}: expected only [[partly]] and [[model]] tables, found {', '.join(bad)}")
    return path, data


def load_models(series_dir: Path, patches, warn) -> list[ModelReach]:
    """The [[model]] rows of series_dir/reach.toml, in file order ([] without any). A malformed row is refused in
    one line; a subject no patch of `patches` has is left out of its row, and `warn` is told which."""
    path, data = _read(series_dir)
    order = {p.name: n for n, p in enumerate(patches)}
    out = []
    for n, entry in enumerate(data.get("model", []), 1):
        where = f"{path}: [[model]] {n}"
        if not isinstance(entry, dict) or set(entry) != set(_MODEL_KEYS):
            found = ", ".join(sorted(entry)) if isinstance(entry, dict) else type(entry).__name__
            raise PatchkitError(f"{where}: expected the keys {', '.join(_MODEL_KEYS)}, found {found}")
        bad = [k for k, t in _MODEL_KEYS.items() if type(entry[k]) is not t
               or (t is str and not entry[k].strip())
               or (t is list and not all(isinstance(s, str) and s.strip() for s in entry[k]))
               or (k == "upstream" and not entry[k])]
        if bad:
            kind = "list of strings" if _MODEL_KEYS[bad[0]] is list else "string"
            raise PatchkitError(f"{where}: expected {bad[0]} as a non-empty {kind}, found {entry[bad[0]]!r}")
        names = []
        for subject in entry["reaches"]:
            hits = [p.name for p in patches if p.subject == subject]
            if not hits:
                warn(f"warning: {where}: no patch of the series has the subject {subject!r}; left out of the row")
            names += hits
        out.append(ModelReach(entry["model"].strip(), entry["forward"].strip(),
                              tuple(sorted(set(names), key=order.get)),
                              tuple(s.strip() for s in entry["upstream"]), entry["held_by"].strip()))
    return out


def load_partly(series_dir: Path, patches, warn) -> dict[str, Partly]:
    """patch file name -> its record, from series_dir/reach.toml ({} without one). A malformed file or record
    is refused in one line; a record whose subject no patch of `patches` has (the patch was dropped or
    renamed) is left out, and `warn` is told which."""
    path, data = _read(series_dir)
    if not data:
        return {}
    out: dict[str, Partly] = {}
    for n, entry in enumerate(data.get("partly", []), 1):
        where = f"{path}: [[partly]] {n}"
        if not isinstance(entry, dict) or set(entry) != set(_KEYS):
            found = ", ".join(sorted(entry)) if isinstance(entry, dict) else type(entry).__name__
            raise PatchkitError(f"{where}: expected the keys {', '.join(_KEYS)}, found {found}")
        bad = [k for k, t in _KEYS.items() if type(entry[k]) is not t or (t is str and not entry[k].strip())
               or (t is list and (not entry[k] or not all(isinstance(c, str) for c in entry[k])))]
        if bad:
            raise PatchkitError(f"{where}: expected {bad[0]} as a non-empty "
                                f"{'list of conditions' if bad[0] == 'when' else _KEYS[bad[0]].__name__}, "
                                f"found {entry[bad[0]]!r}")
        if not 0 < entry["calls"] < entry["of"]:
            raise PatchkitError(f"{where}: expected 0 < calls < of (a part of the calls), found "
                                f"{entry['calls']} of {entry['of']}")
        hits = [p for p in patches if p.subject == entry["subject"]]
        if len(hits) > 1:
            raise PatchkitError(f"{where}: expected one patch of the series with the subject {entry['subject']!r}, "
                                f"found {len(hits)}")
        if not hits:
            warn(f"warning: {where}: no patch of the series has the subject {entry['subject']!r}; "
                 "its figure is not used (fix or remove the entry)")
            continue
        if hits[0].name in out:
            raise PatchkitError(f"{where}: expected one record per patch, found a second for {hits[0].name}")
        when = tuple(parse_condition("Reached-If", c, f"{where}: when: ") for c in entry["when"])
        out[hits[0].name] = Partly(entry["subject"], when,
                                   entry["calls"], entry["of"], entry["unit"].strip(), entry["how"].strip(),
                                   entry["source"].strip())
    return out
