"""Issue 28, class 5: one-line errors, never a traceback.

Deeply nested JSON in the journal, the record, the rebase state or a bundle manifest raised RecursionError;
a stdout that cannot encode '…' (LC_ALL=C PYTHONUTF8=0, PYTHONIOENCODING=latin-1) raised UnicodeEncodeError
in status and apply, and apply had written the whole tree before it failed and exited 1; a series file
that is not UTF-8 raised UnicodeDecodeError.
"""
from __future__ import annotations

import json

import pytest

from tests.conftest import REPO
from tests.engine_fixtures import snapshot
from tests.fault_fixtures import PACKAGE, cli, data_snapshot, demo_repo, demo_target, one_line_error

DEEP = "[" * 100_000 + "]" * 100_000


def _applied(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    assert cli(repo, "apply", "--target", str(site), env=env).returncode == 0
    return repo, env, site


def test_class5_deeply_nested_journal_reads_as_interrupted_and_recovers(tmp_path):
    repo, env, site = _applied(tmp_path)
    (site / ".patchkit-journal.json").write_text(DEEP)
    proc = cli(repo, "status", "--target", str(site), env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "interrupted" in proc.stdout and "malformed" in proc.stdout and "nested at most" in proc.stdout, proc.stdout
    assert cli(repo, "apply", "--target", str(site), env=env).returncode == 0
    assert not (site / ".patchkit-journal.json").exists()


def test_class5_deeply_nested_record_is_a_one_line_error(tmp_path):
    repo, env, site = _applied(tmp_path)
    (site / ".patchkit-written.json").write_text(DEEP)
    before = snapshot(site)
    for cmd in ("status", "apply", "revert"):
        proc = cli(repo, cmd, "--target", str(site), env=env)
        assert one_line_error(proc) and ".patchkit-written.json" in proc.stderr and "nested at most" in proc.stderr, (cmd, proc.stderr)
    assert snapshot(site) == before


def test_class5_deeply_nested_rebase_state_is_a_one_line_error(demo):
    repo, env = demo
    assert cli(repo, "rebase", "--to", "1.1", env={**env, "PATCHKIT_TEST_FAULT": "replay:kill:1"}).returncode == 137
    (repo / "build" / "rebase" / "state.json").write_text(DEEP)
    before = data_snapshot(repo)
    proc = cli(repo, "rebase", "--continue", env=env)
    assert one_line_error(proc) and "state.json" in proc.stderr and "nested at most" in proc.stderr, proc.stderr
    assert data_snapshot(repo) == before


@pytest.mark.parametrize("manifest,says", [(DEEP, "nested at most"), ('{"format": 1, "files": 5}', "'target'"),
                                           ('{"format": 1, "target": {"python": "3.11"}, "files": '
                                            '[{"path": "../x", "size": 1, "sha256": "' + "0" * 64 + '"}], '
                                            '"payload": []}', "../x")], ids=["deep", "no-target", "climbs-out"])
def test_class5_bundle_manifest_is_bounded_and_schema_checked(tmp_path, manifest, says):
    from serving.bundle_manifest import FORMAT, MANIFEST, BundleError, read_manifest

    (tmp_path / MANIFEST).write_text(manifest.replace('"format": 1', f'"format": {FORMAT}'))   # the current format
    with pytest.raises(BundleError, match="manifest.json") as err:
        read_manifest(tmp_path)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("encoding_env", [{"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": None},
                                          {"PYTHONIOENCODING": "latin-1"}, {"PYTHONIOENCODING": "ascii"}],
                         ids=["C-locale", "latin-1", "ascii"])
def test_class5_stdout_that_cannot_encode_the_report_escapes_it(tmp_path, encoding_env):
    """The report's '…' killed status and apply with UnicodeEncodeError, apply after writing the whole tree."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    env = {**env, **encoding_env}
    proc = cli(repo, "apply", "--target", str(site), env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "\\u2026" in proc.stdout or "\\xe2" in proc.stdout or "…" in proc.stdout, proc.stdout
    proc = cli(repo, "status", "--target", str(site), env=env)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith(": applied"), proc.stdout + proc.stderr


def test_class5_series_file_that_is_not_utf8_is_a_one_line_error(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    series = repo / "patches" / "1.0" / PACKAGE / "series"
    series.write_bytes(series.read_bytes() + b"# caf\xe9\n")
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    for args in (["check"], ["status", "--target", str(site)], ["apply", "--target", str(site)]):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc) and "series" in proc.stderr and "UTF-8" in proc.stderr, (args, proc.stderr)
    assert snapshot(site) == before


def test_class5_journal_json_shape_is_unchanged_by_the_owner(tmp_path):
    """The journal an interrupted run leaves is still the documented {op, files: [{path, before, after}]}."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    assert cli(repo, "apply", "--target", str(site), env={**env, "PATCHKIT_TEST_FAULT": "kill:1"}).returncode == 137
    journal = json.loads((site / ".patchkit-journal.json").read_text())
    assert journal["op"] == "apply" and journal["files"] and set(journal["files"][0]) == {"path", "before", "after"}


@pytest.mark.parametrize("spec", ["garbage", "write:boom:1", "kill:x", "apply:kill:1:2", "wrtie:kill:1"])
def test_a_malformed_fault_variable_is_one_line_and_exit_2_before_anything_is_written(tmp_path, spec):
    """PATCHKIT_TEST_FAULT=garbage ended in a traceback (IndexError) from the first fault point reached."""
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    before = snapshot(site)
    proc = cli(repo, "apply", "--target", str(site), env={**env, "PATCHKIT_TEST_FAULT": spec})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("error: PATCHKIT_TEST_FAULT: expected") and repr(spec) in lines[0], proc.stderr
    assert snapshot(site) == before


@pytest.mark.parametrize("where", ["rebase/backup/MANIFEST.json", "rebase-done/WRITTEN.json"])
def test_deeply_nested_rebase_backup_records_are_a_one_line_error(demo, where):
    """rebase --abort read build/rebase/backup/MANIFEST.json (and an undo's WRITTEN.json) with json.loads:
    100 000 '[' raised RecursionError. Every JSON read goes through jsonio's bounded reader."""
    repo, env = demo
    if where.startswith("rebase/"):     # killed after it rewrote patches/: --abort must read the backup
        assert cli(repo, "rebase", "--to", "1.1", env={**env, "PATCHKIT_TEST_FAULT": "refresh:kill:1"}).returncode == 137
    else:
        assert cli(repo, "rebase", "--to", "1.1", env=env).returncode == 0
    (repo / "build" / where).write_text(DEEP)
    before = data_snapshot(repo)
    proc = cli(repo, "rebase", "--abort", env=env)
    assert one_line_error(proc) and where.split("/")[-1] in proc.stderr and "nested at most" in proc.stderr, proc.stderr
    assert data_snapshot(repo) == before


def test_every_json_read_of_patchkit_goes_through_the_bounded_reader():
    """docs/guarantees.md: every JSON read goes through patchkit/jsonio.py (bounded size and depth, one-line errors)."""
    import ast

    from tests.engine_fixtures import REPO

    calls = []
    for path in sorted((REPO / "patchkit").rglob("*.py")):
        if path.name == "jsonio.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("load", "loads")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"):
                calls.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert calls == [], calls


def test_the_fault_points_are_exactly_those_the_code_passes_through():
    """faults.POINTS, which a misspelled PATCHKIT_TEST_FAULT point is refused against, names every point a
    faults.point(...) call or an atomic_write(fault=...) of patchkit passes, and nothing else."""
    import ast

    from patchkit import faults

    used = set()
    for path in (REPO / "patchkit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "point" and node.args and isinstance(node.args[0], ast.Constant):
                used.add(node.args[0].value)
            used |= {k.value.value for k in node.keywords if k.arg == "fault" and isinstance(k.value, ast.Constant)}
    assert used and sorted(used) == sorted(faults.POINTS)
