"""Issue 36 (4c): the "partly reached" figure kept as data next to a series (patches/LINE/NAME/reach.toml,
patchkit/rebase/reach.py), checked against the real pinned wheels: where its conditions hold, and how a bad
record is refused."""
from __future__ import annotations

import pytest

from patchkit import PatchkitError
from patchkit.conditions import pin_problems
from patchkit.lockfile import load_lock
from patchkit.rebase.reach import FILE, load_partly
from patchkit.series import load_series
from tests.conftest import REPO, pristine_wheel
from tests.rebase_cases import repo_copy
from tests.rebase.test_rebase import cli, data_snapshot

SUBJECT = "dsv4: run the MHC-pre mixing linear in bf16 on tensor cores"


def _series(line: str, repo=REPO):
    lock = load_lock(repo / "pin.lock", line)
    return load_series("sglang", repo / "patches" / line, repo / "overlay" / line, lock.upstream("sglang").root)


def _reader(pristine):
    return lambda rel: pristine.read(rel) if pristine.has(rel) else None


def test_p3_record_holds_on_0_5_23_and_names_code_the_0_5_14_pin_lacks():
    # P3 left the 0.5.23 series (patch set 0.1.10); the 0.5.14 line's record keeps its figure for later releases
    assert all(p.subject != SUBJECT for p in _series("0.5.23").patches)
    old = _series("0.5.14")
    [(old_name, old_record)] = load_partly(old.directory, old.patches, pytest.fail).items()
    assert old_name.startswith("0003-") and old_record.subject == SUBJECT and old_record.fraction == "1/86"
    read = _reader(pristine_wheel("sglang", "0.5.23"))
    assert pin_problems(list(old_record.when), read) == [] and old_record.holds(read)
    assert not old_record.holds(_reader(pristine_wheel("sglang", "0.5.14")))


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("calls = 1", "calls = 86"), "expected 0 < calls < of"),
    (lambda t: t.replace("of = 86\n", ""), "expected the keys subject, when, calls, of"),
    (lambda t: t.replace("when = [", "when = ['sglang/srt/x.py ~ (', "), "invalid regex"),
])
def test_a_bad_record_is_refused_in_one_line_before_anything_is_written(tmp_path, edit, expected):
    repo = repo_copy(tmp_path / "repo")
    data = repo / "patches" / "0.5.14" / "sglang" / FILE
    data.write_text(edit(data.read_text()))
    with pytest.raises(PatchkitError) as err:
        series = _series("0.5.14", repo)
        load_partly(series.directory, series.patches, pytest.fail)
    assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)
    before = data_snapshot(repo)
    proc = cli(repo, "rebase", "--line", "0.5.14", "--to", "flashinfer=0.6.15.post1", "--force", "--dry-run",
               env={"PATCHKIT_LINE": "0.5.14"})
    lines = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert proc.returncode == 1 and len(lines) == 1 and expected in lines[0], proc.stderr[-2000:]
    assert "building" not in proc.stderr and data_snapshot(repo) == before


def test_a_record_whose_patch_left_the_series_is_left_out_with_a_warning(tmp_path):
    """A series edit that drops or renames the patch must not block a rebase: the figure is not used, and said so."""
    repo = repo_copy(tmp_path / "repo")
    # as P3's record would be, had it stayed in the 0.5.23 line's data when P3 left that series
    record = (repo / "patches/0.5.14/sglang" / FILE).read_text().split("[[partly]]", 1)[1].split("\n\n", 1)[0]
    data = repo / "patches" / "0.5.23" / "sglang" / FILE
    data.write_text(data.read_text() + "\n[[partly]]" + record.replace(SUBJECT, "a subject no patch has") + "\n")
    series, said = _series("0.5.23", repo), []
    assert load_partly(series.directory, series.patches, said.append) == {}
    assert len(said) == 1 and "'a subject no patch has'" in said[0] and "not used" in said[0], said
    proc = cli(repo, "rebase", "--line", "0.5.23", "--matrix", "--releases", "0.5.23", env={"PATCHKIT_LINE": "0.5.23"})
    [row] = [l for l in proc.stdout.splitlines() if l.startswith("| `sglang/0002-")]
    assert proc.returncode == 0 and row.endswith("| applies |"), proc.stdout[-2000:]
    assert "no patch of the series has the subject 'a subject no patch has'" in proc.stderr, proc.stderr[-2000:]
