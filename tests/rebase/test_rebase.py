"""`apply.py rebase` on the real series, carried from the pinned releases to sglang 0.5.17 and
flashinfer-python 0.6.15.post1 (both fetched from the index and sha256-verified, cached after the first run).

Every run works on a scratch copy of pin.lock, patches/ and overlay/; the checkout itself is never written.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import PATCH_LINE
from tests.engine_fixtures import snapshot
from tests.patchset_fixtures import next_version, release
from patchkit.conditions import conditions_of, unreached_reasons
from patchkit.engine import Engine
from patchkit.patchfile import parse_patch
from patchkit.series import load_series
from patchkit.state import APPLIED
from patchkit.worktree import roundtrip_differences
from tests.rebase_cases import (NEW_FLASHINFER_WHEEL, NEW_SGLANG_SHA256, NEW_SGLANG_WHEEL, TO, expectation, repo_copy,
                          resolve_scripted)

REBASE_ARGS = ["rebase", "--to", TO["sglang"], "--to", f"flashinfer={TO['flashinfer']}"]


def cli(repo: Path, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(repo / "apply.py"), *args], cwd=repo, capture_output=True, text=True,
                          env={"PATCHKIT_LINE": PATCH_LINE, **os.environ, **(env or {})}, timeout=600)


def data_snapshot(repo: Path) -> dict[str, str]:
    snap = {"pin.lock": snapshot(repo)["pin.lock"]}
    for d in ("patches", "overlay"):
        snap.update({f"{d}/{k}": v for k, v in snapshot(repo / d).items() if "__pycache__" not in k})
    return snap


def series_patches(repo: Path):
    lock = tomllib.loads((repo / "pin.lock").read_text())
    for name, up in lock["line"]["0.5.14"]["upstream"].items():
        for p in load_series(name, repo / "patches" / "0.5.14", repo / "overlay" / "0.5.14", up["root"]).patches:
            yield name, p


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    repo = repo_copy(tmp_path_factory.mktemp("dry") / "repo")
    before = data_snapshot(repo)
    report = repo / "report.json"
    proc = cli(repo, *REBASE_ARGS, "--dry-run", "--json", str(report))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return repo, before, json.loads(report.read_text()), proc


def test_dry_run_classifies_every_patch_as_patch_map_predicts(dry_run):
    repo, before, report, proc = dry_run
    assert report["status"] == "dry-run"
    results = {(e["name"], r["patch"]): r for e in report["upstreams"] for r in e["results"]}
    present = list(series_patches(repo))
    assert present, "the series holds no patch"
    for upstream, patch in present:
        want = expectation(upstream, patch)
        got = results[(upstream, patch.name)]
        assert got["result"] == want.result, f"{want.label} ({patch.name}): {got}"
        assert bool(got["unreached"]) == want.unreached, f"{want.label} ({patch.name}): reach {got['unreached']}"
        if got["result"] == "conflict":
            assert got["conflicted"] and any("hunk" in d or "markers" in d for d in got["detail"]), got
        if got["result"] == "offset":
            assert any("offset" in d or "moved" in d or "3-way" in d for d in got["detail"]), got
    # the report table names every patch and its result; progress went to stderr
    for upstream, patch in present:
        assert patch.name in proc.stdout
    assert "rebase: [sglang" in proc.stderr and "sha256 verified" in proc.stderr
    # the new pins were learnt from the index, of the same kind as the pinned artifacts
    pins = {e["name"]: e["pin"] for e in report["upstreams"]}
    assert pins["sglang"]["artifact"] == NEW_SGLANG_WHEEL and pins["sglang"]["sha256"] == NEW_SGLANG_SHA256
    assert pins["sglang"]["tag"] == "v0.5.17"
    assert pins["flashinfer"]["artifact"] == NEW_FLASHINFER_WHEEL and len(pins["flashinfer"]["sha256"]) == 64
    # a dry run writes nothing
    assert data_snapshot(repo) == before
    assert not (repo / "build" / "rebase").exists()


def test_overlay_follows_a_moved_module(dry_run):
    """An overlay file claimed by a patch whose touched file moved is re-targeted alongside it."""
    repo, _, report, _ = dry_run
    moved_any = False
    for e in report["upstreams"]:
        for r in e["results"]:
            patch = parse_patch(repo / "patches" / "0.5.14" / e["name"] / r["patch"])
            for old, new in r["overlay_moves"].items():
                moved_any = True
                assert old in patch.overlay
                assert old.rsplit("/", 1)[1] == new.rsplit("/", 1)[1]
            # P1's kernel sits next to the dispatcher it is wired into, which 0.5.16 moved to sglang/kernels/ops/attention/
            for rel in patch.overlay:
                if rel.startswith("sglang/srt/layers/attention/") and "sglang/srt/layers/attention/flash_mla_sm120.py" in patch.paths:
                    assert r["overlay_moves"][rel] == "sglang/kernels/ops/attention/" + rel.rsplit("/", 1)[1]
            # an overlay file whose patch's files stayed put stays put (P4's kernel beside indexer.py)
            if not any(d.startswith("moved ") for d in r["detail"]):
                assert r["overlay_moves"] == {}, r
    # P1's overlay kernel sits beside flash_mla_sm120.py, which 0.5.16 moved: the check above must have run
    assert moved_any, "no overlay file was re-targeted, but P1's kernel sits beside a module that moved"


def test_reach_trailers_hold_on_the_pinned_release(patched_root):
    """A patch's Reached-If / Unreached-If must say 'reached' where it was written (so the rebase flag means something)."""
    from tests.conftest import REPO

    seen = 0
    for upstream, patch in series_patches(REPO):
        conds = conditions_of(patch.trailers)
        seen += len(conds)
        read = lambda rel: (patched_root / rel).read_bytes() if (patched_root / rel).is_file() else None
        assert unreached_reasons(conds, read) == [], f"{patch.name}: its reach conditions fail on the pin"
    assert seen, "no patch carries a Reached-If / Unreached-If trailer (P1, P3, P4, P7 do)"


def _stop_at_conflict(repo: Path) -> dict:
    report = repo / "report.json"
    proc = cli(repo, *REBASE_ARGS, "--json", str(report))
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert "rebase --continue" in proc.stdout
    data = json.loads(report.read_text())
    assert data["status"] == "stopped"
    return data


@pytest.mark.slow   # about two minutes: two real rebases (stop, abort; stop, resolve, continue) and a refresh
def test_conflict_resolve_continue_refreshes_series_and_abort_restores(tmp_path):
    repo = repo_copy(tmp_path / "repo")
    before = data_snapshot(repo)
    original_lock = (repo / "pin.lock").read_text()
    subjects = {p.name: p.subject for _, p in series_patches(repo)}
    repo_copy(tmp_path / "orig")

    # 1. stop at the first conflict, then --abort: everything byte-identical, work dir gone
    _stop_at_conflict(repo)
    assert data_snapshot(repo) == before, "a stopped rebase must not have written patches/, overlay/ or pin.lock"
    assert (repo / "build" / "rebase" / "state.json").exists()
    refused = cli(repo, *REBASE_ARGS)
    assert refused.returncode == 1 and "already in progress" in refused.stderr
    still = cli(repo, "rebase", "--continue")
    assert still.returncode == 1 and "markers still in" in still.stderr
    proc = cli(repo, "rebase", "--abort")
    assert proc.returncode == 0, proc.stderr
    assert data_snapshot(repo) == before
    assert not (repo / "build" / "rebase").exists()

    # 2. again; resolve every conflict with a scripted edit and continue until the series is refreshed
    _stop_at_conflict(repo)
    work = repo / "build" / "rebase" / "repos"
    resolved = []
    for attempt in range(8):
        stopped = json.loads((repo / "build" / "rebase" / "state.json").read_text())["stopped"]
        for f in stopped["files"]:
            resolve_scripted(work / stopped["upstream"] / f)
        if attempt == 1:   # the second conflict: commit the resolution by hand, as a user editing the message would
            wt = work / stopped["upstream"]
            env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_COMMITTER_NAME": "me",
                   "GIT_COMMITTER_EMAIL": "me@example.invalid", "GIT_AUTHOR_NAME": "me",
                   "GIT_AUTHOR_EMAIL": "me@example.invalid"}
            subprocess.run(["git", "add", "-A"], cwd=wt, check=True, env=env)
            subprocess.run(["git", "commit", "-q", "--no-edit"], cwd=wt, check=True, env=env)
        resolved.append(stopped)
        proc = cli(repo, "rebase", "--continue", "--json", str(repo / "report.json"))
        if proc.returncode == 0:
            break
        assert proc.returncode == 1 and "rebase --continue" in proc.stdout, proc.stderr + proc.stdout
    assert proc.returncode == 0, proc.stderr + proc.stdout
    final = json.loads((repo / "report.json").read_text())
    assert final["status"] == "done" and not (repo / "build" / "rebase").exists()
    outcomes = {r["patch"]: r["result"] for e in final["upstreams"] for r in e["results"]}
    assert sum(1 for r in outcomes.values() if r == "resolved") == len(resolved)

    # pin.lock: only version, artifact, sha256 and tag changed, to what the index publishes
    lock = tomllib.loads((repo / "pin.lock").read_text())
    assert lock["line"]["0.5.14"]["upstream"]["sglang"]["version"] == "0.5.17"
    assert lock["line"]["0.5.14"]["upstream"]["sglang"]["artifact"] == NEW_SGLANG_WHEEL
    assert lock["line"]["0.5.14"]["upstream"]["sglang"]["sha256"] == NEW_SGLANG_SHA256
    assert lock["line"]["0.5.14"]["upstream"]["flashinfer"]["version"] == "0.6.15.post1"
    changed = [(a, b) for a, b in zip(original_lock.splitlines(), (repo / "pin.lock").read_text().splitlines()) if a != b]
    assert {a.split("=")[0].strip() for a, _ in changed} <= {"version", "artifact", "sha256", "tag"}

    # already-upstream patches are gone from the refreshed series; the rest are all there, in order
    kept = [r["patch"] for e in final["upstreams"] for r in e["results"]
            if r["result"] not in ("already upstream", "dropped", "superseded")]
    refreshed = list(series_patches(repo))
    assert [p.subject for _, p in refreshed] == [subjects[n] for n in kept]
    upstreamed = [r["patch"] for e in final["upstreams"] for r in e["results"] if r["result"] == "already upstream"]
    assert all(n not in [p.name for _, p in refreshed] or subjects[n] not in [p.subject for _, p in refreshed]
               for n in upstreamed)

    # every refreshed patch keeps its author and date, whichever way its conflict was resolved
    for _, p in refreshed:
        head = p.path.read_text().split("\nSubject:", 1)[0]
        original = next(q for _, q in series_patches(tmp_path / "orig") if q.subject == p.subject)
        assert head.split("\n", 1)[1] == original.path.read_text().split("\nSubject:", 1)[0].split("\n", 1)[1]
        # trailers are kept; those naming a wheel path follow its move (same file name)
        norm = lambda ts: [(k, v if k not in ("Overlay", "Reached-If", "Unreached-If") else v.split(" ~ ")[0].rsplit("/", 1)[1]
                            + v[len(v.split(" ~ ")[0]):]) for k, v in ts]
        assert norm(p.trailers) == norm(original.trailers)

    # overlay files moved with their modules: file and Overlay: trailer both at the new path
    for e in final["upstreams"]:
        for r in e["results"]:
            for old, new in r["overlay_moves"].items():
                assert not (repo / "overlay" / "0.5.14" / old).exists() and (repo / "overlay" / "0.5.14" / new).is_file()
                assert any(new in p.overlay for _, p in refreshed)

    # the refreshed series applies to the new pristine release and round-trips byte for byte
    engine = Engine.from_repo(repo)
    for name, up in engine.lock.upstreams.items():
        series = engine.series(name)
        assert roundtrip_differences(series, engine.pristine(name), up.root, f"{up.package} {up.version}") == []
        for rel in series.overlay_owner:
            assert (repo / "overlay" / "0.5.14" / rel).is_file()
    site = tmp_path / "site"
    for name, up in engine.lock.upstreams.items():
        engine.pristine(name).unpack(site, root=up.root)
    state = engine.apply(site, log=lambda *a: None)
    assert state.summary == APPLIED
    release(repo, next_version(repo))      # a rebased series (without --new-line) is a new version of its line
    check = cli(repo, "check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_tampered_download_is_refused_before_anything_is_written(tmp_path):
    repo = repo_copy(tmp_path / "repo")
    before = data_snapshot(repo)
    cache = tmp_path / "cache"
    (cache / "artifacts").mkdir(parents=True)
    (cache / "artifacts" / NEW_FLASHINFER_WHEEL).write_bytes(b"not the published wheel")
    # --force: sglang 0.5.14 pins flashinfer 0.6.12, and this test is about the download, not that refusal
    proc = cli(repo, "rebase", "--to", f"flashinfer={TO['flashinfer']}", "--force", env={"PATCHKIT_CACHE": str(cache)})
    assert proc.returncode == 1
    assert "sha256 mismatch" in proc.stderr and NEW_FLASHINFER_WHEEL in proc.stderr
    assert data_snapshot(repo) == before and not (repo / "build" / "rebase").exists()


def _make_patch(tmp: Path, pristine_file: bytes, rel: str, edit, message: str) -> Path:
    """A format-patch file made with git from a real release file, as the series' authors make theirs."""
    from patchkit.gitcmd import git, init_repo
    from patchkit.worktree import FORMAT_PATCH_ARGS

    wt = init_repo(tmp / "author")
    (wt / rel).parent.mkdir(parents=True)
    (wt / rel).write_bytes(pristine_file)
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "pristine")
    (wt / rel).write_bytes(edit(pristine_file))
    git(wt, "commit", "-qam", message)
    out = git(wt, *FORMAT_PATCH_ARGS, "-1", "HEAD", "-o", str(tmp / "out")).stdout.split()
    return Path(out[0])


def test_a_patch_on_a_moved_module_is_refreshed_at_the_new_path_with_its_overlay(tmp_path):
    """0.5.16 moved flash_mla_sm120_triton.py unchanged to sglang/kernels/ops/attention/: a patch on it applies
    there (offset: moved), and the overlay module it claims, its Overlay: and Reached-If: trailers move too."""
    from tests.conftest import pristine_wheel

    repo = repo_copy(tmp_path / "repo")
    old = "sglang/srt/layers/attention/flash_mla_sm120_triton.py"
    helper = "sglang/srt/layers/attention/flash_mla_sm120_helper.py"
    patch = _make_patch(
        tmp_path, pristine_wheel("sglang").read(old), old,
        lambda b: b.replace(b"Grid: (B, H)", b"Grid: (B, H); see flash_mla_sm120_helper", 1),
        "test: a docstring note on the moved kernel\n\nbody\n\nUpstream-Status: Pending\nEvidence: none\n"
        f"Test: tests/rebase/test_rebase.py\nOverlay: {helper}\nReached-If: {old} ~ _tiled_sparse_decode_kernel\n")
    series_dir = repo / "patches" / "0.5.14" / "sglang"
    for f in series_dir.glob("*.patch"):
        f.unlink()
    (series_dir / patch.name).write_bytes(patch.read_bytes())
    (series_dir / "series").write_text(patch.name + "\n")
    for f in (repo / "overlay" / "0.5.14" / "sglang").rglob("*"):
        if f.is_file():
            f.unlink()
    (repo / "overlay" / "0.5.14" / helper).parent.mkdir(parents=True, exist_ok=True)
    (repo / "overlay" / "0.5.14" / helper).write_text("HELPER = 1\n")

    proc = cli(repo, "rebase", "--to", "0.5.17", "--json", str(repo / "report.json"))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    (result,) = json.loads((repo / "report.json").read_text())["upstreams"][0]["results"]
    new = "sglang/kernels/ops/attention/flash_mla_sm120_triton.py"
    new_helper = "sglang/kernels/ops/attention/flash_mla_sm120_helper.py"
    assert result["result"] == "offset" and f"moved {old} -> {new}" in result["detail"]
    assert result["overlay_moves"] == {helper: new_helper} and result["unreached"] == []
    (refreshed,) = [p for name, p in series_patches(repo) if name == "sglang"]
    assert refreshed.paths == [new]
    assert refreshed.overlay == [new_helper] and (repo / "overlay" / "0.5.14" / new_helper).read_text() == "HELPER = 1\n"
    assert not (repo / "overlay" / "0.5.14" / helper).exists()
    assert ("Reached-If", f"{new} ~ _tiled_sparse_decode_kernel") in refreshed.trailers
    # flashinfer was not named: it follows what sglang 0.5.17 requires (issue 23)
    assert tomllib.loads((repo / "pin.lock").read_text())["line"]["0.5.14"]["upstream"]["flashinfer"]["version"] == "0.6.15.post1"
    engine = Engine.from_repo(repo)
    up = engine.lock.upstream("sglang")
    assert roundtrip_differences(engine.series("sglang"), engine.pristine("sglang"), up.root, "sglang 0.5.17") == []
    assert b"see flash_mla_sm120_helper" in engine.chain("sglang").files[new].final
