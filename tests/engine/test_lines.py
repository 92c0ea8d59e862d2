"""Issue 24 item 1: release lines. pin.lock names lines ([line."NAME"...]); every command takes --line, the newest
line is the default; a tree that holds another line's release or set is refused naming it; `rebase --new-line`
starts a line and leaves the old one byte for byte; overlay copies across lines agree or say why not.
The CLI cases run on the crafted `demo` upstream (tests/fault_fixtures.py), no network."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from patchkit import PatchkitError
from patchkit.lines import copies_problems, follow_moves, line_for_runtime
from patchkit.lockfile import load_lock, lock_lines
from tests.fault_fixtures import cli, data_snapshot, demo_target, one_line_error
from tests.conftest import REPO, line_of


def _only_line(lock_text: str, line: str) -> str:
    """pin.lock's text with the tables of every other line cut out (the header and the line's tables kept)."""
    kept, keep = [], True
    for block in re.split(r"(?m)^(?=\[line\.)", lock_text):
        if block.startswith("[line."):
            keep = block.startswith(f'[line."{line}".')
        if keep:
            kept.append(block)
    return "".join(kept)


def _two_lines(tmp_path: Path) -> Path:
    """A pin.lock with lines 0.5.9 and 0.5.14 (0.5.14 written first: the order in the file is not the order)."""
    text = _only_line((REPO / "pin.lock").read_text(), "0.5.14")
    old = text.split('[line."0.5.14".upstream.sglang]')[1].split("\n\n")[0].replace("0.5.14", "0.5.9")
    lock = tmp_path / "pin.lock"
    lock.write_text(text + '\n[line."0.5.9".upstream.sglang]' + old + '\n\n[line."0.5.9".runtime]\ntorch = "2.9.1"\n'
                    'triton = "3.5.1"\n')
    return lock


def test_the_newest_line_by_version_is_the_default_and_each_line_is_chosen_by_name(tmp_path, monkeypatch):
    monkeypatch.delenv("PATCHKIT_LINE")     # no standing default: the newest line is
    lock = _two_lines(tmp_path)
    assert lock_lines(lock) == ["0.5.9", "0.5.14"]
    assert load_lock(lock).line == "0.5.14" and load_lock(lock).lines == ("0.5.9", "0.5.14")
    old = load_lock(lock, "0.5.9")
    assert old.upstream("sglang").version == "0.5.9" and list(old.upstreams) == ["sglang"]
    assert old.runtime["torch"] == "2.9.1"


def usage_error(proc) -> bool:
    """A usage error as README promises it: exit 2, one `error:` line, no traceback."""
    lines = proc.stderr.strip().splitlines()
    return proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and proc.stdout == ""


def test_an_unknown_line_is_a_usage_error_naming_the_lines(tmp_path, demo):
    with pytest.raises(PatchkitError) as err:
        load_lock(_two_lines(tmp_path), "0.6")
    assert "expected a release line of 0.5.9, 0.5.14, found --line '0.6'" in str(err.value)
    repo, env = demo
    for args in (["status", "--line", "9.9"], ["--line", "9.9", "--version"], ["check", "--line", "9.9"]):
        proc = cli(repo, *args, env=env)
        assert usage_error(proc) and "expected a release line of 1.0, found --line '9.9'" in proc.stderr, \
            (proc.returncode, proc.stderr)


def test_a_patchkit_line_that_names_no_line_is_a_usage_error_not_the_newest(tmp_path, demo, monkeypatch):
    repo, env = demo
    before = data_snapshot(repo)
    for args in (["status", "--target", str(demo_target(tmp_path))], ["--version"]):
        proc = cli(repo, *args, env={**env, "PATCHKIT_LINE": "1.O"})     # a typo: the letter O
        assert usage_error(proc) and "expected PATCHKIT_LINE to name a release line of 1.0, found '1.O'" \
            in proc.stderr, (proc.returncode, proc.stderr)
    assert data_snapshot(repo) == before
    monkeypatch.setenv("PATCHKIT_LINE", "0.5.99")
    with pytest.raises(PatchkitError, match=r"expected PATCHKIT_LINE to name a release line of 0\.5\.9, 0\.5\.14, "
                                            r"found '0\.5\.99'"):
        load_lock(_two_lines(tmp_path))
    monkeypatch.setenv("PATCHKIT_LINE", "0.5.9")          # one it names is taken; --line still wins over it
    assert load_lock(_two_lines(tmp_path)).line == "0.5.9" and load_lock(_two_lines(tmp_path), "0.5.14").line == "0.5.14"
    monkeypatch.setenv("PATCHKIT_LINE", "")               # set but empty: as if unset, the newest
    assert load_lock(_two_lines(tmp_path)).line == "0.5.14"


def test_line_for_runtime_picks_the_line_of_the_installed_torch_and_triton(tmp_path):
    lock = _two_lines(tmp_path)
    assert line_for_runtime(lock, "2.11.0+cu128", "3.6.0") == "0.5.14"
    assert line_for_runtime(lock, "2.9.1", "3.5.1") == "0.5.9"
    with pytest.raises(PatchkitError) as err:
        line_for_runtime(lock, "2.10.0", "3.6.0")
    assert "\n" not in str(err.value) and "found torch 2.10.0, triton 3.6.0" in str(err.value)
    assert "line 0.5.9: torch 2.9.1, triton 3.5.1" in str(err.value)


def test_fixtures_take_the_line_of_the_nearest_conftest():
    assert line_of(Path(__file__)) == "0.5.14"
    assert line_of(REPO / "tests" / "line_0_5_23" / "test_x.py") == "0.5.23"


def test_rebase_new_line_starts_a_line_and_leaves_the_old_one_byte_for_byte(demo, tmp_path):
    repo, env = demo
    before = data_snapshot(repo)
    proc = cli(repo, "rebase", "--line", "1.0", "--to", "1.1", "--new-line", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = data_snapshot(repo)
    assert {k: v for k, v in after.items() if k != "pin.lock" and "/1.1/" not in k} == \
        {k: v for k, v in before.items() if k != "pin.lock"}
    assert after["pin.lock"].startswith(before["pin.lock"].rstrip(b"\n"))       # the 1.0 tables as they were
    assert load_lock(repo / "pin.lock", "1.0").upstream("demo").version == "1.0"
    assert load_lock(repo / "pin.lock", "1.1").upstream("demo").version == "1.1"
    assert any(k.startswith("patches/1.1/demo/") for k in after) and "overlay/1.1/demo/extra.py" in after
    assert "line 1.1" in cli(repo, "--version", env=env).stdout        # the newest line is the default now
    again = cli(repo, "rebase", "--line", "1.0", "--to", "1.1", "--new-line", env=env)
    assert one_line_error(again) and "found line 1.1 already in pin.lock" in again.stderr, again.stderr

    # status names the line a target carries; another line's tree or set is refused in one line
    site = demo_target(tmp_path / "t")
    assert cli(repo, "apply", "--line", "1.0", "--target", str(site), env=env).returncode == 0
    status = cli(repo, "status", "--line", "1.0", "--target", str(site), env=env)
    assert "line: 1.0; the target carries line 1.0" in status.stdout, status.stdout
    other = cli(repo, "apply", "--target", str(site), env=env)
    assert one_line_error(other) and "expected line 1.1, found line 1.0's patch set on demo 1.0" in other.stderr, \
        other.stderr
    # status under the other line says whose tree it is, not that its apply (refused above) would refresh it
    status = cli(repo, "status", "--target", str(site), env=env)
    assert "(NOT this patch set: line 1.1" in status.stdout and "the target is line 1.0's)" in status.stdout \
        and "apply refreshes it" not in status.stdout, status.stdout
    fresh = demo_target(tmp_path / "u")
    other = cli(repo, "apply", "--line", "1.1", "--target", str(fresh), env=env)
    assert one_line_error(other) and "(the release of line 1.0: pass --line 1.0)" in other.stderr, other.stderr

    # the two lines' copies of demo/extra.py agree; a differing copy needs its [[differs]] reason
    assert copies_problems(repo, ["1.0", "1.1"]) == []
    (repo / "overlay" / "1.1" / "demo" / "extra.py").write_text("def g(x):\n    return x + x\n")
    copies = cli(repo, "check", env=env)
    assert copies.returncode == 1 and "overlay/1.0/demo/extra.py and overlay/1.1/demo/extra.py: expected the " \
        "copies byte-identical or a [[differs]] entry" in copies.stdout, copies.stdout
    (repo / "overlay" / "copies.toml").write_text('[[differs]]\na = "overlay/1.1/demo/extra.py"\n'
                                                  'b = "overlay/1.0/demo/extra.py"\nreason = "a test"\n')
    assert copies_problems(repo, ["1.0", "1.1"]) == []


def test_a_same_named_file_moved_between_lines_is_compared_too(tmp_path):
    for line, rel in (("0.5.14", "pkg/a/k.py"), ("0.5.23", "pkg/b/k.py")):
        (tmp_path / "overlay" / line / rel).parent.mkdir(parents=True)
        (tmp_path / "overlay" / line / rel).write_text(line)
    assert len(copies_problems(tmp_path, ["0.5.14", "0.5.23"])) == 1
    (tmp_path / "overlay" / "copies.toml").write_text('[[differs]]\na = "overlay/0.5.14/pkg/a/k.py"\n')
    with pytest.raises(PatchkitError, match=r"\[\[differs\]\] #1: expected a, b and reason"):
        copies_problems(tmp_path, ["0.5.14", "0.5.23"])


def test_the_upstream_tests_of_one_upstream_are_copies_across_lines_too(tmp_path):
    """An upstream-style test two lines' PRs carry (same upstream, same name) agrees byte for byte or says why not;
    another upstream's test of the same name is not its copy."""
    for line, body in (("0.5.14", "from pkg.a import k\n"), ("0.5.23", "from pkg.b import k\n")):
        tests = tmp_path / "patches" / line / "sglang" / "upstream-tests"
        tests.mkdir(parents=True)
        (tests / "test_k.py").write_text(body)
        other = tmp_path / "patches" / line / "flashinfer" / "upstream-tests"
        other.mkdir(parents=True)
        (other / "test_k.py").write_text(line)
    (tmp_path / "patches" / "0.5.23" / "flashinfer" / "upstream-tests" / "test_k.py").write_text("0.5.14")
    problems = copies_problems(tmp_path, ["0.5.14", "0.5.23"])
    assert problems == ["patches/0.5.14/sglang/upstream-tests/test_k.py and patches/0.5.23/sglang/upstream-tests/"
                        "test_k.py: expected the copies byte-identical or a [[differs]] entry in overlay/copies.toml "
                        "saying why, found them different"], problems
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "copies.toml").write_text(
        '[[differs]]\na = "patches/0.5.14/sglang/upstream-tests/test_k.py"\n'
        'b = "patches/0.5.23/sglang/upstream-tests/test_k.py"\nreason = "the module moved"\n')
    assert copies_problems(tmp_path, ["0.5.14", "0.5.23"]) == []


def test_a_differs_entry_naming_a_missing_file_is_refused(tmp_path):
    """A [[differs]] reason for a file no line carries any more is a stale entry: check names it (red before: the
    entry was accepted, and copies.toml kept a reason for patches/0.5.23/.../test_mhc_pre_triton.py after P3 retired)."""
    for line in ("0.5.14", "0.5.23"):
        (tmp_path / "overlay" / line / "pkg").mkdir(parents=True)
        (tmp_path / "overlay" / line / "pkg" / "k.py").write_text(line)
    (tmp_path / "overlay" / "copies.toml").write_text(
        '[[differs]]\na = "overlay/0.5.14/pkg/k.py"\nb = "overlay/0.5.23/pkg/k.py"\nreason = "they differ"\n'
        '[[differs]]\na = "overlay/0.5.14/pkg/gone.py"\nb = "overlay/0.5.23/pkg/k.py"\nreason = "stale"\n')
    assert copies_problems(tmp_path, ["0.5.14", "0.5.23"]) == [
        "overlay/copies.toml: [[differs]] #2: expected a and b to name files of the checkout, found no file "
        "overlay/0.5.14/pkg/gone.py (remove the entry or correct its path)"]


def test_a_moved_overlay_file_keeps_its_differs_reason(tmp_path):
    """A rebase that moves a line's overlay file with its module (patchkit/rebase/run.py) moves the file's
    [[differs]] paths with it: the reason still excuses the pair and names files that exist (red before: the
    0.5.14 line rebased onto 0.5.17 moved flash_mla_sm120_mma.py to sglang/kernels/ops/attention/, and check
    then called the entry stale and the two same-named files different without a reason)."""
    for line, rel in (("0.5.14", "pkg/a/k.py"), ("0.5.23", "pkg/b/k.py")):
        (tmp_path / "overlay" / line / rel).parent.mkdir(parents=True)
        (tmp_path / "overlay" / line / rel).write_text(line)
    copies = ('# why they differ\n[[differs]]\na = "overlay/0.5.14/pkg/a/k.py"\nb = "overlay/0.5.23/pkg/b/k.py"\n'
              'reason = "one file there, two here"\n')
    (tmp_path / "overlay" / "copies.toml").write_text(copies)
    assert copies_problems(tmp_path, ["0.5.14", "0.5.23"]) == []
    (tmp_path / "overlay" / "0.5.14" / "pkg" / "b").mkdir()
    (tmp_path / "overlay" / "0.5.14" / "pkg" / "a" / "k.py").rename(tmp_path / "overlay" / "0.5.14" / "pkg" / "b" / "k.py")
    assert len(copies_problems(tmp_path, ["0.5.14", "0.5.23"])) == 2      # the stale entry, the unexcused pair
    said = follow_moves(tmp_path, "0.5.14", {"pkg/a/k.py": "pkg/b/k.py", "pkg/other.py": "pkg/b/other.py"})
    assert said == ["overlay/copies.toml: overlay/0.5.14/pkg/a/k.py -> overlay/0.5.14/pkg/b/k.py"]
    assert copies_problems(tmp_path, ["0.5.14", "0.5.23"]) == []
    assert (tmp_path / "overlay" / "copies.toml").read_text() == copies.replace("pkg/a/k.py", "pkg/b/k.py")
    # a move of the other line names that line's path only: 0.5.14's entry is not touched
    assert follow_moves(tmp_path, "0.5.23", {"pkg/a/k.py": "pkg/c/k.py"}) == []


def test_every_differs_entry_of_this_checkout_names_files_that_exist():
    assert [p for p in copies_problems(REPO, lock_lines(REPO / "pin.lock")) if "[[differs]]" in p] == []
