"""The attestation manifest: apply writes it into the target, revert removes it, status and doctor read it back,
and the patched sglang (the last sglang patch, downstream only) logs it as one line at server start-up."""
from __future__ import annotations

import ast
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.upstream import extract_functions
from patchkit import PatchkitError, attestation
from patchkit.engine import Engine
from patchkit.hashing import sha256_file
from patchkit.patchfile import parse_patch
from patchkit.pr.export import status_gate
from patchkit.series import read_series_file
from serving import doctor
from tests.engine_fixtures import REPO, copy_repo_data, snapshot
from tests.patchset_fixtures import next_version, release

ENGINE_PY = "sglang/srt/entrypoints/engine.py"
quiet = lambda *a, **k: None


def cli(repo: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(repo / "apply.py"), *args], capture_output=True, text=True,
                          env={**os.environ})


@pytest.fixture
def target(pristine_root, tmp_path) -> Path:
    site = tmp_path / "site"
    shutil.copytree(pristine_root, site)
    return site


def test_apply_writes_the_manifest_revert_removes_it_and_the_tree_is_as_before(target):
    engine = Engine.from_repo(REPO)
    before = snapshot(target)
    engine.apply(target, log=quiet)
    data = json.loads((target / attestation.MANIFEST).read_text())
    ident = engine.patch_set()
    assert (data["line"], data["version"], data["series_digest"]) == (ident.line, ident.version, ident.digest)
    assert data["applied_to"] == [up.label for up in engine.lock.upstreams.values()]
    listed = {f["path"]: f["sha256"] for f in data["files"]}
    for name in engine.lock.upstreams:
        for p in engine.series(name).patches:
            assert listed.pop(f"patches/0.5.14/{name}/{p.name}") == sha256_file(p.path)
        assert listed.pop(f"patches/0.5.14/{name}/series") == sha256_file(REPO / "patches" / "0.5.14" / name / "series")
    assert listed and all(path.startswith("overlay/0.5.14/") and sha256_file(REPO / path) == sha for path, sha in listed.items())
    assert attestation.read(target) == data
    mtime = (target / attestation.MANIFEST).stat().st_mtime_ns
    engine.apply(target, log=quiet)                  # applying twice: the manifest is not rewritten
    assert (target / attestation.MANIFEST).stat().st_mtime_ns == mtime
    engine.revert(target, log=quiet)
    assert not (target / attestation.MANIFEST).exists()
    assert snapshot(target) == before


def test_status_and_doctor_read_the_manifest_back(target, tmp_path):
    r = cli(REPO, "status", "--target", str(target))
    assert "attestation: none" in r.stdout
    assert cli(REPO, "apply", "--target", str(target)).returncode == 0
    ident = Engine.from_repo(REPO).patch_set()
    said = f"attestation: line {ident.line}, version {ident.version}, series digest {ident.digest[:16]} (this patch set)"
    r = cli(REPO, "status", "--target", str(target))
    assert r.returncode == 0 and said in r.stdout, r.stdout
    summary, lines = doctor.patch_status(target, Engine.from_repo(REPO))
    assert summary == "applied" and said in lines

    # another version of the set (one patch's message changed, released as the next version): the tree is told apart
    repo = copy_repo_data(tmp_path / "repo")
    patch = repo / "patches" / "0.5.14" / "sglang" / read_series_file(repo / "patches" / "0.5.14" / "sglang")[0]
    patch.write_text(patch.read_text().replace("\n\n", "\n\nA changed word.\n\n", 1))
    new = next_version(repo)
    release(repo, new)
    r = cli(repo, "status", "--target", str(target))
    assert f"version {ident.version}" in r.stdout and f"(NOT this patch set: line 0.5.14, version {new}" in r.stdout
    assert cli(repo, "apply", "--target", str(target)).returncode == 0       # the bytes are the same: apply re-attests
    assert attestation.read(target)["version"] == new
    assert "(this patch set)" in cli(repo, "status", "--target", str(target)).stdout


def test_a_link_at_the_manifest_name_is_refused_before_any_write(target, tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    (target / attestation.MANIFEST).symlink_to(victim)
    before = snapshot(target)
    r = cli(REPO, "apply", "--target", str(target))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "found a symlink" in r.stderr, r.stderr
    assert snapshot(target) == before and victim.read_text() == "{}"


def test_a_malformed_manifest_is_reported_and_replaced_by_apply(target):
    (target / attestation.MANIFEST).write_text('{"format": 1, "line": "0.5.14"}')
    with pytest.raises(PatchkitError, match="expected 'line' .* and 'version'|expected 'series_digest'"):
        attestation.read(target)
    assert "attestation: unreadable" in cli(REPO, "status", "--target", str(target)).stdout
    assert cli(REPO, "apply", "--target", str(target)).returncode == 0
    assert attestation.read(target)["series_digest"] == Engine.from_repo(REPO).patch_set().digest


def test_a_deeply_nested_manifest_is_one_unreadable_line_not_a_traceback(target):
    """Read through TargetFiles (jsonio): bounded depth, so json.loads never recurses out of the stack."""
    (target / attestation.MANIFEST).write_text("[" * 200_000)
    with pytest.raises(PatchkitError, match="expected JSON nested at most"):
        attestation.read(target)
    r = cli(REPO, "status", "--target", str(target))
    assert "attestation: unreadable:" in r.stdout and "Traceback" not in r.stderr, r.stderr
    assert cli(REPO, "apply", "--target", str(target)).returncode == 0      # ours, malformed: replaced
    assert attestation.read(target)["series_digest"] == Engine.from_repo(REPO).patch_set().digest


# -- the server's start-up line (the last sglang patch) ------------------------------------------------------

def attestation_patch():
    directory = REPO / "patches" / "0.5.14" / "sglang"
    return parse_patch(directory / read_series_file(directory)[-1])


def test_the_attestation_patch_is_last_downstream_only_and_touches_no_other_patchs_file():
    patch = attestation_patch()
    # export-pr must never send it upstream: it is marked Inappropriate (patchkit/pr refuses those)
    assert patch.trailer("Upstream-Status") == ["Inappropriate [downstream attestation]"]
    for force in (False, True):
        with pytest.raises(PatchkitError, match="not meant for upstream, never exported"):
            status_gate(patch, force)
    assert patch.paths == [ENGINE_PY]
    others = {p for n in read_series_file(REPO / "patches" / "0.5.14" / "sglang")[:-1]
              for p in parse_patch(REPO / "patches" / "0.5.14" / "sglang" / n).paths}
    assert ENGINE_PY not in others


def start_up_line(tree: Path, caplog) -> str:
    """Run the patched engine.py's own function, compiled out of the tree, as the server's main process does."""
    source = tree / ENGINE_PY
    ns = extract_functions(source, ["PATCH_SET_MANIFEST", "log_patch_set_attestation"],
                           {"os": os, "logger": logging.getLogger("sglang.srt.entrypoints.engine"),
                            "__file__": str(source)})
    with caplog.at_level(logging.INFO, logger="sglang.srt.entrypoints.engine"):
        returned = ns["log_patch_set_attestation"]()
    logged = [r.getMessage() for r in caplog.records if r.name == "sglang.srt.entrypoints.engine"]
    assert logged == [returned]
    return returned


def test_the_patched_server_logs_line_version_and_digest_at_start_up(patched_root, pristine_root, caplog):
    ident = Engine.from_repo(REPO).patch_set()
    line = start_up_line(patched_root, caplog)
    assert line == (f"patch set: line {ident.line}, version {ident.version}, series digest {ident.digest} "
                    f"({patched_root / attestation.MANIFEST})")
    # it runs at start-up: _launch_subprocesses calls it right after logging the server arguments
    tree = ast.parse((patched_root / ENGINE_PY).read_text())
    launch = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_launch_subprocesses")
    calls = [ast.unparse(s) for s in launch.body if isinstance(s, ast.Expr)]
    assert "log_patch_set_attestation()" in calls
    assert calls[calls.index("log_patch_set_attestation()") - 1] == "logger.info(f'server_args={server_args!r}')"
    # the pinned release has no such line
    with pytest.raises(KeyError, match="log_patch_set_attestation"):
        start_up_line(pristine_root, caplog)


def test_a_tree_without_a_manifest_says_so_in_its_one_line(patched_root, tmp_path, caplog):
    tree = tmp_path / "site"
    (tree / ENGINE_PY).parent.mkdir(parents=True)
    shutil.copy2(patched_root / ENGINE_PY, tree / ENGINE_PY)
    line = start_up_line(tree, caplog)
    assert line.startswith(f"patch set: no readable attestation at {tree / attestation.MANIFEST} (FileNotFoundError")


def test_a_manifest_of_another_version_with_the_same_digest_is_not_this_patch_set(tmp_path, monkeypatch):
    """status and doctor said "(this patch set)" when only the digest matched: a manifest naming another version
    (the same files, released again under a new version) is not the set this repository holds."""
    from tests.fault_fixtures import cli as demo_cli, demo_repo, demo_target

    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    assert demo_cli(repo, "apply", "--target", str(site), env=env).returncode == 0
    manifest = site / attestation.MANIFEST
    data = json.loads(manifest.read_text())
    data["version"] = "0.0.1"               # what an earlier release of these same files attested
    manifest.write_text(json.dumps(data))
    status = demo_cli(repo, "status", "--target", str(site), env=env)
    assert "attestation: line 1.0, version 0.0.1" in status.stdout and "(NOT this patch set: " in status.stdout \
        and "(this patch set)" not in status.stdout, status.stdout
    monkeypatch.setenv("PATCHKIT_CACHE", env["PATCHKIT_CACHE"])
    _, lines = doctor.patch_status(site, Engine.from_repo(repo, line="1.0"))
    assert any("version 0.0.1" in l and "(NOT this patch set: " in l for l in lines), lines
    assert demo_cli(repo, "apply", "--target", str(site), env=env).returncode == 0     # apply re-attests it
    assert "(this patch set)" in demo_cli(repo, "status", "--target", str(site), env=env).stdout
