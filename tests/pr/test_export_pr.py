"""`apply.py export-pr`: every shipped patch as an upstream-ready branch on a git checkout of the real pinned
release (one commit, tagged as the release, on branch main: python/sglang/... for SGLang, flashinfer/... for
FlashInfer), read the way the upstream reviewer reads it.

The wheels carry no `.github/` and no `test/` tree. The checkouts get a PR template of our own wording with
the section headings SGLang's `.github/pull_request_template.md` had around v0.5.14 (Motivation,
Modifications, Accuracy Tests, Benchmarking and Profiling, Checklist, Review Process); upstream's file is not
copied. The unittest registration is checked with the release's own collector
(`python/sglang/test/ci/ci_register.py`, shipped in the wheel).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from patchkit.patchfile import parse_patch
from patchkit.pr.body import OVERLAY_TRAILERS
from patchkit.pr.export import default_branch
from patchkit.pr.prdata import load_pr_data
from patchkit.series import load_series
from patchkit.lockfile import load_lock
from tests.conftest import PATCH_LINE, REPO, line_of, pristine_wheel
from tests.rebase_cases import repo_copy

SGLANG_LIKE_TEMPLATE = """<!-- thanks; fill in each section -->

## Motivation

<!-- why -->

## Modifications

<!-- what -->

## Accuracy Tests

<!-- accuracy results for kernel or model changes -->

## Benchmarking and Profiling

<!-- speed results -->

## Checklist

- [ ] Format your code.
- [ ] Add unit tests.

## Review Process

1. Ask for a review.
"""
# This repository's own vocabulary, independent of the data file's `forbid` list (which the command uses).
INTERNAL = [r"\bP[1-9]\b", r"BENCHMARKS\.md", r"\bdocs/", r"\.png\b", r"\bissue \d+", r"\brun \d+\b",
            r"\bcommit [0-9a-f]{7,}", r"\btests/(test_|gpu/)", r"\bbench/", r"\bbench\.bench_", r"(?i)patchkit",
            r"dsv4-sm120-overlay",
            r"Upstream-Status", r"Depends-On", r"Evidence:", r"\]\((?!https?://)[^)]*\)"]   # the last: a relative link
CODE_INTERNAL = INTERNAL[:-1]   # in code, `](` is an index and a call, not a Markdown link
IDENTITY = ("Jane Reviewer", "jane@example.org")


def git(repo: Path, *args, check=True, input=None) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@example.invalid",
           "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@example.invalid"}
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env, input=input)
    if check:
        assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def cli(repo: Path, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "EMAIL"}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run([sys.executable, str(repo / "apply.py"), *args], cwd=repo, capture_output=True, text=True,
                          env=env, timeout=300)


def current_line() -> str:
    """The running test's release line (tests/conftest.py sets PATCHKIT_LINE per test from the nearest
    conftest's PATCH_LINE: tests/line_0_5_23/ re-collects tests of this module for its line)."""
    return os.environ.get("PATCHKIT_LINE") or PATCH_LINE


def lock_of(line: str | None = None):
    return load_lock(REPO / "pin.lock", line or current_line())


@pytest.fixture(scope="module")
def checkouts(request, tmp_path_factory) -> dict[str, Path]:
    """upstream name -> git repo: the pinned release in repo layout plus a PR template, one commit tagged as
    the release on main, and the user's identity in its config (the release of the collecting module's line)."""
    out = {}
    line = line_of(request.path)
    for name, up in load_lock(REPO / "pin.lock", line).upstreams.items():
        repo = tmp_path_factory.mktemp(f"upstream-{name}")
        git(repo, "init", "-q", "-b", "main")
        wheel = pristine_wheel(name, line)
        prefix = repo / up.repo_prefix if up.repo_prefix else repo
        wheel.unpack(prefix, root=up.root)
        shutil.rmtree(prefix / wheel.dist_info())
        (repo / ".github").mkdir()
        (repo / ".github/pull_request_template.md").write_text(SGLANG_LIKE_TEMPLATE)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"Release {up.tag}")
        git(repo, "tag", up.tag)
        git(repo, "config", "user.name", IDENTITY[0])
        git(repo, "config", "user.email", IDENTITY[1])
        out[name] = repo
    return out


@pytest.fixture(scope="module")
def overlay_repo(tmp_path_factory) -> Path:
    return repo_copy(tmp_path_factory.mktemp("export") / "repo")


def all_patches(repo: Path, line: str | None = None):
    line = line or current_line()
    lock = tomllib.loads((repo / "pin.lock").read_text())
    for name, up in lock["line"][line]["upstream"].items():
        series = load_series(name, repo / "patches" / line, repo / "overlay" / line, up["root"])
        for p in series.patches:
            yield name, up, p


def named(repo: Path, upstream: str, key: str, line: str | None = None):
    """The patch `key` names in a repository copy's series (Series.by_name: label, NNNN, file name or stem)."""
    line = line or current_line()
    root = tomllib.loads((repo / "pin.lock").read_text())["line"][line]["upstream"][upstream]["root"]
    found = load_series(upstream, repo / "patches" / line, repo / "overlay" / line, root).by_name(key)
    assert found is not None, f"no patch {key} in {upstream} of line {line}"
    return found


def status(patch) -> str:
    return (patch.trailer("Upstream-Status") or [""])[0]


def exportable(patch) -> bool:
    """Not downstream-only; Backport and Superseded-By patches export with --force."""
    return not status(patch).lower().startswith("inappropriate")


def needs_force(patch) -> bool:
    # a Superseded-By that does not match on the base (P4's and P7's, on 0.5.14) exports without --force, unless
    # the newest line retired the patch: the checkouts here are main at this line's release
    return status(patch).startswith("Backport") or retired_by_newest(patch)


def retired_by_newest(patch) -> bool:
    """The newest line's retired.toml records the patch of an older line: export-pr refuses it, without --force, on
    a main older than the newest line's pin (upstream's branch has moved on)."""
    from patchkit.lockfile import lock_lines
    from patchkit.pr.retired import load_records, matches
    from patchkit.series import read_labels

    newest = lock_lines(REPO / "pin.lock")[-1]
    if current_line() == newest:
        return False
    label = read_labels(patch.path.parent).get(patch.name, "")
    return any(r.line == newest and matches(r, patch.subject, label)
               for r in load_records(REPO / "patches", patch.path.parent.name))


def pr_data(repo: Path, name: str, line: str | None = None):
    return load_pr_data(repo / "patches" / (line or current_line()) / name)


def body_of(repo: Path, branch: str) -> str:
    return (repo / "build" / "pr" / (branch.replace("/", "-") + ".md")).read_text()


def delete_branches(repo: Path, *branches):
    for b in branches:
        git(repo, "branch", "-q", "-D", b, check=False)


def assert_upstream_clean(text: str, what: str, patterns=INTERNAL):
    for rx in patterns:
        m = re.search(rx, text)
        assert m is None, f"{what} names this repository's own '{m.group(0)}'"


def test_every_patch_exports_as_one_upstream_commit_on_main(checkouts, overlay_repo, patched_root):
    from patchkit.pr.claims import fact_values
    from patchkit.pr.export import stated

    patches = list(all_patches(overlay_repo))
    assert patches, "the series holds no patch"
    for name, up, patch in patches:
        if patch.trailer("Depends-On") or not exportable(patch):
            continue  # stacked on its dependency's branch: tests/pr/test_export_pr_depends.py; never exported: below
        repo, prefix, tag = checkouts[name], up.get("repo_prefix", ""), up["tag"]
        pr = pr_data(overlay_repo, name).patches[patch.name]
        read = lambda rel: ((overlay_repo / "overlay" / current_line() / rel).read_bytes()  # noqa: E731
                            if (overlay_repo / "overlay" / current_line() / rel).is_file() else None)
        pr = stated(pr, fact_values(pr.facts, read, patch.name), patch.name)   # its {facts}, as exported
        head_before = git(repo, "rev-parse", "HEAD").strip()
        branch = default_branch(patch)
        force = ["--force"] if needs_force(patch) else []
        proc = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo), *force)
        try:
            assert proc.returncode == 0, proc.stderr + proc.stdout
            # the checkout itself is untouched: same HEAD, clean
            assert git(repo, "rev-parse", "HEAD").strip() == head_before
            assert git(repo, "status", "--porcelain") == ""
            # one commit on main (here: the release), touching the patch's files, its overlay files and its unittest
            assert git(repo, "rev-list", "--parents", "-n", "1", branch).split()[1:] == [git(repo, "rev-parse", "main").strip()]
            touched = set(git(repo, "diff", "--name-only", tag, branch).split())
            expected = {prefix + p for p in patch.paths} | {prefix + o for o in patch.overlay}
            # ... and any further file its data ships (a benchmark script), byte for byte
            assert touched == expected | ({pr.test_dest} if pr.test_file else set()) | {d for _, d, _ in pr.files}
            for src, dest, _ in pr.files:
                assert git(repo, "show", f"{branch}:{dest}") == src.read_text()
            for o in patch.overlay:
                want = (overlay_repo / "overlay" / current_line() / o).read_bytes()
                assert git(repo, "show", f"{branch}:{prefix}{o}") == want.decode()
            git(repo, "apply", "--check", "-", input=git(repo, "format-patch", "-1", "--stdout", branch))
            # the change is this patch's alone, even where an earlier patch of the series touches the same file
            added = lambda diff: {l[1:] for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")}
            mine = added(patch.path.read_text().split("\ndiff --git ", 1)[1])
            for rel in set(patch.paths):
                assert added(git(repo, "diff", tag, branch, "--", prefix + rel)) <= mine, rel
            others = {q for n, _, p in patches if p is not patch and n == name for q in p.paths}
            for rel in set(patch.paths) - others:
                assert git(repo, "show", f"{branch}:{prefix}{rel}") == (patched_root / rel).read_text(), rel
            # commit: the upstream title and motivation, no overlay trailer; author and committer are the user
            message = git(repo, "log", "-1", "--format=%B", branch)
            assert message.startswith(pr.title + "\n\n") and pr.motivation in message
            assert not any(line.split(":")[0].lower() in OVERLAY_TRAILERS for line in message.splitlines() if ": " in line)
            for fmt in ("%an <%ae>", "%cn <%ce>"):
                assert git(repo, "log", "-1", f"--format={fmt}", branch).strip() == f"{IDENTITY[0]} <{IDENTITY[1]}>"
            # the body: the template's sections in its order, filled; its checklist and review process kept
            body = body_of(overlay_repo, branch)
            assert git(repo, "config", f"branch.{branch}.description").rstrip("\n") == body.rstrip("\n")
            headings = [l for l in body.splitlines() if l.startswith("## ")]
            assert headings == ["## Motivation", "## Modifications", "## Accuracy Tests", "## Benchmarking and Profiling",
                                "## Checklist", "## Review Process"], headings
            assert body.startswith(f"# {pr.title}\n") and "- [ ] Add unit tests." in body and "<!--" not in body
            for rel in touched:       # one Modifications line per file, with what changes there
                extra = {d: w for _, d, w in pr.files}
                what = (extra[rel] if rel in extra else "new unittest" if rel == pr.test_dest
                        else pr.modifications.get(rel[len(prefix):]))
                assert re.search(rf"^- `{re.escape(rel)}`: {re.escape(what)}", body, re.M), rel
            for m in pr.accuracy + pr.benchmark:      # measured results inlined with where and how
                for field in (m.result, m.gpu, m.versions, m.date):
                    assert field in body
                # a command is printed only where it runs in an upstream checkout
                assert (m.command.strip() in body) == (m.harness == "upstream"), m.command
                for row in m.rows:
                    assert "| " + " | ".join(row) + " |" in body
            assert body.count("```") % 2 == 0, "a code block is left open"
            # nothing of this repository's own vocabulary, in the body, the message or any line the commit adds
            for rel in touched:
                assert_upstream_clean("\n".join(sorted(added(git(repo, "diff", tag, branch, "--", rel)))),
                                      f"{patch.name}'s {rel}", CODE_INTERNAL)
            assert_upstream_clean(body, f"{patch.name}'s PR body")
            assert_upstream_clean(message, f"{patch.name}'s commit message")
            if pr.test_file:
                assert_upstream_clean(git(repo, "show", f"{branch}:{pr.test_dest}"), f"{patch.name}'s unittest")
            # the command ends by saying how to publish it: to the fork's remote (none here: it says how to add
            # one), and a PR from the fork's branch into upstream
            assert f"push -u fork {branch}" in proc.stdout and "remote add fork https://github.com/OWNER/" in proc.stdout
            assert re.search(rf"gh pr create --repo [\w-]+/[\w-]+ --base main --head OWNER:{re.escape(branch)} --title ",
                             proc.stdout)
        finally:
            delete_branches(repo, branch)


def test_default_branch_names_are_whole_words():
    for _, _, patch in all_patches(Path(__file__).resolve().parents[2]):
        name = default_branch(patch)
        words = re.split(r"[^a-z0-9_.]+", patch.subject.lower())
        assert name.startswith("pr/") and len(name) <= 63
        assert name[3:].split("-")[-1] in words, name    # the last word is a whole word of the subject


def _commit_on_main(repo: Path, rel: str, edit) -> None:
    path = repo / rel
    edit(path)
    git(repo, "commit", "-q", "-am", "main moves on")


@pytest.fixture()
def later_main(checkouts):
    """Put main back at the release after a test moved it."""
    repo = checkouts["sglang"]
    yield repo
    git(repo, "reset", "-q", "--hard", lock_of().upstream("sglang").tag)


def test_base_defaults_to_main_and_a_conflicting_base_is_refused_naming_the_file(checkouts, overlay_repo, later_main):
    repo, up = later_main, lock_of().upstream("sglang")
    name, _, patch = next(t for t in all_patches(overlay_repo) if t[0] == "sglang" and not t[2].trailer("Depends-On")
                          and exportable(t[2]) and not needs_force(t[2]))
    # the first file whose diff removes a line: main edits that line below to make the patch conflict
    sections = patch.path.read_text().split("\ndiff --git ")[1:]
    rel, removed = next((up.repo_prefix + s.split(" b/", 1)[0].removeprefix("a/"), lines) for s in sections
                        if (lines := [l[1:] for l in s.splitlines()
                                      if l.startswith("-") and not l.startswith("---") and l[1:].strip()]))
    branch = default_branch(patch)
    # main moved on without touching what the patch changes: the branch is built on main
    _commit_on_main(repo, rel, lambda p: p.write_text(p.read_text() + "\n# a later change at the end\n"))
    proc = cli(overlay_repo, "export-pr", f"sglang/{patch.name}", "--repo", str(repo))
    assert proc.returncode == 0, proc.stderr
    assert git(repo, "rev-parse", f"{branch}^").strip() == git(repo, "rev-parse", "main").strip()
    assert git(repo, "show", f"{branch}:{rel}").endswith("# a later change at the end\n")
    # --base names another: the release tag
    delete_branches(repo, branch)
    proc = cli(overlay_repo, "export-pr", f"sglang/{patch.name}", "--repo", str(repo), "--base", up.tag)
    assert proc.returncode == 0, proc.stderr
    assert git(repo, "rev-parse", f"{branch}^").strip() == git(repo, "rev-parse", up.tag).strip()
    delete_branches(repo, branch)
    # main changed the lines the patch changes: refused in one line naming the file, no branch
    _commit_on_main(repo, rel, lambda p: p.write_text(p.read_text().replace(removed[0], removed[0] + "  # edited", 1)))
    proc = cli(overlay_repo, "export-pr", f"sglang/{patch.name}", "--repo", str(repo))
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"does not apply to main: {rel} conflicts" in proc.stderr
    assert git(repo, "branch", "--list", branch) == ""
    # the file moved away on main (as in later releases): refused naming it
    git(repo, "rm", "-q", rel)
    git(repo, "commit", "-q", "-m", "moved")
    proc = cli(overlay_repo, "export-pr", f"sglang/{patch.name}", "--repo", str(repo))
    assert proc.returncode == 1 and f"does not apply to main: {rel} is not there" in proc.stderr
    # an unknown base: one line
    proc = cli(overlay_repo, "export-pr", f"sglang/{patch.name}", "--repo", str(repo), "--base", "no-such-ref")
    assert proc.returncode == 1 and "expected the base no-such-ref in the checkout, found none" in proc.stderr


def test_the_body_follows_the_template_at_the_base(checkouts, overlay_repo, later_main):
    repo = later_main
    (repo / ".github/pull_request_template.md").write_text(
        "## Summary\n<!-- what -->\n\n## Why\n<!-- why -->\n\n## Test plan\n<!-- how it was tested -->\n\n"
        "## Performance\n<!-- numbers -->\n\n## Sign-off\n- [ ] I agree.\n")
    git(repo, "commit", "-q", "-am", "another template")
    name, patch = "sglang", named(overlay_repo, "sglang", "0001")
    pr = pr_data(overlay_repo, name).patches[patch.name]
    branch = default_branch(patch)
    proc = cli(overlay_repo, "export-pr", f"sglang/{patch.name}", "--repo", str(repo))
    try:
        assert proc.returncode == 0, proc.stderr
        body = body_of(overlay_repo, branch)
        assert [l for l in body.splitlines() if l.startswith("## ")] == [
            "## Summary", "## Why", "## Test plan", "## Performance", "## Sign-off"]
        section = lambda h: body.split(f"## {h}\n", 1)[1].split("\n## ", 1)[0]   # noqa: E731
        assert "python/sglang/srt/layers/attention/flash_mla_sm120.py" in section("Summary")
        assert pr.motivation in section("Why")
        assert pr.accuracy[0].result in section("Test plan") and f"python3 {pr.test_dest}" in section("Test plan")
        assert pr.benchmark[0].rows[0][1] in section("Performance")
        assert "- [ ] I agree." in section("Sign-off")
    finally:
        delete_branches(repo, branch)


def _with_trailer(repo: Path, prefix: str, line: str) -> str:
    """Add a trailer to the sglang patch starting with `prefix` (in the scratch copy); returns its name."""
    path = next((repo / "patches" / "0.5.14" / "sglang").glob(prefix + "-*.patch"))
    text = path.read_text()
    head, sep, diff = text.partition("\ndiff --git ")
    path.write_text(head.rstrip("\n") + "\n" + line + "\n\n" + sep.lstrip("\n") + diff)
    assert line.split(": ", 1)[1] in parse_patch(path).trailer(line.split(":")[0])
    return path.name


def test_upstream_superseded_and_inappropriate_patches(checkouts, tmp_path):
    repo, copy = checkouts["sglang"], repo_copy(tmp_path / "repo")
    for backport in [p for n, _, p in all_patches(copy) if n == "sglang" and status(p).startswith("Backport")]:
        proc = cli(copy, "export-pr", f"sglang/{backport.name}", "--repo", str(repo))
        assert proc.returncode == 1 and "upstream already has this change; pass --force" in proc.stderr
    # a replacement the base has (this definition exists in the 0.5.14 checkout): refused without --force
    superseded = _with_trailer(copy, "0003",
                               "Superseded-By: sglang/srt/layers/attention/flash_mla_sm120.py:flash_mla_with_kvcache_sm120")
    proc = cli(copy, "export-pr", f"sglang/{superseded}", "--repo", str(repo))
    assert proc.returncode == 1
    assert ("superseded by upstream's sglang/srt/layers/attention/flash_mla_sm120.py:flash_mla_with_kvcache_sm120 "
            "on the base; pass --force") in proc.stderr
    proc = cli(copy, "export-pr", f"sglang/{superseded}", "--repo", str(repo), "--force")
    assert proc.returncode == 0, proc.stderr
    branch = default_branch(parse_patch(copy / "patches/0.5.14/sglang" / superseded))
    assert "Superseded-By" not in git(repo, "log", "-1", "--format=%B", branch)
    delete_branches(repo, branch)
    path = next((copy / "patches/0.5.14/sglang").glob("0004-*.patch"))
    path.write_text(path.read_text().replace("Upstream-Status: Pending", "Upstream-Status: Inappropriate [downstream only]"))
    for extra in ([], ["--force"]):
        proc = cli(copy, "export-pr", f"sglang/{path.name}", "--repo", str(repo), *extra)
        assert proc.returncode == 1 and "Inappropriate [downstream only]: not meant for upstream, never exported" in proc.stderr
    assert git(repo, "branch", "--list", "pr/*") == ""


def test_refuses_without_a_git_identity(checkouts, overlay_repo):
    repo = checkouts["sglang"]
    git(repo, "config", "--unset", "user.email")
    try:
        proc = cli(overlay_repo, "export-pr", "sglang/0001", "--repo", str(repo))
        assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
        assert "expected a git identity for the commit (git config user.name and user.email), found none" in proc.stderr
        assert git(repo, "branch", "--list", "pr/*") == ""
    finally:
        git(repo, "config", "user.email", IDENTITY[1])


def test_refuses_dirty_checkout(checkouts, overlay_repo):
    name, up, patch = next(all_patches(overlay_repo))
    repo = checkouts[name]
    victim = repo / (up.get("repo_prefix", "") + patch.paths[0])
    original = victim.read_bytes()
    victim.write_bytes(original + b"\n# local edit\n")
    try:
        proc = cli(overlay_repo, "export-pr", f"{name}/{patch.name}", "--repo", str(repo))
        assert proc.returncode == 1 and "expected a clean checkout" in proc.stderr
        assert git(repo, "branch", "--list", "pr/*") == ""
    finally:
        victim.write_bytes(original)


def test_refuses_unknown_or_ambiguous_patch_listing_what_there_is(checkouts, overlay_repo):
    """A name that matches no patch (or several) is a usage error: exit 2, one line listing every patch of the
    line by the names the README uses (P1 = sglang/0001 ...), nothing made."""
    name = next(iter(checkouts))
    for spec in ("no-such-patch", "P99", "dsv4"):
        proc = cli(overlay_repo, "export-pr", spec, "--repo", str(checkouts[name]))
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert f"matching '{spec}'" in proc.stderr
        if spec != "dsv4":   # an ambiguous part lists the patches it matches, a wrong name all of them
            for n, _, p in all_patches(overlay_repo):
                pr = pr_data(overlay_repo, n).patches.get(p.name)
                label = f"{pr.label} = " if pr is not None and pr.label else ""
                assert f"{label}{n}/{p.name[:4]}" in proc.stderr, (p.name, proc.stderr)
    assert all(git(repo, "branch", "--list", "pr/*") == "" for repo in checkouts.values())


def test_the_readme_names_export_pr_accepts(checkouts, overlay_repo):
    """README's patch table calls the patches P1..P7: export-pr takes those names (any case), and on each line
    each names the patch of that line's series column (the default line's first)."""
    readme = (REPO / "README.md").read_text()
    head = re.search(r"^\| # \| (.+?) series \(default\) \| (.+?) series \|", readme, re.M)
    assert head, "README has no patch table with a series column per line"
    columns = {line: i for i, line in enumerate(head.groups())}
    rows = re.findall(r"^\| (P\d[\w-]*) \| ([^|]+) \| ([^|]+) \|", readme, re.M)
    table = {label: m.group(0) for label, *cells in rows
             if (m := re.match(r"\w+ \d{4}", cells[columns[current_line()]].strip()))}
    assert "P1" in table, "README has no patch table"
    name, patch = "sglang", named(overlay_repo, "sglang", "0001")
    proc = cli(overlay_repo, "export-pr", "p1", "--repo", str(checkouts[name]))
    try:
        assert proc.returncode == 0, proc.stderr
        assert f"branch {default_branch(patch)} = " in proc.stdout
    finally:
        delete_branches(checkouts[name], default_branch(patch))
    labelled = {pr.label: f"{n} {p.name[:4]}" for n, _, p in all_patches(overlay_repo)
                if (pr := pr_data(overlay_repo, n).patches.get(p.name)) is not None and pr.label}
    assert labelled == table


def _edited_copy(tmp_path: Path, rel: str, edit) -> Path:
    copy = repo_copy(tmp_path / "repo")
    path = copy / rel
    path.write_text(edit(path.read_text()))
    return copy


def test_no_exported_file_cites_this_repository(checkouts, tmp_path):
    """The vocabulary check covers every file the commit ships, not only the body: a comment in an overlay file
    (or a line a patch adds) that names this repository's tests/ or bench/ is refused, naming file and line."""
    line = current_line()
    name, up, patch = next((n, u, p) for n, u, p in all_patches(REPO) if n == "sglang" and p.overlay
                           and exportable(p) and not needs_force(p) and not p.trailer("Depends-On"))
    overlay = f"overlay/{line}/{patch.overlay[0]}"
    copy = _edited_copy(tmp_path, overlay, lambda t: t + "\n# measured by bench/runs/run.txt\n")
    proc = cli(copy, "export-pr", f"{name}/{patch.name}", "--repo", str(checkouts[name]))
    lines = (copy / overlay).read_text().count("\n")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr + proc.stdout
    assert f"{up['repo_prefix']}{patch.overlay[0]}:{lines} names this repository's own 'bench/'" in proc.stderr
    assert git(checkouts[name], "branch", "--list", "pr/*") == ""


def test_a_printed_command_must_run_in_the_upstream_checkout(checkouts, tmp_path):
    """A result whose command is this repository's script, printed as if a reviewer could run it, is refused."""
    line = current_line()
    name, _, patch = next((n, u, p) for n, u, p in all_patches(REPO) if n == "sglang" and exportable(p)
                          and not needs_force(p) and not p.trailer("Depends-On"))
    data = f"patches/{line}/sglang/upstream-pr.toml"
    stanza = (f'\n[[patch.accuracy]]\nresult = "r"\ncommand = "python3 -m bench.server.bench_e2e --tree patched"\n'
              f'gpu = "g"\nversions = "v"\ndate = "2026-12-01"\n')

    def add_result(text: str) -> str:   # the result goes to the first [[patch]], the patch exported below
        head, sep, rest = text.partition("\n[[patch]]\n")
        first, sep2, tail = rest.partition("\n[[patch]]\n")
        return head + sep + first.rstrip("\n") + "\n" + stanza + sep2 + tail
    copy = _edited_copy(tmp_path, data, add_result)
    proc = cli(copy, "export-pr", f"sglang/{patch.name}", "--repo", str(checkouts[name]))
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr + proc.stdout
    assert "'bench.server.bench_e2e'" in proc.stderr and "run in an upstream checkout" in proc.stderr
    assert git(checkouts[name], "branch", "--list", "pr/*") == ""


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree_of(repo: Path, ref: str, dest: Path) -> Path:
    """The files of `ref` in `dest`, as `git archive` gives them, unpacked by tar: over a FlashInfer tree's tens of
    thousands of files Python's tarfile took a large part of these tests' time (a profile)."""
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", ref], cwd=repo, stdout=subprocess.PIPE)
    unpack = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, capture_output=True)
    archive.stdout.close()
    assert archive.wait() == 0 and unpack.returncode == 0, unpack.stderr
    return dest


def test_the_unittest_travels_registered_and_its_cpu_part_runs(checkouts, overlay_repo, tmp_path):
    repo, up = checkouts["sglang"], lock_of().upstream("sglang")
    name, patch = "sglang", named(overlay_repo, "sglang", "0001")
    pr = pr_data(overlay_repo, name).patches[patch.name]
    branch = default_branch(patch)
    proc = cli(overlay_repo, "export-pr", f"sglang/{patch.name}", "--repo", str(repo))
    try:
        assert proc.returncode == 0, proc.stderr
        patched = _tree_of(repo, branch, tmp_path / "branch")
        pinned = _tree_of(repo, up.tag, tmp_path / "tag")
        test_file = patched / pr.test_dest
        assert test_file.is_file() and pr.test_dest.startswith("test/registered/")
        # registered as the release registers its tests, read by the release's own collector: a CUDA
        # per-commit test of the 1-gpu-small runner (an RTX 5090, sm_120), with a __main__ entry
        register = _load(patched / up.repo_prefix / "sglang/test/ci/ci_register.py", "pinned_ci_register")
        (entry,) = register.collect_tests([str(test_file)], sanity_check=True)
        assert entry.backend == register.HWBackend.CUDA and entry.effective_suite == "base-b-test-1-gpu-small"
        assert entry.disabled is None and entry.nightly is False
        # its CPU part runs with this venv's python against the branch's tree, and fails on the release
        # (harness.upstream_test: `python3 FILE` as SGLang's CI runs it, against that tree's python/)
        run = lambda root: subprocess.run(  # noqa: E731
            [sys.executable, "-m", "harness.upstream_test", str(root / up.repo_prefix), str(test_file), "-v"],
            capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "TRITON_INTERPRET": "1"})
        green = run(patched)
        assert green.returncode == 0 and "test_cpu_interpreter_small" in green.stderr and "OK" in green.stderr, green.stderr
        red = run(pinned)
        assert red.returncode != 0 and "flash_mla_sm120_mma" in red.stderr
    finally:
        delete_branches(repo, branch)
