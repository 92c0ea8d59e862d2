"""Release a new patch-set version in a scratch repository, the way a maintainer does by hand: the version in
pin.lock's [line."LINE".patchset] table and a CHANGELOG.md entry recording the series digest the files have now."""
from __future__ import annotations

import re
from pathlib import Path

from patchkit.engine import Engine


def next_version(repo: Path) -> str:
    """The version after the current line's (its last number plus one), for a test that releases a change."""
    current = Engine.from_repo(repo).patch_set().version
    *head, last = current.split(".")
    return ".".join([*head, str(int(last) + 1)])


def release(repo: Path, version: str, note: str = "a test release") -> str:
    """Bump the current line of `repo` to `version`; returns the series digest recorded."""
    engine = Engine.from_repo(repo)
    ident = engine.patch_set()
    lock = Path(repo) / "pin.lock"
    text = lock.read_text()
    table = f'[line."{ident.line}".patchset]'
    if table in text:
        text = re.sub(rf'(\[line\."{re.escape(ident.line)}"\.patchset\]\nversion = )"[^"]*"', rf'\g<1>"{version}"', text)
    else:
        text += f'\n{table}\nversion = "{version}"\n'
    lock.write_text(text)
    changelog = Path(repo) / "CHANGELOG.md"
    old = changelog.read_text() if changelog.is_file() else "# Changelog\n"
    heading = f"## {ident.line} line\n"
    entry = f"\n### {version} (test)\n\nSeries-Digest: {ident.digest}\n\n- {note}\n"
    if heading in old:
        new = old.replace(heading, heading + entry, 1)
    else:
        new = old.rstrip("\n") + f"\n\n{heading}{entry}"
    changelog.write_text(new)
    return ident.digest
