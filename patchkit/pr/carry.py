"""One patch's change carried from the pinned release onto another commit (the PR's base, or the branch
of the patch it builds on): per file, a 3-way merge of (that commit's bytes, pinned bytes, patched bytes).

A patch written on top of earlier patches of its series is first replayed on the pinned files alone
(every earlier patch that touches the same files, then this one), so `theirs - base` is this patch's
change only. Anything that does not merge is refused, naming the file.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from .. import PatchkitError
from ..gitcmd import apply_failure, git


def carried_change(series, index: int, pristine, ours_of: Callable[[str], bytes | None], onto: str,
                   prefix: str, upstream_has=lambda patch: None) -> dict[str, bytes | None]:
    """New bytes (None = deleted) of every file patch `index` touches, on the commit `ours_of` reads
    (wheel-layout path -> bytes there, None if absent); `onto` names that commit in messages. A conflict's
    hint names the earlier patches to export first, never one `upstream_has` says the base already has."""
    patch = series.patches[index]
    mine = list(dict.fromkeys(patch.paths))
    with tempfile.TemporaryDirectory(prefix="patchkit-pr-") as tmp:
        scratch = Path(tmp) / "tree"
        git(Path(tmp), "init", "-q", "tree")
        for rel in mine:
            if pristine.has(rel):
                (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
                (scratch / rel).write_bytes(pristine.read(rel))
        before = {}
        for j, p in enumerate(series.patches[: index + 1]):
            if j == index:
                before = {rel: (scratch / rel).read_bytes() if (scratch / rel).exists() else None for rel in mine}
            files = [rel for rel in dict.fromkeys(p.paths) if rel in mine]
            if not files:
                continue
            include = [f"--include={rel}" for rel in files]
            proc = git(scratch, "apply", "--whitespace=nowarn", *include, str(p.path.resolve()), check=False)
            if proc.returncode != 0:
                raise PatchkitError(f"{p.path}: does not apply to the pinned release: {apply_failure(proc.stderr)}")
        after = {rel: (scratch / rel).read_bytes() if (scratch / rel).exists() else None for rel in mine}
        earlier = {rel: [p.name for p in series.patches[:index] if rel in p.paths and not upstream_has(p)]
                   for rel in mine}
        result = {}
        for rel in mine:
            ours, base, theirs = ours_of(rel), before[rel], after[rel]
            where = f"export-pr: {patch.name} does not apply to {onto}: {prefix}{rel}"
            if ours == base:
                result[rel] = theirs
            elif base is None:
                raise PatchkitError(f"{where} already exists there (the patch creates it)")
            elif ours is None:
                raise PatchkitError(f"{where} is not there (moved or removed since the pinned release)")
            elif theirs is None:
                raise PatchkitError(f"{where} differs from the pinned release, and the patch deletes it")
            else:
                for label, data in (("ours", ours), ("base", base), ("theirs", theirs)):
                    (Path(tmp) / label).write_bytes(data)
                merged = git(Path(tmp), "merge-file", "-p", "ours", "base", "theirs", check=False, text=False)
                if merged.returncode != 0:
                    hint = (f"; it changes the file on top of {', '.join(earlier[rel])}: export that first"
                            if earlier[rel] else "")
                    raise PatchkitError(f"{where} conflicts with the changes made there since the pinned release{hint}")
                result[rel] = merged.stdout
    return result
