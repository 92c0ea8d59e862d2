"""export-pr's publishing commands push to the user's fork and open the PR from it: in the clone the docs tell
users to make, `origin` is upstream itself, so the push goes to the fork's remote (`--remote`, default `fork`)
and `gh pr create --head` names the fork's owner (`--owner`, else read from that remote's GitHub URL)."""
from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.pr.export import default_branch
from tests.rebase_cases import repo_copy
from tests.pr.test_export_pr import IDENTITY, cli, delete_branches, git, named

LINE = "0.5.23"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    copy = repo_copy(tmp_path_factory.mktemp("publish") / "repo")
    repo = tmp_path_factory.mktemp("fi") / "flashinfer"
    proc = cli(copy, "wheel-checkout", "flashinfer", "--dir", str(repo), "--line", LINE)
    assert proc.returncode == 0, proc.stderr
    git(repo, "config", "user.name", IDENTITY[0])
    git(repo, "config", "user.email", IDENTITY[1])
    git(repo, "remote", "add", "origin", "https://github.com/flashinfer-ai/flashinfer")
    git(repo, "remote", "add", "fork", "git@github.com:jane-reviewer/flashinfer.git")
    patch = named(copy, "flashinfer", "0002", LINE)
    return copy, repo, patch


@pytest.mark.parametrize("extra,remote,owner,note", [
    ([], "fork", "jane-reviewer", None),
    (["--remote", "origin"], "origin", "OWNER", "is upstream itself"),
    (["--owner", "someone"], "fork", "someone", None),
])
def test_publish_commands_go_through_the_fork(setup, extra, remote, owner, note):
    copy, repo, patch = setup
    branch = default_branch(patch)
    proc = cli(copy, "export-pr", f"flashinfer/{patch.name}", "--repo", str(repo), "--line", LINE, *extra)
    try:
        assert proc.returncode == 0, proc.stderr
        assert f"push -u {remote} {branch}\n" in proc.stdout
        assert f"gh pr create --repo flashinfer-ai/flashinfer --base main --head {owner}:{branch} --title " in proc.stdout
        hints = [line for line in proc.stdout.splitlines() if line.startswith("(")]
        assert (any(note in h for h in hints) and any("replace OWNER" in h for h in hints)) if note else hints == []
    finally:
        delete_branches(repo, branch)


@pytest.mark.parametrize("extra,option", [
    (["--remote=-f"], "--remote"), (["--remote", "a b"], "--remote"), (["--remote", ""], "--remote"),
    (["--owner", "jane:x"], "--owner"), (["--owner=-jane"], "--owner"), (["--owner", "a/b"], "--owner"),
])
def test_a_remote_or_owner_no_command_can_name_is_a_usage_error_before_anything_is_made(setup, extra, option):
    """Both go into the printed push and gh pr create: a value they cannot name is bad input (exit 2, one line
    naming the option and the value), refused before any branch or PR body exists."""
    copy, repo, patch = setup
    refs = git(repo, "for-each-ref", "--format=%(refname)")
    bodies = sorted((copy / "build" / "pr").glob("*"))
    proc = cli(copy, "export-pr", f"flashinfer/{patch.name}", "--repo", str(repo), "--line", LINE, *extra)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert f"export-pr {option}: expected" in lines[0] and repr(extra[-1].split("=", 1)[-1]) in lines[0], lines
    assert git(repo, "for-each-ref", "--format=%(refname)") == refs
    assert sorted((copy / "build" / "pr").glob("*")) == bodies
