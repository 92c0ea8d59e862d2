"""Release lines: the rules that span lines (overlay copies) and the line a machine's runtime can run.

A line is one [line."NAME"] of pin.lock with its patches/NAME/ and overlay/NAME/. Where two lines carry a file
with the same path below the overlay root, or the same file name (a module upstream moved between releases),
overlay/copies.toml must say why they differ, else `check` requires them byte-identical. The same holds for the
upstream-style tests each upstream's PRs carry (patches/NAME/UPSTREAM/upstream-tests/), upstream by upstream:

    [[differs]]
    a = "overlay/0.5.14/sglang/srt/layers/attention/flash_mla_sm120_mma.py"
    b = "overlay/0.5.23/sglang/kernels/ops/attention/flash_mla_sm120_mma.py"
    reason = "imports follow the module's move"
"""
from __future__ import annotations

from itertools import combinations
from pathlib import Path

from . import PatchkitError, fsio
from .lockfile import Lock, load_locks, tomllib

COPIES = "overlay/copies.toml"


def runtime_line(locks: list[Lock], torch_version: str | None, triton_version: str | None) -> Lock:
    """The line whose [runtime] torch and triton are the installed ones (a local '+cu128' tag ignored)."""
    def bare(v):
        return (v or "").split("+")[0]
    found = f"torch {torch_version or 'none'}, triton {triton_version or 'none'}"
    hits = [lk for lk in locks
            if bare(lk.runtime.get("torch")) == bare(torch_version) and bare(lk.runtime.get("triton")) == bare(triton_version)]
    if not hits:
        wanted = "; ".join(f"line {lk.line}: torch {lk.runtime.get('torch')}, triton {lk.runtime.get('triton')}"
                           for lk in locks)
        raise PatchkitError(f"installed runtime: expected the torch and triton of a release line ({wanted}), "
                            f"found {found}")
    return hits[-1]        # the newest line the runtime runs


def line_for_runtime(lock_path: Path, torch_version: str | None, triton_version: str | None) -> str:
    """The name of the line pin.lock pins for this torch + triton; else a one-line PatchkitError."""
    return runtime_line(load_locks(lock_path), torch_version, triton_version).line


def installed_runtime() -> tuple[str | None, str | None]:
    """(torch, triton) versions of this interpreter, None for one that is not installed."""
    from importlib import metadata
    out = []
    for name in ("torch", "triton"):
        try:
            out.append(metadata.version(name))
        except metadata.PackageNotFoundError:
            out.append(None)
    return out[0], out[1]


def _differs(repo: Path) -> list[dict[str, str]]:
    """The [[differs]] entries of overlay/copies.toml, each checked to hold a, b and reason."""
    path = Path(repo) / COPIES
    raw = fsio.read_regular(path, "the overlay copies file")
    if raw is None:
        return []
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PatchkitError(f"{path}: not valid TOML ({exc})") from None
    out = []
    for i, entry in enumerate(data.get("differs", [])):
        if not (isinstance(entry, dict) and set(entry) == {"a", "b", "reason"}
                and all(isinstance(v, str) and v.strip() for v in entry.values())):
            raise PatchkitError(f"{path}: [[differs]] #{i + 1}: expected a, b and reason (non-empty strings), "
                                f"found {sorted(entry) if isinstance(entry, dict) else entry!r}")
        out.append(entry)
    return out


def _stale_differs(repo: Path, entries: list[dict[str, str]]) -> list[str]:
    """A reason kept for a file that no longer exists would excuse a later file of that name unseen: refused."""
    out = []
    for i, entry in enumerate(entries):
        missing = [p for p in (entry["a"], entry["b"]) if fsio.kind_of(Path(repo) / p) != "a regular file"]
        if missing:
            out.append(f"{COPIES}: [[differs]] #{i + 1}: expected a and b to name files of the checkout, found no "
                       f"file {', '.join(missing)} (remove the entry or correct its path)")
    return out


def follow_moves(repo: Path, line: str, moves: dict[str, str]) -> list[str]:
    """A rebase moved overlay files of `line` (overlay-relative old -> new): the [[differs]] entries naming them
    name the new paths, so the reasons kept for them hold on (and `check` does not find them stale). Only the
    quoted paths change in overlay/copies.toml; what it was rewritten to say is returned, one line per entry."""
    path = Path(repo) / COPIES
    raw = fsio.read_regular(path, "the overlay copies file")
    if raw is None or not moves:
        return []
    text, said = raw.decode("utf-8"), []
    for old, new in sorted(moves.items()):
        a, b = f'"overlay/{line}/{old}"', f'"overlay/{line}/{new}"'
        if a in text:
            text = text.replace(a, b)
            said.append(f"{COPIES}: {a[1:-1]} -> {b[1:-1]}")
    if said:
        fsio.atomic_write(path, text.encode("utf-8"))
    return said


def _copy_roots(repo: Path, line: str) -> dict[str, str]:
    """{kind: the line's folder of that kind}: its overlay, and each upstream's upstream-tests (compared only
    with the same upstream's of another line)."""
    roots = {"overlay": f"overlay/{line}"}
    for tests in sorted((repo / "patches" / line).glob("*/upstream-tests")):
        roots[f"upstream-tests of {tests.parent.name}"] = tests.relative_to(repo).as_posix()
    return roots


def _files(top: Path) -> list[str]:
    return sorted(f.relative_to(top).as_posix() for f in top.rglob("*")
                  if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc")


def copies_problems(repo: Path, lines: list[str]) -> list[str]:
    """One message per pair of same-path or same-name files of two lines, overlay files or one upstream's
    upstream tests, that differ without a reason, and per [[differs]] entry naming a file that does not exist."""
    repo = Path(repo)
    roots = {line: _copy_roots(repo, line) for line in lines}
    entries = _differs(repo)
    reasons = {frozenset((e["a"], e["b"])) for e in entries}
    out = _stale_differs(repo, entries)
    for la, lb in combinations(lines, 2):
        for kind in sorted(set(roots[la]) & set(roots[lb])):
            top_a, top_b = roots[la][kind], roots[lb][kind]
            for ra in _files(repo / top_a):
                for rb in _files(repo / top_b):
                    if ra != rb and ra.rsplit("/", 1)[-1] != rb.rsplit("/", 1)[-1]:
                        continue
                    a, b = f"{top_a}/{ra}", f"{top_b}/{rb}"
                    if (repo / a).read_bytes() != (repo / b).read_bytes() and frozenset((a, b)) not in reasons:
                        out.append(f"{a} and {b}: expected the copies byte-identical or a [[differs]] entry in "
                                   f"{COPIES} saying why, found them different")
    return out
