"""A scratch git repository holding the pristine release as one commit and the series as commits on top.

Developers edit patches there (`apply.py worktree`, commit, `apply.py export`); `check` uses the same
round trip to prove that importing and re-exporting the series reproduces every patch byte for byte.
Each overlay (new) file is part of the commit of the patch that claims it (its `Overlay:` trailer), so the
worktree shows a change whole; `export` takes those files out of the patches and back to overlay/.
"""
from __future__ import annotations

import posixpath
import tempfile
from pathlib import Path

from . import PatchkitError, fsio
from .fsio import atomic_write
from .gitcmd import git, git_import, identity_line, init_repo
from .patchfile import PatchFile, split_message
from .pristine import Pristine
from .series import Series

FORMAT_PATCH_ARGS = ("format-patch", "--zero-commit", "--full-index", "--no-signature", "--no-stat",
                     "-N", "--encoding=UTF-8")
PRISTINE_TAG = "pristine"


def _quoted(path: str) -> str:
    """A path as fast-import reads it whatever its characters: C-style quoted."""
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def commit_release(repo: Path, pristine: Pristine, root: str, message: str, branch: str = "main",
                   prefix: str = "", parent: str | None = None) -> str:
    """Commit the release's files under `root` (at `prefix` in the repository; not its dist-info, which is no part
    of the upstream repository) as one commit on `branch`, on `parent` or as a root commit; its id. The commit is
    the one `git add -A && git commit -m MESSAGE` of the unpacked files makes (same blobs, modes, identity and
    dates), but the files are streamed from the verified wheel into git, never written or read back: a
    release's tree is tens of thousands of files. The work tree is left alone (check the branch out to see it)."""
    text = git(repo, "stripspace", input=message).stdout.encode()   # the message as `git commit -m` cleans it

    def stream():
        n = 0
        for n, (name, data) in enumerate(pristine.verified_files(root), 1):
            yield b"blob\nmark :%d\ndata %d\n" % (n, len(data)) + data + b"\n"
        head = [f"commit refs/heads/{branch}", f"mark :{n + 1}", f"author {identity_line('AUTHOR')}",
                f"committer {identity_line('COMMITTER')}", f"data {len(text)}"]
        yield "\n".join(head).encode() + b"\n" + text
        yield (f"from {parent}\n" if parent else "").encode() + b"deleteall\n"
        for i, name in enumerate(pristine.files_under(root), 1):
            yield f"M 100644 :{i} {_quoted(posixpath.join(prefix, name) if prefix else name)}\n".encode()
        yield b"\ndone\n"

    git_import(repo, stream())
    return git(repo, "rev-parse", f"refs/heads/{branch}").stdout.strip()


def build_worktree(dest: Path, series: Series, pristine: Pristine, root: str, label: str,
                   full_tree: bool = True) -> Path:
    """Create dest as a git repo: pristine commit (tagged), then one commit per patch via `git am`."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise PatchkitError(f"{dest}: expected an empty or new directory, found existing files")
    init_repo(dest)
    if full_tree:
        commit_release(dest, pristine, root, f"pristine {label}")
        git(dest, "reset", "-q", "--hard")      # the files of the commit, written once by git
    else:
        for p in series.patches:
            for path in p.paths:
                if pristine.has(path):
                    (dest / path).parent.mkdir(parents=True, exist_ok=True)
                    (dest / path).write_bytes(pristine.read(path))
        git(dest, "add", "-A")
        git(dest, "commit", "-q", "--allow-empty", "-m", f"pristine {label}")
    git(dest, "tag", PRISTINE_TAG)
    commit_patches(dest, series.patches, label, {rel: series.overlay_bytes(rel) for rel in series.overlay_owner})
    return dest


def commit_patches(repo: Path, patches: list[PatchFile], label: str,
                   overlay: dict[str, bytes] | None = None) -> list[str]:
    """One commit per patch on HEAD (`git am`: each keeps its patch's author, date and message), with the
    `overlay` files (wheel path -> bytes) each patch claims added to its commit; their ids."""
    start = git(repo, "rev-parse", "HEAD").stdout.strip()
    for p in patches:
        proc = git(repo, "am", "-q", "--committer-date-is-author-date", str(p.path.resolve()), check=False)
        if proc.returncode != 0:
            git(repo, "am", "--abort", check=False)
            raise PatchkitError(f"{p.path}: expected it to apply to pristine {label}, found git am failing: "
                                f"{(proc.stderr or proc.stdout).strip().splitlines()[0]}")
        mine = [rel for rel in p.overlay if overlay and rel in overlay]
        for rel in mine:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_bytes(overlay[rel])
        if mine:
            git(repo, "add", "--", *mine)
            git(repo, "commit", "-q", "--amend", "--no-edit", "--no-verify")
    return git(repo, "rev-list", "--reverse", f"{start}..HEAD").stdout.split()


def overlay_claims(worktree: Path) -> dict[str, bytes]:
    """The overlay files the worktree's commits claim (`Overlay:` trailers), as each claiming commit holds them.

    A claimed file that its commit lacks, a file claimed twice, or one that another commit changes (the series
    keeps an overlay file whole, in one patch) is a one-line PatchkitError naming the commit to fix."""
    wt = Path(worktree)
    log = git(wt, "log", "--reverse", "-z", "--format=%H%n%s%n%B", f"{PRISTINE_TAG}..HEAD").stdout
    commits = []
    for entry in filter(None, log.split("\0")):
        sha, subject, message = entry.lstrip("\n").split("\n", 2)
        claims = [v for k, v in split_message(message)[1] if k.lower() == "overlay"]
        touched = git(wt, "diff-tree", "--no-commit-id", "--name-only", "-r", "-z", sha).stdout.split("\0")
        commits.append((sha, subject, claims, set(filter(None, touched))))
    owner: dict[str, str] = {}
    files: dict[str, bytes] = {}
    for sha, subject, claims, _ in commits:
        for rel in claims:
            if rel in owner:
                raise PatchkitError(f"{wt}: {rel}: expected one commit to claim it (Overlay:), found '{owner[rel]}' "
                                    f"and '{subject}'")
            proc = git(wt, "cat-file", "blob", f"{sha}:{rel}", check=False, text=False)
            if proc.returncode != 0:
                raise PatchkitError(f"{wt}: commit '{subject}' claims Overlay: {rel}, found no such file in it; "
                                    "add the file to that commit or drop the trailer")
            owner[rel], files[rel] = subject, proc.stdout
    for sha, subject, claims, touched in commits:
        for rel in sorted(touched & set(owner) - set(claims)):
            raise PatchkitError(f"{wt}: {rel}: expected changes only in the commit that claims it ('{owner[rel]}'), "
                                f"found '{subject}' changing it; fold that change into the claiming commit")
    return files


def export_series(worktree: Path, out_dir: Path, leave_out: list[str] = ()) -> list[Path]:
    """format-patch every commit after the pristine tag into out_dir, without the paths in `leave_out` (the
    overlay files, which live in overlay/); returns the files in order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pathspec = ["--", ".", *(f":(exclude,literal){rel}" for rel in leave_out)] if leave_out else []
    proc = git(Path(worktree), *FORMAT_PATCH_ARGS, "-o", str(out_dir.resolve()), f"{PRISTINE_TAG}..HEAD", *pathspec)
    exported = [Path(line) for line in proc.stdout.splitlines() if line.strip()]
    if leave_out:
        count = int(git(Path(worktree), "rev-list", "--count", f"{PRISTINE_TAG}..HEAD").stdout)
        if count != len(exported):
            raise PatchkitError(f"{worktree}: expected a patch per commit ({count}), found {len(exported)}: a commit "
                                "that only adds overlay files has no diff to wire them in; fold it into a patch")
    return exported


def roundtrip_differences(series: Series, pristine: Pristine, root: str, label: str) -> list[str]:
    """Import the series and export it again; name every patch file that does not come back identical."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="patchkit-roundtrip-") as tmp:
        wt = build_worktree(Path(tmp) / "wt", series, pristine, root, label, full_tree=False)
        # the overlay files ride in their patches' commits, as in `worktree`; the patches come back without them
        exported = export_series(wt, Path(tmp) / "out", leave_out=list(overlay_claims(wt)))
        names = [p.name for p in exported]
        for original in series.patches:
            if original.name not in names:
                problems.append(f"{original.name}: re-export names it {names[series.patches.index(original)] if len(names) > series.patches.index(original) else '?'}")
                continue
            new = exported[names.index(original.name)].read_bytes()
            if new != original.path.read_bytes():
                problems.append(f"{original.name}: re-export differs from the file in the series")
    return problems


def write_series(exported: list[Path], directory: Path) -> None:
    """Replace directory's *.patch files and series listing with `exported`, in order."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.patch"):
        old.unlink()
    for f in exported:
        atomic_write(directory / f.name, f.read_bytes())
    atomic_write(directory / "series", "".join(f.name + "\n" for f in exported).encode())


def write_overlay(files: dict[str, bytes], dropped: list[str], overlay_root: Path) -> None:
    """Write each overlay file (wheel path -> bytes) under overlay_root; remove the `dropped` ones (claimed by
    the series being replaced, by no commit of the new one)."""
    for rel, data in files.items():
        path = Path(overlay_root) / rel
        if fsio.kind_of(path) not in (None, "a regular file"):
            raise PatchkitError(f"{path}: expected an overlay file (a regular file) or nothing, found {fsio.kind_of(path)}")
        path.parent.mkdir(parents=True, exist_ok=True)
        if fsio.read_regular(path, "an overlay file") != data:
            atomic_write(path, data)
    for rel in dropped:
        (Path(overlay_root) / rel).unlink(missing_ok=True)
