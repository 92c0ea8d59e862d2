"""`apply.py export-pr PATCH --repo DIR [--base REF] [--series]`: one patch (or its stack) as branches on an
upstream git checkout, each with a PR body and a commit message written for the upstream project.

The branch is built on `--base` (default: the checkout's `main`, else the pinned tag) with git plumbing on
a private index, so the user's work tree and current branch are never touched. Paths move from wheel
layout to repo layout through pin.lock's `repo_prefix`. What goes upstream (title, motivation, per-file
lines, measured results, the unittest the PR adds) is the series' upstream-pr.toml (prdata.py); the PR
body follows the base's own pull-request template (template.py). Everything is checked before the first
branch is made: patch status, data, vocabulary, identity, and that the change applies to the base.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from .. import PatchkitError, UsageError, fsio
from ..check import depends_on_errors
from ..conditions import replacements_of, superseded_by
from ..gitcmd import checkout_git
from .body import Stack, commit_message, pr_body, test_description, title
from .carry import carried_change
from .claims import fact_values, file_hits, fill_facts, missing_targets
from .prdata import DATA_FILE, load_pr_data
from .retired import describe, load_records, matches, reach_warnings, verdict
from ..lockfile import version_key
from ..rebase.reach import load_partly
from .template import DEFAULT_TEMPLATE, TEMPLATE_PATHS

BRANCH_MAX = 60   # characters after 'pr/': whole words only


def add_parser(sub) -> None:
    help_text = "make a branch with one patch (and its overlay files and unittest) on an upstream git checkout, and a PR body"
    p = sub.add_parser("export-pr", help=help_text, description=help_text)
    p.add_argument("patch", help="the patch: its README label (P1), its NNNN number (0001), its file name, or "
                                 "UPSTREAM/NAME (sglang/0001)")
    p.add_argument("--repo", required=True, metavar="DIR", help="git checkout of the upstream project")
    p.add_argument("--base", metavar="REF", help="commit the PR is based on (default: main if the checkout has it, "
                                                 "else the pinned release tag)")
    p.add_argument("--series", action="store_true",
                   help="also export the patches it depends on, as a "
                        "stack of branches titled [k/N]")
    p.add_argument("--force", action="store_true",
                   help="export a patch marked as already upstream (Backport) or superseded (Superseded-By)")
    p.add_argument("--branch", metavar="NAME", help="default: pr/<the patch subject, whole words>")
    p.add_argument("--remote", metavar="NAME", default="fork",
                   help="your fork's remote in the checkout, for the printed push command (default: fork; origin is "
                        "upstream itself in a plain clone)")
    p.add_argument("--owner", metavar="OWNER", help="your fork's owner for gh pr create --head OWNER:BRANCH "
                                                    "(default: read from the remote's GitHub URL)")
    p.add_argument("--body", metavar="FILE", help="where to write the PR body (default: build/pr/<branch>.md; "
                   "installed, outside a checkout: the upstream checkout's .git/pr-bodies/)")
    p.set_defaults(func=run)


# -- which patch, which branch ---------------------------------------------------------------------
def find_patch(engine, spec: str, force: bool = False):
    """(upstream name, series, index) of the one patch `spec` names exactly (Series.by_name: its label, NNNN
    number, file name or stem; never a part of one), optionally as UPSTREAM/NAME. The line's retired.toml is
    read first: a patch it records is refused with the recorded reason (one the series still holds exports with
    --force). Anything else is a usage error listing what this line has."""
    parts = spec.rstrip("/").split("/")
    key, want_up = parts[-1], (parts[-2] if len(parts) > 1 else "")
    if want_up and want_up not in engine.lock.upstreams:
        raise UsageError(f"export-pr: expected an upstream of line {engine.lock.line} ({', '.join(engine.lock.upstreams)}) "
                         f"before '/', found '{want_up}'")
    names = [want_up] if want_up else list(engine.lock.upstreams)
    every = [(name, engine.series(name)) for name in engine.lock.upstreams]
    for name, series in every:
        held = series.by_name(key) if name in names else None
        for r in load_records(engine.patches_root.parent, name) if name in names else ():
            if r.line != engine.lock.line or not key:
                continue
            if held is not None and matches(r, held.subject, series.label_of(held)) and not force:
                raise PatchkitError(f"export-pr: {held.name}: {describe(r)}; pass --force to export it anyway; "
                                    "nothing written")
            if held is None and (key.upper() == r.label.upper() or key == r.subject):
                raise PatchkitError(f"export-pr: {spec}: line {r.line} no longer carries this patch: {describe(r)}; "
                                    "nothing written")
    hits = [(name, series, series.patches.index(p)) for name, series in every if name in names
            for p in [series.by_name(key)] if p is not None]
    if len(hits) != 1:
        def named(name, series, p) -> str:
            label = series.label_of(p)
            return (f"{label} = " if label else "") + f"{name}/{p.name[:4]}"
        listed = ", ".join(named(n, s, s.patches[i]) for n, s, i in hits) if hits else \
            ", ".join(named(n, s, p) for n, s in every for p in s.patches)
        found = f"{len(hits)} matches" if hits else "none"
        raise UsageError(f"export-pr: expected one patch of line {engine.lock.line} matching '{spec}' exactly (a "
                         f"label, NNNN, file name or stem, optionally UPSTREAM/NAME), found {found}; "
                         f"{'they are' if hits else 'the patches are'}: {listed}")
    return hits[0]


def default_branch(patch) -> str:
    """pr/ + the subject's words, lower case, as many whole words as fit in BRANCH_MAX characters
    (the file name is cut by format-patch mid-word, so it is not used)."""
    return branch_of(patch.subject, patch.name[:4])


def branch_of(subject: str, fallback: str) -> str:
    words = [w for w in re.split(r"[^A-Za-z0-9_.]+", subject.lower()) if w.strip(".")]
    out = ""
    for w in words:
        nxt = f"{out}-{w}" if out else w
        if len(nxt) > BRANCH_MAX:
            break
        out = nxt
    return "pr/" + (out or fallback)


def base_reader(repo: Path, commit: str, prefix: str):
    """A conditions.Reader of wheel paths at `commit` of the checkout (`prefix`: the wheel root in the repo)."""
    def read(rel: str) -> bytes | None:
        proc = checkout_git(repo, "cat-file", "blob", f"{commit}:{prefix}{rel}", check=False, text=False)
        return proc.stdout if proc.returncode == 0 else None
    return read


def upstream_has(patch, read, records=(), own_line: str = "") -> str | None:
    """Why upstream needs no PR of this patch on the base (`read`): its Upstream-Status says Backport, its
    Superseded-By trailers all match there, or a line's retired.toml record matches there; None otherwise."""
    found = superseded_by(replacements_of(patch.trailers, f"{patch.name}: "), read) if read else None
    if found:
        return f"superseded by upstream's {', '.join(found)} on the base"
    recorded = verdict(patch, own_line, list(records), read) if read else None
    if recorded:      # names upstream's definition: more use to the reader than the status alone
        return recorded
    status = (patch.trailer("Upstream-Status") or [""])[0]
    if status.lower().startswith("backport"):
        return f"Upstream-Status: {status}: upstream already has this change"
    return None


def status_gate(patch, force: bool, read=None, records=(), own_line: str = "") -> None:
    """Refuse what is not for upstream: Inappropriate never; already upstream, superseded on the base (its
    Superseded-By replacements all found there, through `read`) or recorded as such or as retired by a line's
    retired.toml, without --force."""
    status = (patch.trailer("Upstream-Status") or [""])[0]
    if status.lower().startswith("inappropriate"):
        raise PatchkitError(f"export-pr: {patch.name}: Upstream-Status: {status}: not meant for upstream, never exported")
    if force:
        return
    why = upstream_has(patch, read, records, own_line)
    if why:
        raise PatchkitError(f"export-pr: {patch.name}: {why}; pass --force to export it anyway")


def chain_of(series, index: int) -> list[int]:
    """Indices of the patch and, first, every patch it depends on (Depends-On, transitively), in series order."""
    names = [p.name for p in series.patches]
    need, todo = set(), [index]
    while todo:
        i = todo.pop()
        if i in need:
            continue
        need.add(i)
        errors = depends_on_errors(series, series.patches[i])
        if errors:
            raise PatchkitError(f"export-pr: {series.patches[i].name}: {errors[0]}")
        todo += [names.index(d) for d in series.patches[i].trailer("Depends-On")]
    return sorted(need)


# -- the user's checkout --------------------------------------------------------------------------
def check_checkout(repo: Path, up) -> None:
    """Refuse a path that is not the top of a clean git checkout."""
    if not repo.is_dir():
        raise PatchkitError(f"export-pr: {repo}: expected a git checkout of {up.repo or up.package}, found no directory")
    top = checkout_git(repo, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != repo.resolve():
        raise PatchkitError(f"export-pr: {repo}: expected the top of a git checkout, found "
                            f"{'a subdirectory of ' + top.stdout.strip() if top.returncode == 0 else 'no git repository'}")
    dirty = checkout_git(repo, "status", "--porcelain", "--untracked-files=no").stdout.splitlines()
    stopped = operation_in_progress(repo)
    if stopped:        # stash cannot save a conflicted index: say what git itself says to do
        what, finish, abort = stopped
        conflicted = [line[3:] for line in dirty if line[:2] in ("DD", "AU", "UD", "UA", "DU", "AA", "UU")]
        raise PatchkitError(f"export-pr: {repo}: expected a clean checkout, found {what} in progress"
                            + (f" with {len(conflicted)} conflicted file(s), e.g. '{conflicted[0]}'" if conflicted else "")
                            + f"; finish it ({finish}) or abort it ({abort}) first; nothing written")
    if dirty:
        raise PatchkitError(f"export-pr: {repo}: expected a clean checkout, found {len(dirty)} changed file(s), "
                            f"e.g. '{dirty[0][3:]}'; commit or stash them first")


# what git leaves in its directory while an operation is stopped, and how git says to finish or abort it
_IN_PROGRESS = (("MERGE_HEAD", "a merge", "resolve the conflicts, git add them, git commit", "git merge --abort"),
                ("CHERRY_PICK_HEAD", "a cherry-pick", "resolve, git add, git cherry-pick --continue",
                 "git cherry-pick --abort"),
                ("REVERT_HEAD", "a revert", "resolve, git add, git revert --continue", "git revert --abort"),
                ("rebase-merge", "a rebase", "resolve, git add, git rebase --continue", "git rebase --abort"),
                ("rebase-apply", "a rebase or git am", "resolve, git add, git rebase --continue or git am --continue",
                 "git rebase --abort or git am --abort"))


def operation_in_progress(repo: Path) -> tuple[str, str, str] | None:
    """(what, how to finish it, how to abort it) of a merge, cherry-pick, revert or rebase the checkout is
    stopped in, None if none."""
    for name, what, finish, abort in _IN_PROGRESS:
        path = checkout_git(repo, "rev-parse", "--git-path", name).stdout.strip()
        if os.path.lexists(Path(repo, path)):
            return what, finish, abort
    return None


def check_branch_name(repo: Path, branch: str) -> None:
    """Refuse a --branch git would read as an option or refuse as a name (git check-ref-format's rules, and
    git branch's: no leading '-', not HEAD), before anything reaches git as a branch."""
    bad = (not branch or branch.startswith("-") or branch == "HEAD"
           or checkout_git(repo, "check-ref-format", f"refs/heads/{branch}", check=False).returncode != 0)
    if bad:
        raise UsageError(f"export-pr --branch: expected a git branch name (git check-ref-format; not starting "
                         f"with '-'), found {branch!r}; nothing written")


_OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")   # GitHub's user and organisation names


def check_publish_names(repo: Path, remote: str, owner: str | None) -> None:
    """Refuse a --remote git could not name a remote by, or an --owner no GitHub account can have, before
    anything is written: both go into the printed commands the user runs next."""
    if (not remote or remote.startswith("-")
            or checkout_git(repo, "check-ref-format", f"refs/remotes/{remote}/x", check=False).returncode != 0):
        raise UsageError(f"export-pr --remote: expected a git remote name (not starting with '-'), found {remote!r}; "
                         "nothing written")
    if owner is not None and not _OWNER.fullmatch(owner):
        raise UsageError(f"export-pr --owner: expected a GitHub owner (letters, digits and '-', at most 39, not "
                         f"starting with '-'), found {owner!r}; nothing written")


def identity(repo: Path) -> str:
    """'Name <email>' the commits will carry: the checkout's git identity (its config, or GIT_AUTHOR_* /
    GIT_COMMITTER_* in the environment), never one git guesses from the host name."""
    idents = []
    for var in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
        proc = checkout_git(repo, "-c", "user.useConfigOnly=true", "var", var, check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise PatchkitError(f"export-pr: {repo}: expected a git identity for the commit (git config user.name "
                                "and user.email), found none; set them with git config first")
        idents.append(proc.stdout.strip().rsplit(" ", 2)[0])
    return idents[0]


def resolve_base(repo: Path, up, base: str | None) -> tuple[str, str]:
    """(commit, name) of the PR's base."""
    candidates = [base] if base else ["main", up.tag] if up.tag else ["main"]
    for ref in candidates:
        sha = checkout_git(repo, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False).stdout.strip()
        if sha:
            return sha, ref
    raise PatchkitError(f"export-pr: {repo}: expected the base {' or '.join(candidates)} in the checkout, found none"
                        + ("" if base else "; pass --base REF"))


def reader(repo: Path, commit: str):
    def read(path: str) -> bytes | None:
        proc = checkout_git(repo, "cat-file", "blob", f"{commit}:{path}", check=False, text=False)
        return proc.stdout if proc.returncode == 0 else None
    return read


def template_at(repo: Path, commit: str) -> str | None:
    """The base's own pull-request template; None when it has none (a wheel checkout has no .github/)."""
    read = reader(repo, commit)
    for path in TEMPLATE_PATHS:
        data = read(path)
        if data is not None:
            return data.decode("utf-8", errors="replace")
    return None


def choose_template(repo: Path, commit: str, data, up) -> tuple[str, str]:
    """(template, note): the base's own (no note); without one, the upstream's own as the series' data keeps it
    (upstream-pr.toml `template`), else generic sections, and a note telling the user to re-export on a clone."""
    found = template_at(repo, commit)
    if found is not None:
        return found, ""
    where = up.repo or up.package
    kept = data.template if data else None
    if kept is not None:
        return kept.text, (f"export-pr: note: the base has no pull-request template (a wheel checkout?): the body "
                           f"follows {where}'s as kept in {kept.path}; re-export on a clone of {where} to follow the "
                           "template its branch has now")
    return DEFAULT_TEMPLATE, (f"export-pr: note: the base has no pull-request template (a wheel checkout?) and none "
                              f"of {where}'s is kept: the body uses generic sections "
                              f"({', '.join(_headings(DEFAULT_TEMPLATE))}); re-export on a clone of {where} to follow "
                              "its own template")


def _headings(template: str) -> list[str]:
    return [line.lstrip("#").strip() for line in template.splitlines() if line.startswith("## ")]


def body_problem(path: Path, default_dir: Path | None) -> str | None:
    """Why the PR body cannot go to `path`: a link on the way under build/pr (`default_dir`), or, for a path
    the user named, anything already there (a dangling link too: it would be written through)."""
    if default_dir is not None:
        link = fsio.link_on_the_way(default_dir.parent, f"{default_dir.name}/{path.name}")
        if link is not None:
            return f"{link}: expected a regular file or nothing, found a symlink (to {os.readlink(link)}); remove it"
        kind = fsio.kind_of(path)
        return None if kind in (None, "a regular file") else f"{path}: expected a regular file or nothing, found {kind}"
    kind = fsio.kind_of(path)
    if kind is not None:    # the user's file: never overwritten
        return f"--body {path}: expected a new file, found {'an existing one' if kind == 'a regular file' else kind}; " \
               "pass another path or remove it"
    return None


def write_body(path: Path, body: str) -> None:
    """The PR body, written at once (temp file + rename: never through a link); a failure names the path."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fsio.atomic_write(path, body.encode("utf-8"), fault="pr-body")
    except OSError as exc:
        raise PatchkitError(f"{path}: cannot write the PR body ({exc.strerror or exc})") from None


def branch_exists(repo: Path, branch: str) -> bool:
    return checkout_git(repo, "rev-parse", "-q", "--verify", f"refs/heads/{branch}", check=False).returncode == 0


def write_commit(repo: Path, parent: str, files: dict[str, bytes | None], message: str) -> str:
    """A commit of `files` (repo paths) on top of parent, built through a private index; the author and
    committer are the checkout's git identity."""
    with tempfile.TemporaryDirectory(prefix="patchkit-pr-index-") as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        checkout_git(repo, "read-tree", parent, env=index)
        for path, data in files.items():
            if data is None:
                checkout_git(repo, "update-index", "--force-remove", "--", path, env=index)
                continue
            blob = checkout_git(repo, "hash-object", "-w", "--stdin", input=data, text=False).stdout.decode().strip()
            mode = checkout_git(repo, "ls-tree", parent, "--", path).stdout.split(" ", 1)[0] or "100644"
            checkout_git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}", env=index)
        tree = checkout_git(repo, "write-tree", env=index).stdout.strip()
    return checkout_git(repo, "commit-tree", tree, "-p", parent, input=message).stdout.strip()


# -- one PR ---------------------------------------------------------------------------------------
@dataclass
class Planned:
    patch: object
    branch: str
    commit: str              # the commit the branch will point at
    files: dict              # repo path -> bytes (None = deleted)
    message: str
    body: str
    body_path: Path
    title: str
    prefix: str = ""         # the wheel root in the repo


def plan_one(engine, name, series, index, data, repo, parent, parent_name, base_name, template, stack, branch,
             body_path, has=lambda p: None):
    up = engine.lock.upstream(name)
    prefix = up.repo_prefix or ""
    patch = series.patches[index]
    pr = data.patches.get(patch.name) if data else None
    if pr is None:
        raise PatchkitError(f"export-pr: {patch.name}: expected its upstream description in "
                            f"{series.patches[index].path.parent / DATA_FILE}, found none")
    pristine = engine.pristine(name)
    read = reader(repo, parent)
    change = carried_change(series, index, pristine, lambda rel: read(prefix + rel), parent_name, prefix, has)
    for rel in patch.overlay:
        if read(prefix + rel) is not None:
            raise PatchkitError(f"export-pr: {patch.name} does not apply to {parent_name}: {prefix}{rel} "
                                "already exists there (the patch adds it)")
        change[rel] = series.overlay_bytes(rel)
    return _planned(patch, pr, change, data, read, prefix, parent_name, base_name, template, stack, branch, body_path)


def _planned(patch, pr, change, data, read, prefix, parent_name, base_name, template, stack, branch, body_path):
    """Check one PR's files (wheel path -> bytes) against its description and plan its commit and body."""
    missing = [rel for rel in change if rel not in pr.modifications]
    extra = [rel for rel in pr.modifications if rel not in change]
    if missing or extra:
        raise PatchkitError(f"export-pr: {data.path}: {patch.name}: expected a modifications line for each file the "
                            f"commit touches, found {'none for ' + ', '.join(missing) if missing else 'lines for files it does not touch: ' + ', '.join(extra)}")
    files = {prefix + rel: data_ for rel, data_ in change.items()}
    where = f"export-pr: {patch.name}: {data.path}"
    pr = stated(pr, fact_values(pr.facts, change.get, where), where)   # {facts} read from the shipped files
    listing = [(prefix + rel, pr.modifications[rel]) for rel in change]
    test_command = ""
    if pr.test_file is not None:
        if read(pr.test_dest) is not None:
            raise PatchkitError(f"export-pr: {patch.name} does not apply to {parent_name}: {pr.test_dest} already exists there")
        files[pr.test_dest] = pr.test_file.read_bytes()
        listing.append((pr.test_dest, test_description(pr.test_parts)))
        test_command = f"{pr.test_runner} {pr.test_dest}"
    for src, dest, what in pr.files:
        if read(dest) is not None or dest in files:
            raise PatchkitError(f"export-pr: {patch.name} does not apply to {parent_name}: {dest} already exists there")
        files[dest] = src.read_bytes()
        listing.append((dest, what))
    exists = lambda path: files.get(path) is not None or (path not in files and read(path) is not None)  # noqa: E731
    for command in [test_command, *pr.reproduce.values(),
                    *(m.command for m in pr.accuracy + pr.benchmark if m.harness == "upstream")]:
        missing = missing_targets(command, exists, prefix)
        if missing:
            raise PatchkitError(f"{where}: expected every command the PR prints to run in an upstream checkout with "
                                f"this change, found '{missing[0]}' in '{command.strip().splitlines()[0]}' missing "
                                f"from {parent_name} (mark a result measured elsewhere harness = \"standalone\")")
    message = commit_message(patch, pr)
    body = pr_body(pr, template, listing, base_name, stack, test_command)
    for what, text in {"PR body": body, "commit message": message}.items():
        hits = data.vocabulary_hits(text)
        if hits:
            raise PatchkitError(f"export-pr: {patch.name}: its {what} names this repository's own '{hits[0]}' "
                                f"(forbidden by {data.path}); fix the upstream description")
    for path, data_ in files.items():
        hits = file_hits(data.forbid, path, read(path), data_) if data_ is not None else []
        if hits:
            path, line, term = hits[0]
            raise PatchkitError(f"export-pr: {patch.name}: {path}:{line} names this repository's own '{term}' "
                                f"(forbidden by {data.path}); nothing exported may cite it")
    return Planned(patch, branch, "", files, message, body, body_path, title(pr, stack), prefix)


def body_dir(engine, repo: Path) -> Path:
    """build/pr in a checkout; run from an installed package (no build/), the upstream checkout's own git
    directory: the one tree the command writes to, and never its work tree."""
    if engine.read_only:
        return Path(checkout_git(repo, "rev-parse", "--absolute-git-dir").stdout.strip()) / "pr-bodies"
    return engine.build_root / "pr"


def stated(pr, values: dict[str, str], where: str):
    """The upstream description with every `{fact}` of its texts replaced by the value read from the code."""
    fill = lambda text: fill_facts(text, values, where)  # noqa: E731
    measured = lambda ms: [replace(m, result=fill(m.result)) for m in ms]  # noqa: E731
    return replace(pr, title=fill(pr.title), motivation=fill(pr.motivation),
                   modifications={k: fill(v) for k, v in pr.modifications.items()},
                   accuracy=measured(pr.accuracy), benchmark=measured(pr.benchmark))


def _github_repo(url: str) -> str:
    """owner/name of a GitHub URL (https or ssh form), '' for anything else."""
    m = re.match(r"(?:https?://github\.com/|git@github\.com:|ssh://git@github\.com/)([^/]+/[^/]+?)(?:\.git)?/?$", url or "")
    return m.group(1) if m else ""


def publish_commands(repo: Path, planned, remote: str, owner: str | None, gh_repo: str, gh_base: str) -> list[str]:
    """The push to the user's fork and the `gh pr create` of each branch, from the fork (OWNER:BRANCH) into
    upstream; a missing remote, or one that is upstream itself, is said, with the command that fixes it."""
    url = checkout_git(repo, "remote", "get-url", remote, check=False).stdout.strip()
    out = []
    if not url:
        out.append(f"(no remote '{remote}' in {repo}: add your fork first, e.g. git -C {shlex.quote(str(repo))} remote "
                   f"add {remote} https://github.com/OWNER/{gh_repo.split('/')[-1] if gh_repo else 'REPO'})")
    elif gh_repo and _github_repo(url).lower() == gh_repo.lower():
        out.append(f"(the remote '{remote}' is upstream itself ({url}): pass --remote with your fork's remote)")
    owner = owner or (_github_repo(url).split("/")[0] if _github_repo(url) and _github_repo(url).lower() != gh_repo.lower()
                      else "OWNER")
    if owner == "OWNER":
        out.append("(replace OWNER with your fork's owner, or pass --owner)")
    out.append("to publish (push to your fork, then open the PRs against upstream):")
    out += [f"  git -C {shlex.quote(str(repo))} push -u {shlex.quote(remote)} {shlex.quote(pl.branch)}" for pl in planned]
    out += [f"  gh pr create{' --repo ' + gh_repo if gh_repo else ''} --base {gh_base} --head {shlex.quote(owner + ':' + pl.branch)} "
            f"--title {shlex.quote(pl.title)} --body-file {shlex.quote(str(pl.body_path))}" for pl in planned]
    return out


# -- the release the checkout is at, against the newest line --------------------------------------
def release_at(repo: Path, commit: str) -> tuple[str, str] | None:
    """(version, tag) of the newest release tag (vX.Y[.Z], no pre-release) `commit` contains; None when none does."""
    tags = checkout_git(repo, "tag", "--merged", commit, check=False).stdout.split()
    found = [(m.group(1), t) for t in tags for m in [re.fullmatch(r"v?(\d+(?:\.\d+)+)", t)] if m]
    return max(found, key=lambda vt: version_key(vt[0])) if found else None


def newest_line_verdict(engine, name: str, series, patch, repo: Path, base_commit: str, base_name: str):
    """(refuse, text) when the base is a release older than the newest line's pin of this upstream: upstream's
    branch has moved past it. Refused (without --force) when the newest line no longer carries the patch (its
    retired.toml records it), else a warning naming the newest line; None when the base is not older, or its
    release cannot be told (no release tag), or this is the newest line."""
    newest = engine.lock.lines[-1] if engine.lock.lines else engine.lock.line
    if newest == engine.lock.line:
        return None
    ahead = engine.for_line(newest)
    if name not in ahead.lock.upstreams:
        return None
    pin, at = ahead.lock.upstream(name), release_at(repo, base_commit)
    if at is None or version_key(at[0]) >= version_key(pin.version):
        return None
    said = (f"{base_name} is {pin.package} {at[0]} (tag {at[1]}), older than {pin.package} {pin.version}, the pin of "
            f"line {newest}, the newest: upstream's branch has moved on since")
    label = series.label_of(patch)
    gone = [r for r in load_records(engine.patches_root.parent, name) if r.line == newest
            and matches(r, patch.subject, label)]
    if gone:
        return True, f"{said}, and line {newest} no longer carries this patch: {describe(gone[0])}"
    return False, (f"{said}; line {newest} carries {label or 'its own version of this patch'}: export that one onto a "
                   "clone of upstream's branch to open the PR")


# -- the command: gate, plan, write ---------------------------------------------------------------
@dataclass
class Request:
    """What gate() settled, for plan() and write(): the patch, the checkout, the base, the chain."""
    engine: object
    args: object
    name: str
    series: object
    index: int
    up: object
    repo: Path
    who: str
    data: object
    base_commit: str
    base_name: str
    template: str
    template_note: str       # said after the export: the base had no template of its own
    warnings: list           # said after the export (a refusal stays one line): the newest line's word
    chain: list
    has: object


def gate(engine, args) -> Request:
    """Every check of the request before anything is planned: the patch's name (and the line's retired.toml),
    the checkout, the names given, the base, the patch's status there, the newest line's verdict, the body path."""
    name, series, index = find_patch(engine, args.patch, args.force)
    if args.series and (args.branch or args.body):
        raise UsageError("export-pr --series names its branches and bodies itself: drop --branch/--body")
    up = engine.lock.upstream(name)
    repo = Path(args.repo)
    check_checkout(repo, up)
    if args.branch is not None:
        check_branch_name(repo, args.branch)
    check_publish_names(repo, args.remote, args.owner)
    who = identity(repo)
    data = load_pr_data(series.patches[index].path.parent)
    base_commit, base_name = resolve_base(repo, up, args.base)
    template, template_note = choose_template(repo, base_commit, data, up)
    chain = chain_of(series, index) if args.series else [index]
    patches = [series.patches[i] for i in chain]
    read_base = base_reader(repo, base_commit, up.repo_prefix)
    records = load_records(engine.patches_root.parent, name)
    has = lambda p: upstream_has(p, read_base, records, engine.lock.line)  # noqa: E731
    if args.series:   # what the base already has needs no PR of its own: the stack starts after it
        dropped = [p for p in patches[:-1] if has(p)]
        for p in dropped:
            print(f"export-pr: {p.name} is not exported: {has(p)}")
        chain = [i for i in chain if series.patches[i] not in dropped]
        patches = [series.patches[i] for i in chain]
    for p in patches:
        status_gate(p, args.force, read_base, records, engine.lock.line)
    warnings = []
    for p in patches:
        said = newest_line_verdict(engine, name, series, p, repo, base_commit, base_name)
        if said and said[0] and not args.force:
            raise PatchkitError(f"export-pr: {p.name}: {said[1]}; pass --force to export it anyway; nothing written")
        if said:
            warnings.append(f"export-pr: warning: {p.name}: {said[1]}")
    partly = load_partly(series.patches[index].path.parent, series.patches, lambda _msg: None)
    for p in patches:
        for w in reach_warnings(p, partly.get(p.name), read_base):
            print(f"export-pr: warning: {p.name} is {w}; exported all the same", file=sys.stderr)
    if args.body and body_problem(Path(args.body), None):   # the user's file: never overwritten
        raise PatchkitError(f"export-pr: {body_problem(Path(args.body), None)}; nothing written")
    return Request(engine, args, name, series, index, up, repo, who, data, base_commit, base_name, template, template_note,
                   warnings, chain, has)


def plan(req: Request) -> list[Planned]:
    """Each branch of the request as a commit (objects only: no ref moves) with its message and body."""
    engine, args, series, data, repo = req.engine, req.args, req.series, req.data, req.repo
    patches = [series.patches[i] for i in req.chain]
    # Where the first branch of the chain starts: the base, or (a lone patch with Depends-On) the branch
    # of the last patch it needs, which must already exist and contain the base.
    parent, parent_name, parent_pr = req.base_commit, req.base_name, None
    # a dependency the base already has is no branch to build on
    deps = [d for d in patches[0].trailer("Depends-On")
            if not req.has(series.patches[[p.name for p in series.patches].index(d)])]
    if deps:
        order = [p.name for p in series.patches]
        dep = series.patches[max(order.index(d) for d in deps)]
        dep_branch = default_branch(dep)
        tip = checkout_git(repo, "rev-parse", "-q", "--verify", f"refs/heads/{dep_branch}^{{commit}}", check=False).stdout.strip()
        if not tip:
            raise PatchkitError(f"export-pr: {patches[0].name} depends on {dep.name}: expected its branch {dep_branch} in "
                                f"{repo}, found none; export {dep.name} first (or pass --series)")
        for d in deps:
            other = default_branch(series.patches[order.index(d)])
            if checkout_git(repo, "merge-base", "--is-ancestor", other, tip, check=False).returncode != 0:
                raise PatchkitError(f"export-pr: {patches[0].name}: expected {dep_branch} to contain {other}, found it does not")
        if checkout_git(repo, "merge-base", "--is-ancestor", req.base_commit, tip, check=False).returncode != 0:
            raise PatchkitError(f"export-pr: {patches[0].name}: expected {dep_branch} to be based on {req.base_name}, "
                                f"found it is not; pass the base it was exported on (--base)")
        dep_pr = data.patches.get(dep.name) if data else None
        parent, parent_name, parent_pr = tip, dep_branch, (dep_branch, dep_pr.title if dep_pr else dep.subject)

    planned, total = [], len(req.chain) if len(req.chain) > 1 else 0
    for k, i in enumerate(req.chain, 1):
        patch = series.patches[i]
        branch = args.branch or default_branch(patch)
        if branch_exists(repo, branch) or any(pl.branch == branch for pl in planned):
            raise PatchkitError(f"export-pr: {repo}: branch {branch} already exists; pass --branch NAME or delete it")
        stack = Stack(k if total else 0, total, *(parent_pr or ("", "")))
        body_path = Path(args.body) if args.body else body_dir(engine, repo) / (branch.replace("/", "-") + ".md")
        planned.append(plan_one(engine, req.name, series, i, data, repo, parent, parent_name, req.base_name,
                                req.template, stack, branch, body_path, req.has))
        # the next patch of the stack builds on this one: plan it against this commit's tree
        parent = planned[-1].commit = write_commit(repo, parent, planned[-1].files, planned[-1].message)
        parent_name, parent_pr = branch, (branch, planned[-1].title)

    default_dir = None if args.body else body_dir(engine, repo)
    for pl in planned:
        problem = body_problem(pl.body_path, default_dir)
        if problem:
            raise PatchkitError(f"export-pr: {problem}; nothing written")
    return planned


def write(repo: Path, planned: list[Planned]) -> None:
    """The visible writes, branches first, then the bodies; all or nothing: a body that cannot be written takes
    the branches (and any body written before it) back, so a re-run starts clean."""
    made, written = [], []
    try:
        for pl in planned:
            # refs/heads/NAME with "" as the old value: created only if absent, never read as an option
            checkout_git(repo, "update-ref", f"refs/heads/{pl.branch}", pl.commit, "")
            made.append(pl)
            checkout_git(repo, "config", "--", f"branch.{pl.branch}.description", pl.body)
        for pl in planned:
            old_bytes = pl.body_path.read_bytes() if fsio.kind_of(pl.body_path) == "a regular file" else None
            write_body(pl.body_path, pl.body)
            written.append((pl.body_path, old_bytes))
    except (PatchkitError, OSError) as exc:
        for pl in made:      # the branches first: they are what would make a re-run refuse
            checkout_git(repo, "config", "--unset", f"branch.{pl.branch}.description", check=False)
            checkout_git(repo, "update-ref", "-d", f"refs/heads/{pl.branch}", pl.commit, check=False)
        kept = []
        for path, old_bytes in reversed(written):
            try:
                fsio.remove_stale([path]) if old_bytes is None else fsio.atomic_write(path, old_bytes)
            except (PatchkitError, OSError):
                kept.append(str(path))
        said = (f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) and exc.filename and exc.strerror
                else str(exc))
        raise PatchkitError(f"export-pr: {said.removeprefix('export-pr: ')}; nothing kept: no branch made, "
                            + (f"but {', '.join(kept)} could not be put back" if kept else "no PR body written")) from None


def run(engine, args) -> int:
    req = gate(engine, args)
    planned = plan(req)
    write(req.repo, planned)
    repo, base_name = req.repo, req.base_name
    gh_repo = _github_repo(req.up.repo)
    gh_base = base_name if branch_exists(repo, base_name) else "BRANCH"
    if gh_base == "BRANCH":
        print(f"(the base {base_name} is not a branch: replace BRANCH with the upstream branch the PR targets)")
    for pl in planned:
        print(f"export-pr: {repo}: branch {pl.branch} = {pl.commit[:12]} on {base_name} ({len(pl.files)} file(s): {', '.join(pl.files)}), "
              f"author {req.who}")
        print(f"export-pr: PR body written to {pl.body_path}")
    for warning in req.warnings:
        print(warning, file=sys.stderr)
    if req.template_note:
        print(req.template_note)
    for line in publish_commands(repo, planned, args.remote, args.owner, gh_repo, gh_base):
        print(line)
    return 0
