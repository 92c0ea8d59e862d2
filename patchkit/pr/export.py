"""`apply.py export-pr PATCH --repo DIR`: one patch as a branch on an upstream git checkout, plus a PR body.

The checkout must be clean and at the pinned release (its tag, and the touched files byte-identical to
the pinned artifact). The commit is built with git plumbing on a private index, so the user's work
tree and current branch are never touched. Paths move from wheel layout to repo layout through
pin.lock's `repo_prefix`. A patch written on top of an earlier patch of the series is carried to the
bare release with a 3-way merge (`git merge-file`); if that conflicts, export the earlier one first.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

from .. import PatchkitError
from ..check import depends_on_errors
from ..gitcmd import author_env, checkout_git, git
from ..hashing import sha256_bytes
from .body import commit_message, pr_body


def add_parser(sub) -> None:
    help_text = "make a branch with one patch (and its overlay files) on an upstream git checkout, and a PR body"
    p = sub.add_parser("export-pr", help=help_text, description=help_text)
    p.add_argument("patch", help="patch file name, its NNNN number, or UPSTREAM/NAME")
    p.add_argument("--repo", required=True, metavar="DIR", help="git checkout of the upstream project at the pinned tag")
    p.add_argument("--branch", metavar="NAME", help="default: pr/<patch name without number>")
    p.add_argument("--body", metavar="FILE", help="where to write the PR body (default: build/pr/<branch>.md)")
    p.set_defaults(func=run)


# -- which patch ----------------------------------------------------------------------------------
def find_patch(engine, spec: str):
    """(upstream name, series, index) of the one patch `spec` names."""
    parts = spec.rstrip("/").split("/")
    key, want_up = parts[-1], (parts[-2] if len(parts) > 1 else "")
    hits = []
    for name in engine.lock.upstreams:
        if want_up and name != want_up:
            continue
        series = engine.series(name)
        for i, p in enumerate(series.patches):
            stem = p.name[:-len(".patch")]
            if key in (p.name, stem) or (key.isdigit() and stem.split("-", 1)[0] == key.zfill(4)):
                hits.append((name, series, i))
    if not hits:
        for name in engine.lock.upstreams:
            if want_up and name != want_up:
                continue
            series = engine.series(name)
            hits += [(name, series, i) for i, p in enumerate(series.patches) if key.lower() in p.name.lower()]
    if len(hits) != 1:
        found = ", ".join(f"{n}/{s.patches[i].name}" for n, s, i in hits) or "none"
        raise PatchkitError(f"export-pr: expected exactly one patch matching '{spec}', found {found}")
    return hits[0]


def default_branch(patch_name: str) -> str:
    return "pr/" + re.sub(r"^\d{4}-", "", patch_name[:-len(".patch")])


def stack_base(repo: Path, series, index: int, head: str, prefix: str) -> tuple[str, object]:
    """(parent commit, reader of its files) for the new branch: HEAD, or, for a patch with Depends-On:
    trailers, the tip of the branch export-pr made for the last patch it needs (refused if missing)."""
    patch = series.patches[index]
    errors = depends_on_errors(series, patch)
    if errors:
        raise PatchkitError(f"export-pr: {patch.name}: {errors[0]}")
    deps = patch.trailer("Depends-On")
    if not deps:
        return head, None
    order = [p.name for p in series.patches]
    tips = []
    for dep in sorted(deps, key=order.index):
        branch = default_branch(dep)
        tip = checkout_git(repo, "rev-parse", "-q", "--verify", f"refs/heads/{branch}^{{commit}}", check=False).stdout.strip()
        if not tip:
            raise PatchkitError(f"export-pr: {patch.name} depends on {dep}: expected its branch {branch} in {repo}, "
                                f"found none; export {dep} first")
        tips.append(tip)
    tip = tips[-1]  # the latest dependency's branch; the others must be part of it
    for other in [head] + tips:
        if checkout_git(repo, "merge-base", "--is-ancestor", other, tip, check=False).returncode != 0:
            raise PatchkitError(f"export-pr: {patch.name}: expected {tip[:12]} (the branch of a patch it depends on) "
                                f"to contain {other[:12]}, found it does not")

    def read(rel: str) -> bytes | None:
        proc = checkout_git(repo, "cat-file", "blob", f"{tip}:{prefix}{rel}", check=False, text=False)
        return proc.stdout if proc.returncode == 0 else None

    return tip, read


# -- the change, relative to the bare release -----------------------------------------------------
def standalone_change(series, index: int, pristine, ours_of=None) -> dict[str, bytes | None]:
    """New bytes (None = deleted) of every file patch `index` touches, applied to the pinned release alone
    (or to the files `ours_of(path)` returns: the branch of a patch it depends on)."""
    patch = series.patches[index]
    mine = list(dict.fromkeys(patch.paths))
    with tempfile.TemporaryDirectory(prefix="patchkit-pr-") as tmp:
        scratch = Path(tmp) / "tree"
        git(Path(tmp), "init", "-q", "tree")
        for rel in mine:
            if pristine.has(rel):
                (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
                (scratch / rel).write_bytes(pristine.read(rel))
        base = {}
        for j, p in enumerate(series.patches[: index + 1]):
            if j == index:
                base = {rel: (scratch / rel).read_bytes() if (scratch / rel).exists() else None for rel in mine}
            if not set(p.paths) & set(mine):
                continue
            files = [rel for rel in dict.fromkeys(p.paths) if rel in mine]
            include = [f"--include={rel}" for rel in files]
            proc = git(scratch, "apply", "--whitespace=nowarn", *include, str(p.path.resolve()), check=False)
            if proc.returncode != 0:
                raise PatchkitError(f"{p.path}: does not apply to the pinned release: {proc.stderr.strip()[:200]}")
        theirs = {rel: (scratch / rel).read_bytes() if (scratch / rel).exists() else None for rel in mine}
        result = {}
        for rel in mine:
            ours = ours_of(rel) if ours_of else pristine.read(rel) if pristine.has(rel) else None
            if base[rel] == ours or theirs[rel] is None or base[rel] is None or ours is None:
                result[rel] = theirs[rel]
                continue
            for label, data in (("ours", ours), ("base", base[rel]), ("theirs", theirs[rel])):
                (Path(tmp) / label).write_bytes(data)
            merged = git(Path(tmp), "merge-file", "-p", "ours", "base", "theirs", check=False, text=False)
            if merged.returncode != 0:
                earlier = [p.name for p in series.patches[:index] if rel in p.paths]
                raise PatchkitError(f"export-pr: {patch.name} changes {rel} on top of {', '.join(earlier)}; "
                                    "on the bare release the change conflicts: export that patch first")
            result[rel] = merged.stdout
    return result


# -- the user's checkout --------------------------------------------------------------------------
def check_checkout(repo: Path, up, pristine, paths: list[str], prefix: str) -> str:
    """Refuse a checkout that is not git, dirty, or not the pinned release; returns HEAD's commit."""
    if not repo.is_dir():
        raise PatchkitError(f"export-pr: {repo}: expected a git checkout of {up.repo or up.package}, found no directory")
    top = checkout_git(repo, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != repo.resolve():
        raise PatchkitError(f"export-pr: {repo}: expected the top of a git checkout, found "
                            f"{'a subdirectory of ' + top.stdout.strip() if top.returncode == 0 else 'no git repository'}")
    dirty = checkout_git(repo, "status", "--porcelain", "--untracked-files=no").stdout.splitlines()
    if dirty:
        raise PatchkitError(f"export-pr: {repo}: expected a clean checkout, found {len(dirty)} changed file(s), "
                            f"e.g. '{dirty[0][3:]}'; commit or stash them first")
    head = checkout_git(repo, "rev-parse", "HEAD").stdout.strip()
    if up.tag:
        tagged = checkout_git(repo, "rev-parse", "-q", "--verify", f"refs/tags/{up.tag}^{{commit}}", check=False).stdout.strip()
        if tagged and tagged != head:
            found = checkout_git(repo, "describe", "--tags", "--always", "HEAD").stdout.strip()
            raise PatchkitError(f"export-pr: {repo}: expected HEAD at {up.tag} ({up.label}), found {found}; "
                                f"run 'git checkout {up.tag}' first")
    for rel in paths:
        expected = pristine.read(rel) if pristine.has(rel) else None
        where = repo / (prefix + rel)
        found = where.read_bytes() if where.is_file() else None
        if found != expected:
            state = "absent" if found is None else f"sha256 {sha256_bytes(found)[:12]}"
            want = "absent" if expected is None else f"sha256 {sha256_bytes(expected)[:12]}"
            raise PatchkitError(f"export-pr: {repo}: expected {prefix + rel} as in {up.label} ({want}), "
                                f"found {state}: the checkout is not the pinned release")
    return head


def make_commit(repo: Path, head: str, files: dict[str, bytes | None], message: str, author: dict, branch: str) -> str:
    """Commit `files` (repo paths) on top of head as `branch`, through a private index."""
    with tempfile.TemporaryDirectory(prefix="patchkit-pr-index-") as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        checkout_git(repo, "read-tree", head, env=index)
        for path, data in files.items():
            if data is None:
                checkout_git(repo, "update-index", "--force-remove", "--", path, env=index)
                continue
            blob = checkout_git(repo, "hash-object", "-w", "--stdin", input=data, text=False).stdout.decode().strip()
            mode = checkout_git(repo, "ls-tree", head, "--", path).stdout.split(" ", 1)[0] or "100644"
            checkout_git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}", env=index)
        tree = checkout_git(repo, "write-tree", env=index).stdout.strip()
    ident = {} if checkout_git(repo, "config", "user.email", check=False).stdout.strip() else {
        "GIT_COMMITTER_NAME": author.get("GIT_AUTHOR_NAME", "patchkit"),
        "GIT_COMMITTER_EMAIL": author.get("GIT_AUTHOR_EMAIL", "patchkit@invalid")}
    commit = checkout_git(repo, "commit-tree", tree, "-p", head, env={**author, **ident}, input=message).stdout.strip()
    checkout_git(repo, "branch", branch, commit)
    return commit


def run(engine, args) -> int:
    name, series, index = find_patch(engine, args.patch)
    up = engine.lock.upstream(name)
    patch = series.patches[index]
    prefix = up.repo_prefix or ""
    repo = Path(args.repo)
    branch = args.branch or default_branch(patch.name)
    overlay = patch.overlay
    pristine = engine.pristine(name)
    body_path = Path(args.body) if args.body else engine.build_root / "pr" / (branch.replace("/", "-") + ".md")
    if args.body and body_path.exists():   # the user's file: never overwritten (the default lives under build/)
        raise PatchkitError(f"export-pr: --body {body_path}: expected a new file, found an existing one; "
                            "pass another path or remove it; nothing written")
    head = check_checkout(repo, up, pristine, list(dict.fromkeys(patch.paths)) + overlay, prefix)
    if checkout_git(repo, "rev-parse", "-q", "--verify", f"refs/heads/{branch}", check=False).returncode == 0:
        raise PatchkitError(f"export-pr: {repo}: branch {branch} already exists; pass --branch NAME or delete it")
    parent, ours_of = stack_base(repo, series, index, head, prefix)
    change = standalone_change(series, index, pristine, ours_of)
    for rel in overlay:
        change[rel] = series.overlay_bytes(rel)
    files = {prefix + rel: data for rel, data in change.items()}
    # Depends-On: names a file of this series: the branch's parent says it upstream
    message = "".join(l for l in commit_message(patch).splitlines(True) if not l.startswith("Depends-On: "))
    commit = make_commit(repo, parent, files, message, author_env(patch.author, patch.date), branch)
    kinds = [(prefix + rel, "deleted" if data is None else "new file" if not pristine.has(rel) else "modified")
             for rel, data in change.items()]
    base = f"{up.package} {up.tag or up.version} ({head[:12]})"
    if parent != head:
        base = f"branch {', '.join(default_branch(d) for d in patch.trailer('Depends-On'))} ({parent[:12]}) on {base}"
    body_path.parent.mkdir(parents=True, exist_ok=True)
    body = pr_body(patch, engine.repo, kinds, base)
    body_path.write_text(body, encoding="utf-8")
    # also git's own place for it, which `git format-patch --cover-from-description` and request-pull read
    checkout_git(repo, "config", f"branch.{branch}.description", body)
    print(f"export-pr: {repo}: branch {branch} = {commit[:12]} on {up.tag or head[:12] if parent == head else parent[:12]} "
          f"({len(files)} file(s): {', '.join(files)})")
    print(f"export-pr: PR body written to {body_path}")
    return 0
