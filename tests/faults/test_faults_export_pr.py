"""export-pr on a careful user's checkout (issue 45, D4-D6 and the merge-conflict message): a --branch git
would read as an option is refused before git sees it, the PR body is never written through a link planted
at build/pr/<branch>.md, the export is all or nothing (a body that cannot be written takes its branch back,
so a re-run works), and a checkout stopped at a merge conflict is told to finish or abort the merge."""
from __future__ import annotations

import os

import pytest

from tests.fault_fixtures import RELEASES, cli, demo_repo, one_line_error
from tests.faults.test_faults_cli import _describe_for_upstream
from patchkit.gitcmd import init_repo

BRANCH = "pr/demo-route-f5-through-extra.g"      # default_branch of the demo's first patch


def _git(checkout, *args, check=True):
    import subprocess
    proc = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True,
                          env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
    assert not check or proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def upstream(tmp_path):
    """(repo, env, checkout): the demo repository with upstream texts, and an upstream checkout of release 1.0."""
    repo, env = demo_repo(tmp_path / "r")
    checkout = init_repo(tmp_path / "upstream")
    for rel, text in RELEASES["1.0"].items():
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text(text)
    _git(checkout, "config", "user.name", "A Contributor")
    _git(checkout, "config", "user.email", "contributor@example.com")
    _git(checkout, "add", "-A")
    _git(checkout, "commit", "-qm", "release 1.0")
    _git(checkout, "tag", "v1.0")
    _describe_for_upstream(repo / "patches" / "1.0" / "demo")
    return repo, env, checkout


def _refs(checkout):
    return _git(checkout, "for-each-ref", "--format=%(refname) %(objectname)"), _git(checkout, "symbolic-ref", "HEAD")


@pytest.mark.parametrize("branch", ["-m", "--force", "-D", "a b", "x..y", "pr/ok~1", "HEAD", "pr/x.lock"])
def test_a_branch_name_git_would_read_as_an_option_or_refuse_is_a_usage_error_before_git(upstream, branch):
    """`--branch=-m` reached `git branch -m COMMIT`: the user's current branch was renamed, export-pr said it
    succeeded and printed push commands for a branch that does not exist."""
    repo, env, checkout = upstream
    before = _refs(checkout)
    proc = cli(repo, "export-pr", "0001", "--repo", str(checkout), f"--branch={branch}", env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "--branch" in lines[0] and repr(branch) in lines[0] and "git branch name" in lines[0], lines
    assert _refs(checkout) == before and not (repo / "build" / "pr").exists()


def test_the_pr_body_is_never_written_through_a_link_planted_at_its_name(upstream, tmp_path):
    repo, env, checkout = upstream
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (repo / "build" / "pr").mkdir(parents=True)
    planted = repo / "build" / "pr" / (BRANCH.replace("/", "-") + ".md")
    os.symlink(victim, planted)
    before = _refs(checkout)
    proc = cli(repo, "export-pr", "0001", "--repo", str(checkout), env=env)
    assert one_line_error(proc) and str(planted) in proc.stderr and "found a symlink" in proc.stderr, proc.stderr
    assert victim.read_text() == "precious\n" and os.path.islink(planted)
    assert _refs(checkout) == before, "refused before the branch is made"


def test_a_dangling_link_given_as_body_is_not_written_through(upstream, tmp_path):
    repo, env, checkout = upstream
    os.symlink(tmp_path / "elsewhere.md", tmp_path / "body.md")
    proc = cli(repo, "export-pr", "0001", "--repo", str(checkout), "--body", str(tmp_path / "body.md"), env=env)
    assert one_line_error(proc) and "body.md" in proc.stderr and "a symlink" in proc.stderr, proc.stderr
    assert not (tmp_path / "elsewhere.md").exists() and _git(checkout, "branch", "--list", "pr/*") == ""


@pytest.mark.parametrize("fault", ["pr-body:enospc:0", "pr-body:raise:0"])
def test_export_pr_is_all_or_nothing_when_the_body_cannot_be_written(upstream, fault):
    """The body write failed after the branch was made: the branch stayed and the re-run was refused
    ("branch ... already exists"). A full disk (ENOSPC) is named with the body's path."""
    repo, env, checkout = upstream
    before = _refs(checkout)
    proc = cli(repo, "export-pr", "0001", "--repo", str(checkout), env={**env, "PATCHKIT_TEST_FAULT": fault})
    body = repo / "build" / "pr" / (BRANCH.replace("/", "-") + ".md")
    assert one_line_error(proc) and str(body) in proc.stderr and "no branch made" in proc.stderr, proc.stderr
    if "enospc" in fault:
        assert "No space left on device" in proc.stderr, proc.stderr
    assert _refs(checkout) == before and not os.path.lexists(body)
    assert _git(checkout, "config", "--get", f"branch.{BRANCH}.description", check=False) == ""
    again = cli(repo, "export-pr", "0001", "--repo", str(checkout), env=env)
    assert again.returncode == 0 and body.read_text().strip(), again.stderr
    assert _git(checkout, "rev-parse", "--verify", f"refs/heads/{BRANCH}")


def test_a_checkout_stopped_at_a_merge_conflict_is_told_to_finish_or_abort_the_merge(upstream):
    """It said "commit or stash them first"; git stash refuses a conflicted index ("needs merge")."""
    repo, env, checkout = upstream
    _git(checkout, "checkout", "-qb", "side")
    (checkout / "demo" / "util.py").write_text("U0 = 'side'\n")
    _git(checkout, "commit", "-qam", "side")
    _git(checkout, "checkout", "-q", "main")
    (checkout / "demo" / "util.py").write_text("U0 = 'main'\n")
    _git(checkout, "commit", "-qam", "main")
    assert _git(checkout, "merge", "side", check=False) is not None
    assert os.path.exists(checkout / ".git" / "MERGE_HEAD")
    before = _refs(checkout)
    proc = cli(repo, "export-pr", "0001", "--repo", str(checkout), env=env)
    assert one_line_error(proc) and "a merge in progress" in proc.stderr and "git merge --abort" in proc.stderr \
        and "demo/util.py" in proc.stderr and "stash" not in proc.stderr, proc.stderr
    assert _refs(checkout) == before
