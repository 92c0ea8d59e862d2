"""`apply.py export-pr` of the FlashInfer patches (0.5.23 line, FlashInfer 0.7.2) as FlashInfer's reviewers read them.

The checkout is what `apply.py wheel-checkout flashinfer` builds from the pinned wheel (the wheel's files at
the repository's layout, one commit tagged v0.7.2), plus a PR template of our own wording with the sections of
FlashInfer's `.github/pull_request_template.md` in its order (Description, Related Issues, a checklist with a
pre-commit sub-section of checkboxes, Tests with checkboxes, Reviewer Notes); upstream's file is not copied.

The test command the body prints is run as printed (pytest on the file's repository path, the checkout on the
import path as an installed FlashInfer would be): on the exported branch it collects the tests and passes; on
the release with only the test file added it fails. P6's test needs a CUDA version: a fake `nvcc` answers
`--version` through CUDA_HOME (FlashInfer's get_cuda_path reads it first).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.pr.export import default_branch
from tests.pr.test_export_pr import IDENTITY, _tree_of, body_of, cli, delete_branches, git, named, pr_data
from tests.rebase_cases import repo_copy

LINE = "0.5.23"
TEMPLATE = """<!-- a thank-you line -->

## 📌 Description

<!-- what the PR does and why -->

## 🔍 Related Issues

<!-- issues this relates to -->

## 🚀 Pull Request Checklist

A few things before review.

### ✅ Pre-commit Checks

- [ ] Hooks installed.
- [ ] Hooks run on every file.

## 🧪 Tests

- [ ] Tests added or updated.
- [ ] Tests pass.

## Reviewer Notes

<!-- anything for the reviewers -->
"""
HEADINGS = ["## 📌 Description", "## 🔍 Related Issues", "## 🚀 Pull Request Checklist", "### ✅ Pre-commit Checks",
            "## 🧪 Tests", "## Reviewer Notes"]
FAKE_NVCC = "#!/bin/sh\necho 'Cuda compilation tools, release 12.9, V12.9.86'\n"


@pytest.fixture(scope="module")
def overlay_repo(tmp_path_factory) -> Path:
    return repo_copy(tmp_path_factory.mktemp("export-fi") / "repo")


@pytest.fixture(scope="module")
def flashinfer_checkout(overlay_repo, tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("fi") / "flashinfer"
    proc = cli(overlay_repo, "wheel-checkout", "flashinfer", "--dir", str(repo), "--line", LINE)
    assert proc.returncode == 0, proc.stderr
    (repo / ".github").mkdir()
    (repo / ".github/pull_request_template.md").write_text(TEMPLATE, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a PR template")
    git(repo, "config", "user.name", IDENTITY[0])
    git(repo, "config", "user.email", IDENTITY[1])
    return repo


def section(body: str, heading: str) -> str:
    return body.split(heading + "\n", 1)[1].split("\n#", 1)[0]


def run_printed(command: str, root: Path, cuda_home: Path) -> subprocess.CompletedProcess:
    words = shlex.split(command)
    assert words[0] == "pytest", command
    env = {**os.environ, "PYTHONPATH": str(root), "CUDA_HOME": str(cuda_home), "FLASHINFER_WORKSPACE_BASE": str(root)}
    env.pop("CUDA_PATH", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W", "ignore::UserWarning",
                           *words[1:]], cwd=root, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("prefix", ["0001", "0002"])
def test_flashinfer_pr_body_and_its_test_command(overlay_repo, flashinfer_checkout, tmp_path, prefix):
    repo = flashinfer_checkout
    name, patch = "flashinfer", named(overlay_repo, "flashinfer", prefix, LINE)
    pr = pr_data(overlay_repo, name, LINE).patches[patch.name]
    branch = default_branch(patch)
    proc = cli(overlay_repo, "export-pr", f"flashinfer/{patch.name}", "--repo", str(repo), "--line", LINE)
    try:
        assert proc.returncode == 0, proc.stderr
        body = body_of(overlay_repo, branch)
        # the template's own sections, in its order, nothing added after them
        assert [l for l in body.splitlines() if l.startswith("#") and not l.startswith("# ")] == HEADINGS
        description = section(body, HEADINGS[0])
        assert description.index(pr.motivation.splitlines()[0]) < description.index(f"`{pr.modifications and next(iter(pr.modifications))}`")
        related = section(body, HEADINGS[1])
        assert all(f"- {r.ref}: " in related for r in pr.related)
        assert {"flashinfer-ai/flashinfer#2999", "sgl-project/sglang#23386"} <= {r.ref for r in pr.related}
        assert "- [ ] Hooks installed." in section(body, HEADINGS[3])
        tests = section(body, HEADINGS[4])
        assert "- [ ] Tests added or updated." in tests and "- [ ] Tests pass." in tests
        (command,) = re.findall(r"```\n(pytest [^\n]+)\n```", tests)
        assert command == f"pytest {pr.test_dest}"

        cuda = tmp_path / "cuda"
        (cuda / "bin").mkdir(parents=True)
        (cuda / "bin/nvcc").write_text(FAKE_NVCC)
        (cuda / "bin/nvcc").chmod(0o755)
        green = run_printed(command, _tree_of(repo, branch, tmp_path / "branch"), cuda)
        assert green.returncode == 0 and re.search(r"\b[1-9]\d* passed", green.stdout), green.stdout[-3000:]
        # the release itself with only the test file: the same command collects the tests and they fail
        release = _tree_of(repo, "v0.7.2", tmp_path / "release")
        (release / pr.test_dest).parent.mkdir(parents=True, exist_ok=True)
        (release / pr.test_dest).write_bytes(pr.test_file.read_bytes())
        red = run_printed(command, release, cuda)
        assert red.returncode == 1 and re.search(r"\b[1-9]\d* failed", red.stdout), red.stdout[-3000:]
    finally:
        delete_branches(repo, branch)
