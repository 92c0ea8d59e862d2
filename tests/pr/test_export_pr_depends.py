"""`Depends-On:` trailers: `export-pr` stacks a patch on the branch of the patch it needs, or refuses in one
line naming it; `--series` makes the whole stack, titled [k/N], each body naming the PR it builds on;
`check` fails a Depends-On that does not name an earlier patch of the same series.

The trailer is data (patchkit knows no patch by name): these tests take whatever patches of the real series
carry one (P7 needs P1) and run them against git checkouts of the real pinned release (test_export_pr.py).
"""
from __future__ import annotations

import shlex

import pytest

from patchkit.pr.export import default_branch
from patchkit.patchfile import parse_patch
from tests.rebase_cases import repo_copy
from tests.pr.test_export_pr import all_patches, body_of, checkouts, cli, git, needs_force, pr_data  # noqa: F401  (checkouts is a fixture)


@pytest.fixture(scope="module")
def overlay_repo(tmp_path_factory):
    return repo_copy(tmp_path_factory.mktemp("depends") / "repo")


def dependent_patches(repo):
    found = [(name, up, p) for name, up, p in all_patches(repo) if p.trailer("Depends-On")]
    if not found:
        pytest.skip("no patch of the series carries a Depends-On: trailer")
    return found


def force(patch) -> list[str]:
    """--force where export-pr refuses the patch on these checkouts without it (tests/pr/test_export_pr.py)."""
    return ["--force"] if needs_force(patch) else []


def _branches(repo):
    return set(git(repo, "branch", "--format=%(refname:short)").split())


def test_refuses_without_the_dependency_branch_in_one_line(checkouts, overlay_repo):  # noqa: F811
    for name, up, patch in dependent_patches(overlay_repo):
        repo = checkouts[name]
        before = _branches(repo), git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain")
        proc = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo), *force(patch))
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        dep = patch.trailer("Depends-On")[0]
        dep_branch = default_branch(parse_patch(patch.path.parent / dep))
        assert f"depends on {dep}" in lines[0] and f"expected its branch {dep_branch}" in lines[0]
        assert (_branches(repo), git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain")) == before


def test_stacks_on_the_dependency_branch(checkouts, overlay_repo, patched_root):  # noqa: F811
    patches = list(all_patches(overlay_repo))
    for name, up, patch in dependent_patches(overlay_repo):
        repo, prefix = checkouts[name], up.get("repo_prefix", "")
        deps = patch.trailer("Depends-On")
        made = []
        try:
            for dep in deps:
                dep_patch = parse_patch(patch.path.parent / dep)
                proc = cli(overlay_repo, "export-pr", f"{name}/{dep}", "--repo", str(repo), *force(dep_patch))
                assert proc.returncode == 0, proc.stderr
                made.append(default_branch(dep_patch))
            proc = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo), *force(patch))
            assert proc.returncode == 0, proc.stderr
            mine = default_branch(patch)
            made.append(mine)
            dep_tip = git(repo, "rev-parse", made[-2]).strip()
            # one commit on top of the dependency's branch, touching exactly this patch's files
            assert git(repo, "rev-list", "--parents", "-n", "1", mine).split()[1:] == [dep_tip]
            touched = set(git(repo, "diff", "--name-only", dep_tip, mine).split())
            test_dest = pr_data(overlay_repo, name).patches[patch.name].test_dest
            assert touched == {prefix + p for p in patch.paths} | {prefix + o for o in patch.overlay} | {test_dest}
            git(repo, "checkout", "-q", dep_tip)
            try:
                git(repo, "apply", "--check", "-", input=git(repo, "format-patch", "-1", "--stdout", mine))
            finally:
                git(repo, "checkout", "-q", "main")
            # the change is this patch's alone; files only it and its dependencies touch end up as in the
            # engine's fully patched tree
            added = lambda diff: {l[1:] for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")}
            own = added(patch.path.read_text().split("\ndiff --git ", 1)[1])
            chain = {patch.name, *deps}
            others = {q for n, _, p in patches if n == name and p.name not in chain for q in p.paths}
            for rel in set(patch.paths):
                assert added(git(repo, "diff", dep_tip, mine, "--", prefix + rel)) <= own, rel
                if rel not in others:
                    assert git(repo, "show", f"{mine}:{prefix}{rel}") == (patched_root / rel).read_text(), rel
            # the upstream message names no file of this series; the PR body says what it is stacked on
            message = git(repo, "log", "-1", "--format=%B", mine)
            data = pr_data(overlay_repo, name)
            assert message.startswith(data.patches[patch.name].title + "\n\n") and "Depends-On" not in message
            body = body_of(overlay_repo, mine)
            assert f"Builds on `{made[-2]}`" in body and data.patches[deps[-1]].title in body
        finally:
            git(repo, "checkout", "-q", "main")
            for b in made:
                git(repo, "branch", "-q", "-D", b, check=False)


def test_series_exports_the_stack_titled_k_of_n(checkouts, overlay_repo):  # noqa: F811
    for name, up, patch in dependent_patches(overlay_repo):
        repo, data = checkouts[name], pr_data(overlay_repo, name)
        before = _branches(repo)
        chain = [parse_patch(patch.path.parent / d) for d in patch.trailer("Depends-On")] + [patch]
        branches = [default_branch(p) for p in chain]
        proc = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo), "--series",
                   *[f for p in chain for f in force(p)][:1])
        try:
            assert proc.returncode == 0, proc.stderr
            n = len(chain)
            assert _branches(repo) == before | set(branches)
            for k, (p, branch) in enumerate(zip(chain, branches), 1):
                parent = branches[k - 2] if k > 1 else "main"
                assert git(repo, "rev-parse", f"{branch}^").strip() == git(repo, "rev-parse", parent).strip()
                body = body_of(overlay_repo, branch)
                title = f"[{k}/{n}] {data.patches[p.name].title}"
                assert body.startswith(f"# {title}\n") and f"--title {shlex.quote(title)}" in proc.stdout
                if k > 1:
                    assert f"Builds on `{branches[k - 2]}` (\"[{k - 1}/{n}] {data.patches[chain[k - 2].name].title}\")" in body
                else:
                    assert "Builds on" not in body
            # a second run refuses before making anything: the first branch exists
            again = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo), "--series",
                        *[f for p in chain for f in force(p)][:1])
            assert again.returncode == 1 and f"branch {branches[0]} already exists" in again.stderr
        finally:
            for b in branches:
                git(repo, "branch", "-q", "-D", b, check=False)


def test_check_fails_a_depends_on_that_is_not_an_earlier_patch(tmp_path):
    repo = repo_copy(tmp_path / "repo")
    name, _, patch = dependent_patches(repo)[0]
    path = repo / "patches" / "0.5.14" / name / patch.name
    text = path.read_text()
    dep = patch.trailer("Depends-On")[0]
    for bad, why in ((patch.name, "found it at or after this patch"), ("0999-no-such.patch", "found no such patch")):
        path.write_text(text.replace(f"Depends-On: {dep}\n", f"Depends-On: {bad}\n"))
        assert parse_patch(path).trailer("Depends-On") == [bad]
        proc = cli(repo, "check")
        assert proc.returncode == 1, proc.stdout
        row = next(line for line in proc.stdout.splitlines() if patch.name in line and "FAIL" in line)
        assert f"Depends-On: {bad}: expected a patch earlier in the {name} series, {why}" in row
    path.write_text(text)
    assert cli(repo, "check").returncode == 0
