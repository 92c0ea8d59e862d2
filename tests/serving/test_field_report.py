"""apply.py field-report ingest: a field-check report filed as a run (folder, RUN.md, raw files, INDEX.md row) and the
BENCHMARKS.md row printed; a malformed report, or one of another patch set, refused in one line with nothing written.
The reports are field-check's own (serving/field_check.py run with the card's hardware query stood in)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.engine import Engine
from serving import field_check as F, field_report as FR
from tests.conftest import REPO
from tests.serving.test_field_check import run_report


@pytest.fixture(scope="module")
def report_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    js, _ = F.write_report(run_report(out, line="0.5.23"), out, F.private_words())
    return js


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of what ingest reads and writes: pin.lock, the series it digests, bench/runs/INDEX.md."""
    root = tmp_path / "checkout"
    root.mkdir()
    for rel in ("pin.lock", "CHANGELOG.md", "patches", "overlay"):
        src = REPO / rel
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, root / rel)
    (root / "bench" / "runs").mkdir(parents=True)
    shutil.copyfile(REPO / "bench/runs/INDEX.md", root / "bench/runs/INDEX.md")
    return root


def ingest(checkout: Path, report: Path):
    return subprocess.run([sys.executable, str(REPO / "apply.py"), "--repo", str(checkout), "field-report", "ingest",
                           str(report)], capture_output=True, text=True, timeout=300, cwd=checkout)


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_round_trip(checkout, report_file):
    before = (checkout / "bench/runs/INDEX.md").read_text()
    proc = ingest(checkout, report_file)
    assert proc.returncode == 0, proc.stderr
    folder = checkout / "bench/runs/2026-12-07-field-nvidia-h800-0.5.23"
    assert sorted(p.name for p in folder.iterdir()) == sorted(["RUN.md", report_file.name,
                                                               report_file.with_suffix(".md").name])
    assert (folder / report_file.name).read_bytes() == report_file.read_bytes()     # raw, byte for byte
    run_md = (folder / "RUN.md").read_text()
    assert "user-submitted" in run_md and "NVIDIA H800" in run_md
    for line in F.header_lines():
        assert line in run_md
    index = (checkout / "bench/runs/INDEX.md").read_text()
    added = [l for l in index.splitlines() if l not in before.splitlines()]
    assert added == [l for l in index.splitlines() if l.startswith("| `2026-12-07-field-")]
    assert len(added) == 1 and "bench/runs/2026-12-07-field-nvidia-h800-0.5.23/RUN.md" in added[0]
    assert index.index(added[0]) < index.index("## Archived")
    row = proc.stdout.strip().splitlines()[-1]
    assert row.startswith("| 2026-12-07 | NVIDIA H800 (sm_90), user-submitted | line 0.5.23 ")
    assert "(bench/runs/2026-12-07-field-nvidia-h800-0.5.23/RUN.md)" in row
    again = ingest(checkout, report_file)        # filed once: a second time is refused, nothing changes
    assert again.returncode == 1 and "already filed" in again.stderr and len(again.stderr.splitlines()) == 1


def _edited(report_file: Path, tmp_path: Path, edit) -> Path:
    data = json.loads(report_file.read_text())
    edit(data)
    path = tmp_path / "edited" / report_file.name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    return path


REFUSALS = [
    ("another patch set", lambda d: d["patch_set"].update(series_digest="0" * 64),
     "expected a report of this checkout's patch set"),
    ("another version", lambda d: d["patch_set"].update(version="0.0.1"), "expected a report of this checkout's patch set"),
    ("an unknown line", lambda d: d["patch_set"].update(line="0.4.0"), "expected a report of a release line"),
    ("not a report", lambda d: d.update(kind="something else"), "expected a field-check report"),
    ("no date", lambda d: d.pop("date"), "expected 'date' as YYYY-MM-DD"),
    ("no machine", lambda d: d["machine"].pop("gpu"), "expected 'machine' with 'gpu'"),
    ("a skipped row without a reason", lambda d: d["stages"]["p1"][0].pop("reason"), "expected a 'reason'"),
    ("a row without a status", lambda d: d["stages"]["graphs"][0].update(status="maybe"), "with a status"),
]


@pytest.mark.parametrize("what,edit,says", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refused_in_one_line_and_nothing_written(checkout, report_file, tmp_path, what, edit, says):
    before = snapshot(checkout)
    proc = ingest(checkout, _edited(report_file, tmp_path, edit))
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert snapshot(checkout) == before


def test_not_json_is_refused_in_one_line(checkout, tmp_path):
    bad = tmp_path / "field-report-x-2026-12-07.json"
    bad.write_text("{not json")
    before = snapshot(checkout)
    proc = ingest(checkout, bad)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("field-report: ")
    assert snapshot(checkout) == before


def test_the_patch_set_check_reads_this_checkouts_digest(report_file):
    """The digest a report must carry is the one this checkout's engine computes for its line (not a copy)."""
    data = json.loads(report_file.read_text())
    assert data["patch_set"]["series_digest"] == Engine.from_repo(REPO, read_only=True, line="0.5.23").patch_set().digest


def test_one_cards_reports_of_both_lines_on_one_day_are_filed_apart(checkout, report_file, tmp_path):
    """An owner runs field-check on each line the same day: the two reports go to two folders, each named by its
    line, and neither is refused as 'already filed' (the folder was named by date and card alone)."""
    out = tmp_path / "other-line"
    out.mkdir()
    other, _ = F.write_report(run_report(out, line="0.5.14"), out, F.private_words())
    assert json.loads(other.read_text())["date"] == json.loads(report_file.read_text())["date"]
    first, second = ingest(checkout, report_file), ingest(checkout, other)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    runs = sorted(p.name for p in (checkout / "bench/runs").iterdir() if p.is_dir())
    assert runs == ["2026-12-07-field-nvidia-h800-0.5.14", "2026-12-07-field-nvidia-h800-0.5.23"]
