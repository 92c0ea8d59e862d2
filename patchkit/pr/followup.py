"""A patch exported as two PRs: the first ships some files with regions held back, a follow-up PR adds them.

upstream-pr.toml describes the follow-up under its patch (prdata.py, `[patch.followup]`): its own title,
motivation, per-file lines, unittest and results, and `held`, the regions the first PR leaves out:

    [[patch.followup.held]]
    path = "pkg/mod.py"        # a file the patch ships (wheel layout)
    from = "def extra("        # the first line held back: its first match after the region before
    until = "def main("        # the line the region ends before: its first match after `from`
    with = ""                  # what the first PR has in its place (optional; whole lines)

The first PR's file is the shipped file with each region replaced, so it is derived from the one file the
series keeps, never a second copy; a region whose lines are not found refuses the export naming them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import PatchkitError


@dataclass
class Held:
    path: str        # wheel-layout path
    start: str       # the line the region starts with
    until: str       # the line it ends before
    instead: str     # the first PR's text in its place


def held_back(data: bytes, regions: list[Held], where: str) -> bytes:
    """`data` with `regions` (in file order, all of one file) replaced by their `instead`."""
    lines = data.decode("utf-8").splitlines(keepends=True)
    bare = [line.rstrip("\r\n") for line in lines]
    out, at = [], 0
    for r in regions:
        start = _find(bare, r.start, at, r, where, "from")
        end = _find(bare, r.until, start + 1, r, where, "until")
        out += lines[at:start]
        if r.instead:
            out.append(r.instead if r.instead.endswith("\n") else r.instead + "\n")
        at = end
    return "".join(out + lines[at:]).encode("utf-8")


def _find(bare: list[str], line: str, after: int, r: Held, where: str, key: str) -> int:
    try:
        return bare.index(line, after)
    except ValueError:
        raise PatchkitError(f"{where}: held {key}: expected the line {line!r} in {r.path} from line {after + 1} on, "
                            "found none; update the region to the file") from None


def first_pr_files(change: dict[str, bytes | None], regions: list[Held], where: str) -> dict[str, bytes | None]:
    """The first PR's files: `change` (wheel path -> bytes) with every held region taken out."""
    out = dict(change)
    for path in dict.fromkeys(r.path for r in regions):
        if out.get(path) is None:
            raise PatchkitError(f"{where}: held path: expected a file the patch ships, found {path!r}")
        out[path] = held_back(out[path], [r for r in regions if r.path == path], where)
    return out
