"""`apply.py export-pr` on git checkouts in upstream repo layout built from the real pinned release files
(one commit, tagged as the release: python/sglang/... for SGLang, flashinfer/... for FlashInfer)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from patchkit.pr.body import OVERLAY_TRAILERS, markdown_section
from patchkit.series import load_series
from tests.rebase_cases import repo_copy

from tests.conftest import LOCK, pristine_wheel


def git(repo: Path, *args, check=True, input=None) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@example.invalid",
           "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@example.invalid"}
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env, input=input)
    if check:
        assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def cli(repo: Path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run([sys.executable, str(repo / "apply.py"), *args], cwd=repo, capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory) -> dict[str, Path]:
    """upstream name -> git repo holding the pinned release in repo layout, one commit tagged as the release."""
    out = {}
    for name, up in LOCK.upstreams.items():
        repo = tmp_path_factory.mktemp(f"upstream-{name}")
        git(repo, "init", "-q", "-b", "main")
        wheel = pristine_wheel(name)
        prefix = repo / up.repo_prefix if up.repo_prefix else repo
        wheel.unpack(prefix, root=up.root)
        shutil.rmtree(prefix / wheel.dist_info())
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"Release {up.tag}")
        git(repo, "tag", up.tag)
        out[name] = repo
    return out


@pytest.fixture(scope="module")
def overlay_repo(tmp_path_factory) -> Path:
    return repo_copy(tmp_path_factory.mktemp("export") / "repo")


def all_patches(repo: Path):
    lock = tomllib.loads((repo / "pin.lock").read_text())
    for name, up in lock["upstream"].items():
        series = load_series(name, repo / "patches", repo / "overlay", up["root"])
        for p in series.patches:
            yield name, up, p


def test_every_patch_exports_as_one_commit_on_the_release_tag(checkouts, overlay_repo, patched_root):
    patches = list(all_patches(overlay_repo))
    assert patches, "the series holds no patch"
    for name, up, patch in patches:
        if patch.trailer("Depends-On"):
            continue  # stacked on its dependency's branch: tests/test_export_pr_depends.py
        repo, prefix, tag = checkouts[name], up.get("repo_prefix", ""), up["tag"]
        head_before = git(repo, "rev-parse", "HEAD").strip()
        branch = f"pr/{name}-{patch.name[:4]}"
        body_file = overlay_repo / "build" / "pr" / f"{name}-{patch.name}.md"
        proc = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo), "--branch", branch,
                   "--body", str(body_file))
        assert proc.returncode == 0, proc.stderr + proc.stdout
        # the checkout itself is untouched: same HEAD, clean
        assert git(repo, "rev-parse", "HEAD").strip() == head_before
        assert git(repo, "status", "--porcelain") == ""
        # one commit on the tag, touching exactly the patch's files and its overlay files, in repo layout
        tag_commit = git(repo, "rev-parse", f"{tag}^{{commit}}").strip()
        assert git(repo, "rev-list", "--parents", "-n", "1", branch).split()[1:] == [tag_commit]
        touched = set(git(repo, "diff", "--name-only", tag, branch).split())
        assert touched == {prefix + p for p in patch.paths} | {prefix + o for o in patch.overlay}
        for o in patch.overlay:
            assert git(repo, "show", f"{branch}:{prefix}{o}") == (overlay_repo / "overlay" / o).read_text()
        # it applies onto the tag as a mail patch (what a reviewer would `git am`)
        mail = git(repo, "format-patch", "-1", "--stdout", branch)
        git(repo, "apply", "--check", "-", input=mail)
        # the change is this patch's alone, even where an earlier patch of the series touches the same file
        added = lambda diff: {l[1:] for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")}
        mine = added(patch.path.read_text().split("\ndiff --git ", 1)[1])
        for rel in set(patch.paths):
            assert added(git(repo, "diff", tag, branch, "--", prefix + rel)) <= mine, rel
        # files only this patch touches end up exactly as the engine's fully patched tree has them
        others = {q for n, _, p in patches if p is not patch and n == name for q in p.paths}
        for rel in set(patch.paths) - others:
            assert git(repo, "show", f"{branch}:{prefix}{rel}") == (patched_root / rel).read_text(), rel
        # message: the patch's subject and body, without the overlay's own trailers; the patch's author
        message = git(repo, "log", "-1", "--format=%B", branch)
        assert message.startswith(patch.subject + "\n\n") and patch.body.strip() in message
        assert not any(line.split(":")[0].lower() in OVERLAY_TRAILERS for line in message.splitlines() if ": " in line)
        author = git(repo, "log", "-1", "--format=%an <%ae>", branch).strip()
        assert author in patch.path.read_text()
        # the PR body: motivation, change, evidence (named, with the BENCHMARKS.md section if it exists), test plan
        body = body_file.read_text()
        assert git(repo, "config", f"branch.{branch}.description").rstrip("\n") == body.rstrip("\n")
        for heading in ("## Motivation", "## Change", "## Evidence", "## Test plan"):
            assert heading in body
        assert patch.trailer("Evidence"), f"{patch.name} names no evidence"
        for ev in patch.trailer("Evidence"):
            assert ev in body
            target, _, anchor = ev.partition("#")
            if anchor and (overlay_repo / target).is_file():
                section = markdown_section((overlay_repo / target).read_text(), anchor)
                if section:
                    assert "#" + section.splitlines()[0] in body and section.splitlines()[-1] in body
        for t in patch.trailer("Test"):
            assert t in body
        for rel in touched:
            assert rel in body


def test_refuses_dirty_checkout(checkouts, overlay_repo):
    name, up, patch = next(all_patches(overlay_repo))
    repo = checkouts[name]
    victim = repo / (up.get("repo_prefix", "") + patch.paths[0])
    original = victim.read_bytes()
    victim.write_bytes(original + b"\n# local edit\n")
    try:
        proc = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo), "--branch", "pr/dirty")
        assert proc.returncode == 1
        assert "expected a clean checkout" in proc.stderr and "nothing" not in proc.stdout
        assert git(repo, "branch", "--list", "pr/dirty") == ""
    finally:
        victim.write_bytes(original)


def test_refuses_wrong_version(checkouts, overlay_repo):
    name, up, patch = next(all_patches(overlay_repo))
    repo = checkouts[name]
    rel = up.get("repo_prefix", "") + patch.paths[0]
    git(repo, "checkout", "-q", "-b", "newer")
    (repo / rel).write_text((repo / rel).read_text() + "\n# a later release\n")
    git(repo, "commit", "-q", "-am", "a later release")
    try:
        proc = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo), "--branch", "pr/wrong")
        assert proc.returncode == 1
        assert f"expected HEAD at {up['tag']}" in proc.stderr
        # without the tag to go by, the touched files' bytes still give the wrong version away
        git(repo, "tag", "-d", up["tag"])
        proc = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo), "--branch", "pr/wrong")
        assert proc.returncode == 1 and "not the pinned release" in proc.stderr
        assert git(repo, "branch", "--list", "pr/wrong") == ""
    finally:
        git(repo, "checkout", "-q", "main")
        git(repo, "tag", "-f", up["tag"], "main")
        git(repo, "branch", "-q", "-D", "newer")


def test_refuses_unknown_or_ambiguous_patch(checkouts, overlay_repo):
    name = next(iter(checkouts))
    proc = cli(overlay_repo, "export-pr", "no-such-patch", "--repo", str(checkouts[name]))
    assert proc.returncode == 1 and "expected exactly one patch matching 'no-such-patch', found none" in proc.stderr


def test_evidence_anchor_finds_its_markdown_section():
    doc = "# Benchmarks\n\n## MMA sparse decode (sm_120)\n\n| B | us |\n|---|---|\n| 1 | 12.5 |\n\n### detail\nx\n\n## Indexer\ny\n"
    section = markdown_section(doc, "mma-sparse-decode-sm_120")
    assert section.startswith("## MMA sparse decode") and "12.5" in section and "### detail" in section
    assert "Indexer" not in section
    assert markdown_section(doc, "indexer") == "## Indexer\ny"
    assert markdown_section('<a id="p4"></a>\n## Indexer\ny\n', "p4") == "## Indexer\ny"
    assert markdown_section(doc, "nothing-here") is None
