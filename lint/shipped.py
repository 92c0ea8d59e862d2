"""What export-pr ships for each exportable patch of every line, from the series alone (no upstream checkout).

A patch is exportable when its series' upstream-pr.toml describes it. Its commit, built on the pinned release
as export-pr builds it (patchkit.pr.carry onto the pinned files, or, for a patch with Depends-On, onto the
branch of the patches it needs, as `export-pr --series` stacks them), holds: the files the patch changes (with
their bytes on the commit's parent, so a check can tell the lines it adds), every overlay file it claims, its
unittest and the further files its description lists (a benchmark). The lint gate lints exactly these files (lint/gate.py) and
lint/vocabulary.py matches them against the series' forbidden vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class Shipped:
    """One file of one exportable patch's commit."""

    line: str
    upstream: str
    patch: str             # the patch's file name
    path: str              # wheel layout for upstream files; repository layout for a unittest or further file
    before: bytes | None   # the pinned bytes (None: a new file)
    after: bytes | None    # what the commit holds (None: deleted)
    forbid: list           # the series' forbidden vocabulary (compiled patterns)
    data_path: Path        # the upstream-pr.toml that describes it


def shipped(repo: Path) -> list[Shipped]:
    from patchkit.engine import Engine
    from patchkit.pr.carry import carried_change
    from patchkit.pr.prdata import load_pr_data

    newest = Engine.from_repo(Path(repo).resolve(), read_only=True)
    out = []
    for line in newest.lock.lines:
        engine = newest.for_line(line)
        for name in engine.lock.upstreams:
            data = load_pr_data(engine.patches_root / name)
            if data is None:
                continue
            series, pristine = engine.series(name), engine.pristine(name)
            pinned = lambda rel: pristine.read(rel) if pristine.has(rel) else None  # noqa: E731
            tree_of = {}    # patch name -> the files its branch changes (wheel path -> bytes), as exported
            for i, patch in enumerate(series.patches):
                pr = data.patches.get(patch.name)
                if pr is None:      # not exported (downstream only)
                    continue
                # A patch with Depends-On goes on the branch of the patches it needs (export-pr --series):
                # its commit's parent holds their changes.
                parent = {}
                for dep in patch.trailer("Depends-On"):
                    parent.update(tree_of.get(dep, {}))
                on = lambda rel: parent[rel] if rel in parent else pinned(rel)  # noqa: E731
                change = carried_change(series, i, pristine, on, "the branch it builds on", "")
                change.update({rel: series.overlay_bytes(rel) for rel in patch.overlay})
                tree_of[patch.name] = {**parent, **change}
                files = {rel: (on(rel), after) for rel, after in change.items()}
                if pr.test_file is not None:
                    files[pr.test_dest] = (None, pr.test_file.read_bytes())
                for src, dest, _ in pr.files:
                    files[dest] = (None, src.read_bytes())
                out += [Shipped(line, name, patch.name, rel, before, after, data.forbid, data.path)
                        for rel, (before, after) in files.items()]
    return out
