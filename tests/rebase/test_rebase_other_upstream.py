"""Issue 36 (4a): moving the other upstream (FlashInfer) past what the line's SGLang release pins.

sglang 0.5.23's own wheel metadata requires flashinfer_python[cu13]==0.7.2. `rebase --to flashinfer=0.7.4` on the
0.5.23 line must refuse in one line (exit 2, nothing written) and say how to proceed anyway (--force); with
--force the mismatch is printed and recorded in pin.lock, above the pin it concerns. Requirements are read from
the real wheels' metadata (cached per release), so the refusal costs seconds and no replay.
"""
from __future__ import annotations

import subprocess
import tomllib

from patchkit.lockedit import FORCED_NOTE, update_lock_text
from patchkit.lockfile import load_lock
from patchkit.rebase.pins import follow
from tests.conftest import REPO
from tests.rebase_cases import repo_copy
from tests.rebase.test_rebase import cli, data_snapshot

LINE = "0.5.23"
LOCK = load_lock(REPO / "pin.lock", LINE)


def _errors(proc) -> list[str]:
    return [l for l in proc.stderr.splitlines() if l.startswith("error:")]


def test_flashinfer_past_the_sglang_pin_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    repo = repo_copy(tmp_path / "repo")
    before = data_snapshot(repo)
    proc = cli(repo, "rebase", "--line", LINE, "--to", "flashinfer=0.7.4", env={"PATCHKIT_LINE": LINE})
    lines = _errors(proc)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:] + proc.stdout[-2000:]
    # both versions, whose requirement it is, and the way to go on anyway
    assert "found 0.7.4" in lines[0] and "flashinfer-python==0.7.2" in lines[0], lines[0]
    assert "sglang 0.5.23" in lines[0] and "--force" in lines[0], lines[0]
    assert data_snapshot(repo) == before
    assert not (repo / "build" / "rebase").exists()


def test_new_line_is_refused_before_the_line_is_copied(tmp_path):
    repo = repo_copy(tmp_path / "repo")
    before = data_snapshot(repo)
    proc = cli(repo, "rebase", "--line", LINE, "--new-line", "--to", "flashinfer=0.7.4", env={"PATCHKIT_LINE": LINE})
    assert proc.returncode == 2 and len(_errors(proc)) == 1, proc.stderr[-2000:]
    assert data_snapshot(repo) == before


def test_force_moves_the_pin_and_names_the_requirement_it_breaks():
    """follow() on the real metadata: without force a one-line refusal, with force the move and a warning."""
    import pytest

    from patchkit import UsageError

    with pytest.raises(UsageError) as err:
        follow(LOCK, {"flashinfer": "0.7.4"}, {})
    assert "\n" not in str(err.value)
    pins, moved = follow(LOCK, {"flashinfer": "0.7.4"}, {}, force=True)
    assert pins.upstreams == {"sglang": "0.5.23", "flashinfer": "0.7.4"}, pins
    forced = [m for m in moved if m.forced]
    assert [m.what for m in forced] == ["flashinfer"], moved
    assert forced[0].forced == "sglang 0.5.23 requires flashinfer-python==0.7.2", forced[0]
    # a pin that every release accepts needs no force and records nothing
    pins, moved = follow(LOCK, {"flashinfer": "0.7.2"}, {}, force=True)
    assert not any(m.forced for m in moved)


def test_the_forced_pin_is_noted_in_pin_lock_and_a_later_rewrite_of_it_drops_the_note():
    text = (REPO / "pin.lock").read_text()
    note = "sglang 0.5.23 requires flashinfer-python==0.7.2"
    forced = update_lock_text(text, {"flashinfer": {"version": "0.7.4"}}, line=LINE, notes={"flashinfer": note})
    assert tomllib.loads(forced)["line"][LINE]["upstream"]["flashinfer"]["version"] == "0.7.4"
    added = [l for l in forced.splitlines() if l not in text.splitlines()]
    assert added == [f"{FORCED_NOTE} {note}", 'version = "0.7.4"'], added
    lines = forced.splitlines()
    assert lines[lines.index('version = "0.7.4"') - 1] == f"{FORCED_NOTE} {note}"
    # only the line's own table: the 0.5.14 line's flashinfer stays as it was
    assert tomllib.loads(forced)["line"]["0.5.14"] == tomllib.loads(text)["line"]["0.5.14"]
    back = update_lock_text(forced, {"flashinfer": {"version": "0.7.2"}}, line=LINE)
    assert back == text


def test_make_rebase_takes_flashinfer_alone_and_force():
    def dry(*args):
        return subprocess.run(["make", "-n", "-C", str(REPO), "rebase", *args], capture_output=True, text=True)

    proc = dry("FLASHINFER=0.7.4", f"LINE={LINE}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"rebase --line {LINE} --to flashinfer=0.7.4" in " ".join(proc.stdout.split()), proc.stdout
    assert "--force" not in proc.stdout
    proc = dry("FLASHINFER=0.7.4", f"LINE={LINE}", "FORCE=1")
    assert "--to flashinfer=0.7.4" in proc.stdout and "--force" in proc.stdout, proc.stdout
    proc = dry("TO=0.5.23", "FLASHINFER=0.7.2")
    assert "--to 0.5.23 --to flashinfer=0.7.2" in " ".join(proc.stdout.split()), proc.stdout
    usage = subprocess.run(["make", "-s", "-C", str(REPO), "rebase"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: make rebase" in usage.stdout + usage.stderr


def test_the_report_and_the_saved_state_carry_the_forced_pin(tmp_path):
    """What a forced rebase prints (its report) and keeps across --continue (state.json) name the requirement."""
    from patchkit.rebase.run import format_report
    from patchkit.rebase.state import RebaseState

    _, moved = follow(LOCK, {"flashinfer": "0.7.4"}, {}, force=True)
    state = RebaseState(False, [], moved=[m.line() for m in moved], forced={m.what: m.forced for m in moved if m.forced})
    report = format_report(state)
    assert "flashinfer 0.7.2 -> 0.7.4 (--to); forced: sglang 0.5.23 requires flashinfer-python==0.7.2" in report
    assert "warning: --force took pins another pinned release does not accept:" in report, report
    state.save(tmp_path)
    assert RebaseState.load(tmp_path, list(LOCK.upstreams)).forced == state.forced
