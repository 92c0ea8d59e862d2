"""The minor failures of issue #16 (10): usage errors exit 2, export-pr never overwrites a user's file,
`make TARGET=` takes a path with a space, and the rebase summary never calls a dropped patch kept."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.engine_fixtures import REPO
from tests.fault_fixtures import RELEASES, cli, data_snapshot, demo_repo, one_line_error
from patchkit.rebase.run import format_report
from patchkit.rebase.state import Outcome, Pin, RebaseState, UpstreamRebase


def test_rebase_without_arguments_is_a_usage_error(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    for args in (["rebase"], ["rebase", "--continue", "--abort"]):
        proc = cli(repo, *args, env=env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert proc.stderr.strip().count("\n") == 0 and "usage" in proc.stderr, proc.stderr


def _describe_for_upstream(series_dir):
    """The upstream-pr.toml export-pr needs: each demo patch described, one line per file it touches."""
    from patchkit.patchfile import parse_patch

    entries = []
    for path in sorted(series_dir.glob("*.patch")):
        p = parse_patch(path)
        mods = ", ".join(f'{{path = "{rel}", what = "changed"}}' for rel in dict.fromkeys(p.paths + p.overlay))
        entries.append(f'[[patch]]\nfile = "{p.name}"\ntitle = "demo change"\nmotivation = "why"\n'
                       f"modifications = [{mods}]\n")
    (series_dir / "upstream-pr.toml").write_text("\n".join(entries))


def test_export_pr_refuses_to_overwrite_an_existing_body_file(tmp_path):
    from patchkit.gitcmd import git, init_repo

    repo, env = demo_repo(tmp_path / "r")
    checkout = init_repo(tmp_path / "upstream")
    for rel, text in RELEASES["1.0"].items():
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text(text)
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "release 1.0")
    git(checkout, "tag", "v1.0")
    _describe_for_upstream(repo / "patches" / "1.0" / "demo")
    body = tmp_path / "notes.md"
    body.write_text("my own notes\n")
    proc = cli(repo, "export-pr", "0001", "--repo", str(checkout), "--body", str(body), env=env)
    assert one_line_error(proc) and "notes.md" in proc.stderr and "existing" in proc.stderr, proc.stderr
    assert body.read_text() == "my own notes\n"
    assert git(checkout, "branch", "--list", "pr/*").stdout.strip() == "", "nothing written: no branch either"
    proc = cli(repo, "export-pr", "0001", "--repo", str(checkout), "--body", str(tmp_path / "new.md"), env=env)
    assert proc.returncode == 0 and (tmp_path / "new.md").read_text().strip(), proc.stderr


def test_make_target_with_a_space_is_one_argument(tmp_path):
    if not shutil.which("make"):
        import pytest
        pytest.skip("make is not installed")
    spaced = tmp_path / "a b"
    spaced.mkdir()
    proc = subprocess.run(["make", "-s", "-C", str(REPO), "status", f"TARGET={spaced}", f"PYTHON={sys.executable}"],
                          capture_output=True, text=True, env={**os.environ, "MAKEFLAGS": ""})
    assert f"target {spaced}: absent" in proc.stdout, proc.stdout + proc.stderr
    assert "unrecognized arguments" not in proc.stderr


def test_rebase_summary_never_says_kept_for_a_dropped_patch():
    def result(name, result, unreached):
        return Outcome(name, name, result, unreached=unreached)

    results = [
        result("0001-kept.patch", "resolved", ["demo/a.py is gone"]),
        result("0002-dropped.patch", "dropped", ["demo/b.py is gone"]),
        result("0003-upstream.patch", "already upstream", ["demo/c.py is gone"]),
    ]
    pin = Pin("1.1", "demo-1.1-py3-none-any.whl", "0" * 64, "v1.1")
    state = RebaseState(False, [UpstreamRebase("demo", "1.0", pin, ["0"] * 3, [r.patch for r in results], results)])
    report = format_report(state)
    kept = next(l for l in report.splitlines() if "(kept;" in l)
    assert "0001-kept.patch" in kept and "0002-dropped" not in kept and "0003-upstream" not in kept, report
    assert any(l.startswith("dropped") and "0002-dropped.patch" in l for l in report.splitlines()), report


def test_rebase_matrix_from_or_releases_not_a_version_is_one_line_and_exit_2(demo):
    """`rebase --matrix --from not-a-version` ended in a traceback (packaging's InvalidVersion)."""
    repo, env = demo
    for args in (["--from", "not-a-version"], ["--releases", "1.1,demo=x.y"]):
        before = data_snapshot(repo)
        proc = cli(repo, "rebase", "--matrix", *args, env=env)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert "expected" in lines[0] and "version" in lines[0] and repr(args[1].split(",")[-1]) in lines[0], lines
        assert data_snapshot(repo) == before and not (repo / "build").exists()


def test_rebase_to_not_a_version_is_one_line_and_exit_2(demo):
    """`rebase --to not-a-version` took the lock and asked pip, which answered "Invalid requirement" (exit 1)."""
    repo, env = demo
    for spec in ("not-a-version", "demo=x.y"):
        before = data_snapshot(repo)
        proc = cli(repo, "rebase", "--to", spec, env=env)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, (spec, proc.stderr)
        assert "rebase --to: expected" in lines[0] and repr(spec) in lines[0], lines
        assert data_snapshot(repo) == before and not (repo / "build").exists()
