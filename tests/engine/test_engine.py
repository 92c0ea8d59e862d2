"""The patch engine on the real pinned wheels and the real series: apply, status, revert, and every refusal.

Each refusal must leave the target byte-identical and say, on one line, what was expected and found.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_fixtures import REPO, copy_repo_data, first_patch_with_hunk, snapshot
from tests.patchset_fixtures import next_version, release
from patchkit import PatchkitError
from patchkit.engine import Engine
from patchkit.state import APPLIED, PARTIAL, PRISTINE

quiet = lambda *a, **k: None


@pytest.fixture
def target(pristine_root, tmp_path) -> Path:
    site = tmp_path / "site"
    shutil.copytree(pristine_root, site)
    return site


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    return copy_repo_data(tmp_path / "repo")


def run_cli(repo: Path, *args, env=None):
    return subprocess.run([sys.executable, str(repo / "apply.py"), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def all_patches(state):
    return [(u.name, p.name, p.state) for u in state.upstreams for p in u.patches] + \
           [(u.name, path, s) for u in state.upstreams for path, s in u.overlay]


def test_series_is_not_empty():
    engine = Engine.from_repo(REPO)
    assert sum(len(engine.series(n).patches) for n in engine.lock.upstreams) >= 1


def test_apply_then_status_then_revert_restores_every_pinned_byte(target):
    engine = Engine.from_repo(REPO)
    before = snapshot(target)
    state = engine.apply(target, log=quiet)
    rows = all_patches(state)
    assert rows and all(s == APPLIED for _, _, s in rows), rows
    assert state.summary == APPLIED
    assert snapshot(target) != before

    state = engine.revert(target, log=quiet)
    assert all(s == PRISTINE for _, _, s in all_patches(state))
    assert engine.verify_pristine_tree(target) == []
    assert snapshot(target) == before


def test_second_apply_is_a_noop_that_says_so(target):
    engine = Engine.from_repo(REPO)
    engine.apply(target, log=quiet)
    applied = snapshot(target)
    said = []
    engine.apply(target, log=said.append)
    assert snapshot(target) == applied
    assert any("nothing to do" in s for s in said), said


def test_cli_apply_status_revert_exit_codes(target):
    r = run_cli(REPO, "apply", "--target", str(target))
    assert r.returncode == 0, r.stderr
    assert "pristine -> applied" in r.stdout
    r = run_cli(REPO, "status", "--target", str(target))
    assert r.returncode == 0 and f"target {target}: applied" in r.stdout
    r = run_cli(REPO, "revert", "--target", str(target))
    assert r.returncode == 0, r.stderr
    r = run_cli(REPO, "status", "--target", str(target))
    assert f"target {target}: pristine" in r.stdout


def _half_applied_patch(engine, repo_copy):
    """(upstream, patch, path, bytes): a patch of the real series touching two or more files, one of them (touched
    by no later patch) and the bytes it has with every earlier patch applied but not this one."""
    for name in engine.lock.upstreams:
        patches = engine.series(name).patches
        for i in reversed(range(len(patches))):
            later = {q for p in patches[i + 1:] for q in p.paths}
            mine = [q for q in dict.fromkeys(patches[i].paths) if q not in later]
            if len(set(patches[i].paths)) < 2 or not mine:
                continue
            series = repo_copy / "patches" / "0.5.14" / name / "series"
            series.write_text("".join(p.name + "\n" for p in patches[:i]))
            for p in patches[i:]:
                (series.parent / p.name).unlink()
            earlier = Engine.from_repo(repo_copy).chain(name).files.get(mine[0])
            pristine = engine.pristine(name)
            before = earlier.final if earlier else pristine.read(mine[0]) if pristine.has(mine[0]) else None
            return name, patches[i], mine[0], before
    pytest.skip("no patch of the series touches two files")


@pytest.mark.parametrize("finish", ["apply", "revert"])
def test_a_partly_applied_tree_reads_partial_and_apply_or_revert_finishes_it(target, repo_copy, finish):
    """One file of a two-file patch is put back to its bytes before that patch: status must say partial (exit 1)
    and name that patch, never call the tree applied; apply completes it, revert restores every pinned byte."""
    engine = Engine.from_repo(REPO)
    pristine_tree = snapshot(target)
    engine.apply(target, log=quiet)
    applied_tree = snapshot(target)
    name, patch, rel, before = _half_applied_patch(engine, repo_copy)
    (target / rel).write_bytes(before)

    state = engine.status(target)
    assert state.summary == PARTIAL
    rows = {(u, p): s for u, p, s in all_patches(state)}
    assert rows[(name, patch.name)] == PARTIAL, rows
    assert all(s == APPLIED for key, s in rows.items() if key != (name, patch.name)), rows
    r = run_cli(REPO, "status", "--target", str(target))
    assert r.returncode == 1 and f"target {target}: partial" in r.stdout, r.stdout
    row = next(l for l in r.stdout.splitlines() if patch.name in l)
    assert " partial " in row, r.stdout

    r = run_cli(REPO, finish, "--target", str(target))
    assert r.returncode == 0, r.stderr
    done = "applied" if finish == "apply" else "pristine"
    row = next(l for l in r.stdout.splitlines() if patch.name in l)
    assert f" partial -> {done} " in row, r.stdout
    r = run_cli(REPO, "status", "--target", str(target))
    assert r.returncode == 0 and f"target {target}: {done}" in r.stdout
    record = ".patchkit-written.json"   # holds each written file's mtime: not part of the tree's bytes
    assert ({k: v for k, v in snapshot(target).items() if k != record}
            == {k: v for k, v in (applied_tree if finish == "apply" else pristine_tree).items() if k != record})


def test_dry_run_writes_nothing(target):
    before = snapshot(target)
    r = run_cli(REPO, "apply", "--dry-run", "--target", str(target))
    assert r.returncode == 0 and "would write" in r.stdout
    assert snapshot(target) == before


def test_corrupted_hunk_fails_cleanly_and_leaves_target_identical(target, repo_copy):
    patch = first_patch_with_hunk(repo_copy)
    lines = patch.read_text().splitlines(keepends=True)
    # Turn the first context line of the first hunk into text that is nowhere in the file.
    hunk = next(i for i, l in enumerate(lines) if l.startswith("@@ "))
    ctx = next(i for i in range(hunk + 1, len(lines)) if lines[i].startswith(" "))
    lines[ctx] = " this context line does not exist upstream\n"
    patch.write_text("".join(lines))
    before = snapshot(target)
    r = run_cli(repo_copy, "apply", "--target", str(target))
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and patch.name in r.stderr and "does not apply" in r.stderr
    assert snapshot(target) == before


def test_locally_modified_file_is_refused_before_any_write(target):
    engine = Engine.from_repo(REPO)
    name = next(n for n in engine.lock.upstreams if engine.series(n).patches)
    victim = engine.series(name).patches[-1].paths[0]
    with open(target / victim, "a") as fh:
        fh.write("# local edit\n")
    before = snapshot(target)
    r = run_cli(REPO, "apply", "--target", str(target))
    assert r.returncode == 1
    msg = r.stderr.strip()
    assert "\n" not in msg and victim in msg and "expected sha256" in msg and "found" in msg
    assert snapshot(target) == before


def _edit_a_patched_file(engine, target: Path) -> str:
    """Append a line to a file the series patches (as a user editing it by hand); its wheel path."""
    name = next(n for n in engine.lock.upstreams if engine.series(n).patches)
    victim = engine.series(name).patches[-1].paths[0]
    with open(target / victim, "a") as fh:
        fh.write("# edited by hand\n")
    return victim


def test_a_hand_edit_of_the_checkouts_own_tree_names_the_command_that_recovers_it(repo_copy, pristine_root):
    """build/site-LINE belongs to the tool: apply and revert refuse the edited file in one line naming it, what was
    expected and found, and the command that rewrites it from the pinned wheel; that command works."""
    site = repo_copy / "build" / f"site-{Engine.from_repo(REPO).lock.line}"
    shutil.copytree(pristine_root, site)          # as `apply` unpacks it (the roots exist: no unpack again)
    assert run_cli(repo_copy, "apply").returncode == 0
    victim = _edit_a_patched_file(Engine.from_repo(repo_copy), site)
    before = snapshot(site)
    for op in ("apply", "revert"):
        r = run_cli(repo_copy, op)
        line = r.stderr.strip()
        assert r.returncode == 1 and "\n" not in line and str(site / victim) in line, r.stderr
        assert "expected sha256" in line and "found" in line and "nothing written" in line, line
        assert line.endswith(f"to rewrite it from the pinned release, discarding the edit: python apply.py {op} "
                             "--discard-edits"), line
        assert snapshot(site) == before
    dry = run_cli(repo_copy, "revert", "--discard-edits", "--dry-run")
    assert dry.returncode == 0 and f"patch {victim}" in dry.stdout and snapshot(site) == before, dry.stdout + dry.stderr
    r = run_cli(repo_copy, "revert", "--discard-edits")
    assert r.returncode == 0 and f"discarding the edit of {victim}" in r.stdout, r.stdout + r.stderr
    assert Engine.from_repo(repo_copy).verify_pristine_tree(site) == []
    assert run_cli(repo_copy, "apply").returncode == 0


def test_a_hand_edit_of_a_users_target_is_kept_unless_discarded_explicitly(target):
    engine = Engine.from_repo(REPO)
    victim = _edit_a_patched_file(engine, target)
    edited = (target / victim).read_bytes()
    before = snapshot(target)
    r = run_cli(REPO, "apply", "--target", str(target))
    line = r.stderr.strip()
    assert r.returncode == 1 and "\n" not in line and snapshot(target) == before, r.stderr
    assert line.endswith(f"your edit is kept; keep a copy of it and run python apply.py apply --target {target} "
                         "--discard-edits to rewrite it from the pinned release"), line
    r = run_cli(REPO, "apply", "--target", str(target), "--discard-edits")
    assert r.returncode == 0 and f"discarding the edit of {victim}" in r.stdout, r.stdout + r.stderr
    assert (target / victim).read_bytes() != edited and engine.status(target).summary == APPLIED


def test_another_release_is_refused_by_version(tmp_path):
    """A site-packages holding the real sglang 0.5.17 wheel's files is not touched."""
    from patchkit.fetch import fetch
    from patchkit.lockfile import Upstream
    from patchkit.pristine import Pristine

    other = Upstream(name="sglang", package="sglang", version="0.5.17",
                     artifact="sglang-0.5.17-cp311-cp311-manylinux_2_34_x86_64.whl",
                     sha256="575e38f5683624ded3b4bb267f637a098e5ed37d13a1d1ff5ea09bd781a04d16", root="sglang")
    site = tmp_path / "site"
    Pristine(fetch(other, log=quiet)).unpack(site, root="sglang")
    before = snapshot(site)
    r = run_cli(REPO, "apply", "--target", str(site))
    assert r.returncode == 1
    assert "expected sglang 0.5.14, found sglang 0.5.17" in r.stderr and r.stderr.count("\n") == 1
    assert snapshot(site) == before


def test_read_only_target_is_refused(target):
    engine = Engine.from_repo(REPO)
    touched = [p for n in engine.lock.upstreams for patch in engine.series(n).patches for p in patch.paths]
    for rel in touched:
        os.chmod(target / rel, 0o444) if (target / rel).exists() else None
        os.chmod((target / rel).parent, 0o555)
    try:
        before = snapshot(target)
        r = run_cli(REPO, "apply", "--target", str(target))
        assert r.returncode == 1 and "read-only" in r.stderr and r.stderr.count("\n") == 1
        assert snapshot(target) == before
    finally:
        for rel in touched:
            os.chmod((target / rel).parent, 0o755)


def test_missing_target_and_file_target(tmp_path):
    r = run_cli(REPO, "apply", "--target", str(tmp_path / "nope"))
    assert r.returncode == 1 and "expected a directory, found nothing there" in r.stderr
    (tmp_path / "f").write_text("x")
    r = run_cli(REPO, "status", "--target", str(tmp_path / "f"))
    assert r.returncode == 1 and "expected a directory, found a file" in r.stderr
    r = run_cli(REPO, "apply", "--target", str(tmp_path))
    assert r.returncode == 1 and "found neither" in r.stderr


def test_malformed_patch_file(target, repo_copy):
    patch = first_patch_with_hunk(repo_copy)
    patch.write_text("Subject: [PATCH] not really a patch\n\njust words\n")
    before = snapshot(target)
    r = run_cli(repo_copy, "apply", "--target", str(target))
    assert r.returncode == 1 and "malformed patch" in r.stderr and patch.name in r.stderr
    assert snapshot(target) == before


def test_unknown_patch_in_series(target, repo_copy):
    series = next((repo_copy / "patches" / "0.5.14").glob("*/series"))
    series.write_text(series.read_text() + "9999-not-here.patch\n")
    r = run_cli(repo_copy, "apply", "--target", str(target))
    assert r.returncode == 1 and "unknown patch 9999-not-here.patch" in r.stderr


def test_unlisted_patch_file_is_refused(repo_copy):
    series = next((repo_copy / "patches" / "0.5.14").glob("*/series"))
    (series.parent / "9999-stray.patch").write_text("x")
    r = run_cli(repo_copy, "check")
    assert r.returncode == 1 and "not listed" in r.stderr


def test_error_mid_apply_rolls_every_file_back(target):
    before = snapshot(target)
    r = run_cli(REPO, "apply", "--target", str(target), env={"PATCHKIT_TEST_FAULT": "raise:1"})
    assert r.returncode == 1 and "target restored" in r.stderr
    assert snapshot(target) == before


@pytest.mark.parametrize("finish", ["apply", "revert"])
def test_killed_mid_apply_is_reported_and_finished(target, finish):
    before = snapshot(target)
    r = run_cli(REPO, "apply", "--target", str(target), env={"PATCHKIT_TEST_FAULT": "kill:1"})
    assert r.returncode == 137
    r = run_cli(REPO, "status", "--target", str(target))
    assert r.returncode == 1 and "interrupted apply" in r.stdout
    r = run_cli(REPO, finish, "--target", str(target))
    assert r.returncode == 0, r.stderr
    r = run_cli(REPO, "status", "--target", str(target))
    assert r.returncode == 0
    assert f"target {target}: {'applied' if finish == 'apply' else 'pristine'}" in r.stdout
    if finish == "revert":
        assert snapshot(target) == before


def test_check_passes_on_the_real_series():
    r = run_cli(REPO, "check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exact, round-trips" in r.stdout


def test_check_catches_a_patch_that_does_not_round_trip(repo_copy):
    patch = first_patch_with_hunk(repo_copy)
    text = patch.read_text()
    patch.write_text(text.replace("\nUpstream-Status:", "\n\nUpstream-Status:", 1))
    r = run_cli(repo_copy, "check")
    assert r.returncode == 1 and "re-export differs" in r.stdout


def test_worktree_then_export_reproduces_the_series(repo_copy):
    from patchkit.gitcmd import git

    engine = Engine.from_repo(repo_copy)
    for name in engine.lock.upstreams:
        series = engine.series(name)
        # every file under the series directory (patches, series, and the export-pr data beside them) and overlay/
        def files():
            return {p.relative_to(repo_copy).as_posix(): p.read_bytes()
                    for top in (series.directory, engine.overlay_root) for p in top.rglob("*") if p.is_file()}

        before = files()
        wt = repo_copy / "wt" / name
        assert run_cli(repo_copy, "worktree", name, "--dir", str(wt)).returncode == 0
        # each overlay (new) file is in the commit of the patch that claims it, as the patch's own change
        commits = git(wt, "rev-list", "--reverse", "pristine..HEAD").stdout.split()
        for commit, patch in zip(commits, series.patches, strict=True):
            touched = git(wt, "diff-tree", "--no-commit-id", "--name-only", "-r", commit).stdout.split()
            assert set(patch.overlay) <= set(touched), (patch.name, touched)
            for rel in patch.overlay:
                assert git(wt, "show", f"{commit}:{rel}", text=False).stdout == series.overlay_bytes(rel), rel
        for rel in series.overlay_owner:       # export writes them back, it does not merely leave them
            (engine.overlay_root / rel).unlink()
        assert run_cli(repo_copy, "export", name, "--dir", str(wt)).returncode == 0
        assert files() == before


def test_pinned_artifact_with_wrong_sha256_is_a_hard_error(tmp_path, monkeypatch):
    from patchkit import fetch as fetch_mod

    up = Engine.from_repo(REPO).lock.upstream("flashinfer")
    good = fetch_mod.fetch(up, log=quiet)
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path))
    bad = fetch_mod.cache_dir() / up.artifact
    data = bytearray(good.read_bytes())
    data[100] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(PatchkitError, match=f"sha256 mismatch .* expected {up.sha256}, found"):
        fetch_mod.fetch(up, log=quiet)


def test_usage_errors_exit_2_and_every_command_has_help():
    assert run_cli(REPO, "frobnicate").returncode == 2
    for cmd in ("apply", "status", "revert", "check", "worktree", "export"):
        r = run_cli(REPO, cmd, "--help")
        assert r.returncode == 0 and "usage" in r.stdout


def test_tree_applied_by_an_older_series_is_refreshed_by_apply(target, repo_copy):
    """A user updates this repo: files written by the previous series version are recognised as ours."""
    patch = first_patch_with_hunk(repo_copy)
    lines = patch.read_text().splitlines(keepends=True)
    added = next(i for i, l in enumerate(lines) if l.startswith("+") and not l.startswith("+++") and l.strip() != "+")
    lines[added] = lines[added].rstrip("\n") + "  # older series\n"
    patch.write_text("".join(lines))
    assert run_cli(repo_copy, "apply", "--target", str(target)).returncode == 0

    r = run_cli(REPO, "status", "--target", str(target))
    assert r.returncode == 1 and "outdated" in r.stdout
    r = run_cli(REPO, "apply", "--target", str(target))
    assert r.returncode == 0, r.stderr
    r = run_cli(REPO, "status", "--target", str(target))
    assert r.returncode == 0 and f"target {target}: applied" in r.stdout
    assert run_cli(REPO, "revert", "--target", str(target)).returncode == 0
    assert Engine.from_repo(REPO).verify_pristine_tree(target) == []


def test_check_reports_reach_trailers_that_fail_on_the_pin(repo_copy):
    """An Unreached-If that matches the pin is a warning on every check; a broken trailer is an error."""
    patch = next(p for s in sorted((repo_copy / "patches" / "0.5.14").glob("*/*.patch")) for p in [s]
                 if "\nUnreached-If: " in p.read_text())
    text = patch.read_text()
    line = next(l for l in text.splitlines() if l.startswith("Unreached-If: "))
    path = line.split(": ", 1)[1].split(" ~ ")[0]
    patch.write_text(text.replace(line, f"Unreached-If: {path} ~ import"))
    release(repo_copy, next_version(repo_copy))      # a changed patch is a new patch-set version (test_patchset.py)
    r = run_cli(repo_copy, "check")
    assert r.returncode == 0 and "not reached on the pin" in r.stdout
    row = next(l for l in r.stdout.splitlines() if patch.name in l)
    assert " warn " in row
    patch.write_text(text.replace(line, f"Unreached-If: {path} ~ ("))
    r = run_cli(repo_copy, "check")
    assert r.returncode == 1 and "invalid regex" in r.stdout
