"""Helpers for tests that read committed raw results (bench/runs/) without ever touching them."""
from __future__ import annotations

import shutil
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "runs"
# bench/runs/INDEX.md: the entries in the tree, then this heading and the entries archived out of it (in git only,
# their files' sha256 in ARCHIVED_SUMS).
ARCHIVED_HEADING = "## Archived: out of the working tree"
ARCHIVED_SUMS = RESULTS / "ARCHIVED.sha256"


def index_parts() -> tuple[str, str]:
    """bench/runs/INDEX.md split at ARCHIVED_HEADING: (what is in the tree, what is archived)."""
    text = (RESULTS / "INDEX.md").read_text()
    present, _, archived = text.partition("\n" + ARCHIVED_HEADING + "\n")
    return present, archived


def report_leaves_folder_as_it_was(run: str, tmp_path: Path, stale_name: str, stale_text: str, report) -> None:
    """Copy bench/runs/<run> to tmp_path, put a stale `stale_name` in it (what an earlier run or format wrote),
    call report(folder) and check it returned 0 and left every file byte-for-byte."""
    folder = tmp_path / Path(run).name
    shutil.copytree(RESULTS / run, folder)
    (folder / stale_name).write_text(stale_text)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert report(folder) == 0
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
