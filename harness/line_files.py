"""The line's path of a file the benches, experiments and the bundle read, named by the file's own name.

A command reads its release line once (an `Engine`, or its `Lock`) and asks here where that line keeps a file of
the overlay or of the pinned upstream: harness/line_files.toml holds the paths, keyed by line, so no module has a
line or a path as a default. A file the line no longer carries raises NotOnLine with the reason the line's
retired.toml gives.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from patchkit import PatchkitError
from patchkit.lockfile import load_lock, tomllib
from patchkit.pr.retired import load_records
from serving import REPO

DATA = Path(__file__).with_name("line_files.toml")
KINDS = ("overlay", "upstream", "retired")
NOT_ON_LINE_EXIT = 3   # a bench whose files its line retired: `make bench` goes on to the next one


class NotOnLine(LookupError):
    """The named file is not on this line: retired there, for the reason its retired.toml gives."""


@dataclass(frozen=True)
class LineFile:
    line: str
    name: str
    kind: str       # "overlay": the line's overlay ships it; "upstream": the line's pinned wheel has it
    path: str       # wheel layout: below overlay/LINE/, in an unpacked or patched tree, in the pinned wheel
    repo: Path

    def overlay(self) -> Path:
        """The checkout's copy of an overlay file."""
        if self.kind != "overlay":
            raise NotOnLine(f"{self.name}: expected an overlay file of line {self.line}, found an upstream file "
                            f"({self.path} in the pinned wheel)")
        return self.repo / "overlay" / self.line / self.path

    def in_tree(self, tree: Path) -> Path:
        """The file in a tree of this line (an unpacked wheel, a patched tree, a tree slice)."""
        return Path(tree) / self.path


def command_lock(line: str | None):
    """The Lock of a command's --line (None: the newest line, or PATCHKIT_LINE, as apply.py picks it), read once at
    its entry point; a name pin.lock lacks is one line on stderr and exit 2."""
    try:
        return load_lock(REPO / "pin.lock", line)
    except PatchkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _lock(where):
    """The Lock of an Engine or a Lock."""
    return getattr(where, "lock", where)


def line_tables(line: str) -> dict[str, dict[str, str]]:
    """{kind: {name: path or label}} of one line, as harness/line_files.toml has it."""
    data = tomllib.loads(DATA.read_text(encoding="utf-8")).get("line", {})
    if line not in data:
        raise NotOnLine(f"{DATA.name}: expected a [line.\"{line}\"] table, found lines {', '.join(sorted(data))}")
    return {kind: dict(data[line].get(kind, {})) for kind in KINDS}


def retired_reason(lock, label: str) -> str:
    """What the line's retired.toml says of the patch `label`: why the line no longer carries it."""
    repo = Path(lock.path).resolve().parent
    for upstream in lock.upstreams:
        for r in load_records(repo / "patches", upstream):
            if r.line == lock.line and r.label == label:
                if r.status == "retired":
                    return r.reason
                return (f"{r.status}: upstream's {', '.join(b.text() for b in r.by)}"
                        + (f" since {r.release}" if r.release else ""))
    raise NotOnLine(f"line {lock.line}: expected a retired.toml record labelled {label}, found none")


def line_file(where, name: str) -> LineFile:
    """Where the line of `where` (an Engine or a Lock) keeps the file `name`; NotOnLine if it is retired there."""
    lock = _lock(where)
    tables = line_tables(lock.line)
    for kind in ("overlay", "upstream"):
        if name in tables[kind]:
            return LineFile(lock.line, name, kind, tables[kind][name], Path(lock.path).resolve().parent)
    if name in tables["retired"]:
        label = tables["retired"][name]
        raise NotOnLine(f"{name}: not on line {lock.line}: retired ({label}): {retired_reason(lock, label)}")
    known = sorted({n for t in tables.values() for n in t})
    raise NotOnLine(f"{name}: expected a file {DATA.name} names for line {lock.line} ({', '.join(known)}), found none")


def line_path(where, name: str) -> str:
    """The wheel-layout path of `name` on the line of `where`."""
    return line_file(where, name).path


def overlay_file(where, name: str) -> Path:
    """The checkout's overlay copy of `name` on the line of `where`."""
    return line_file(where, name).overlay()


def exit_not_on_line(prog: str, exc: NotOnLine):
    """A command whose file its line retired: the one line saying why, and NOT_ON_LINE_EXIT."""
    print(f"{prog}: {exc}", file=sys.stderr)
    raise SystemExit(NOT_ON_LINE_EXIT)
