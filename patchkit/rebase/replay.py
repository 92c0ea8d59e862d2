"""Replay one series onto a new release in a scratch git repo, and classify what each patch did.

Repo layout (one per upstream): tag `old-pristine` = the pinned release; branch `old-series` = the
series as commits on it (`git am`); tag `pristine` = the new release, committed on top of the old one
so git sees moves as renames; branch `main` = the series cherry-picked onto the new release (3-way,
rename-aware). `worktree.export_series` then formats `pristine..main` like any worktree.
"""
from __future__ import annotations

import posixpath
import re
import shutil
from pathlib import Path

from .. import PatchkitError
from ..chain import hunk_offsets
from ..conditions import conditions_of, replacements_of, stale_reasons, superseded_by, unreached_reasons
from ..gitcmd import author_env, git, init_repo
from ..patchfile import PatchFile, split_message
from ..pristine import Pristine
from ..worktree import PRISTINE_TAG, commit_patches, commit_release
from .pydefs import collisions
from .state import CLEAN, CONFLICT, DROPPED, OFFSET, RESOLVED, SUPERSEDED, UPSTREAM, Outcome

KEPT = "Superseded-Kept"    # the trailer that records why a superseded patch is kept

OLD_TAG = "old-pristine"
OLD_BRANCH = "old-series"
RENAME_THRESHOLD = "30%"     # a rewritten-and-moved module (e.g. 37% similar) still counts as moved

_MARKER_RE = re.compile(r"^(<{7}|>{7})( |$)", re.M)


def build_rebase_repo(dest: Path, patches: list[PatchFile], old: Pristine, new: Pristine, root: str,
                      old_label: str, new_label: str) -> list[str]:
    """Create the repo described above, HEAD on `main` at the new release; returns the old series' commits."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    init_repo(dest)
    base = commit_release(dest, old, root, f"pristine {old_label}")
    git(dest, "tag", OLD_TAG, base)
    git(dest, "reset", "-q", "--hard")          # the old release's files, written once by git
    git(dest, "checkout", "-q", "-b", OLD_BRANCH)
    commits = commit_patches(dest, patches, old_label)
    # The new release on top of the old one (git sees moves as renames); checking it out rewrites only the
    # files the two releases (and the series) differ in.
    git(dest, "tag", PRISTINE_TAG, commit_release(dest, new, root, f"pristine {new_label}", parent=base))
    git(dest, "checkout", "-q", "main")
    return commits


def release_renames(repo: Path) -> dict[str, str]:
    """old path -> new path for every file the new release moved (rename detection, low threshold)."""
    # -l0: no rename limit. With git's default (diff.renameLimit) a large release (thousands of files) makes
    # git skip rename detection with only a warning, and every move would be missed.
    proc = git(repo, "diff", "-l0", f"-M{RENAME_THRESHOLD}", "--name-status", "-z", OLD_TAG, PRISTINE_TAG)
    _refuse_skipped_renames(proc.stderr, "the release's renames")
    out = proc.stdout
    fields = out.split("\0")
    renames, i = {}, 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        if status.startswith(("R", "C")):
            if status.startswith("R"):
                renames[fields[i + 1]] = fields[i + 2]
            i += 3
        else:
            i += 2
    return renames


def _refuse_skipped_renames(stderr: str, what: str) -> None:
    if "rename detection was skipped" in stderr:
        raise PatchkitError(f"git gave up rename detection for {what} ({stderr.strip().splitlines()[0]}); "
                            "expected every move found, found a limit: nothing written")


def remap_patch_text(text: str, mapping: dict[str, str]) -> str:
    """Rewrite a patch's file headers to follow moved files."""
    if not mapping:
        return text

    def sub(m):
        prefix, path = m.group(1), m.group(2)
        return prefix + mapping.get(path, path)

    text = re.sub(r"^(--- a/|\+\+\+ b/)(\S+)$", sub, text, flags=re.M)
    return re.sub(r"^diff --git a/(\S+) b/(\S+)$",
                  lambda m: f"diff --git a/{mapping.get(m.group(1), m.group(1))} b/{mapping.get(m.group(2), m.group(2))}",
                  text, flags=re.M)


def split_hunks(text: str) -> list[tuple[str, str, str]]:
    """(path, hunk header, single-hunk patch text) for every hunk of a patch's diff."""
    out = []
    diff = text[text.index("\ndiff --git ") + 1:] if "\ndiff --git " in text else text
    for block in re.split(r"(?=^diff --git )", diff, flags=re.M):
        if not block.startswith("diff --git "):
            continue
        head, _, body = block.partition("\n@@ ")
        if not _:
            continue
        path = re.match(r"diff --git a/\S+ b/(\S+)", head).group(1)
        for hunk in re.split(r"(?=^@@ )", "@@ " + body, flags=re.M):
            if hunk.startswith("@@ "):
                out.append((path, hunk.splitlines()[0], head + "\n" + hunk))
    return out


def _apply_check(repo: Path, patch_path: Path, reverse: bool = False) -> tuple[bool, str]:
    args = ["apply", "--check", "--verbose", "--whitespace=nowarn"] + (["-R"] if reverse else []) + [str(patch_path)]
    proc = git(repo, *args, check=False)
    return proc.returncode == 0, proc.stderr


def failing_hunks(repo: Path, text: str, scratch: Path) -> list[str]:
    bad = []
    for n, (path, header, one) in enumerate(split_hunks(text), 1):
        scratch.write_text(one)
        ok, _ = _apply_check(repo, scratch)
        if not ok:
            there = _apply_check(repo, scratch, reverse=True)[0]
            bad.append(f"{path} hunk {n} ({header[:60]})" + (": already in the new release" if there else ""))
    return bad


def overlay_moves(patch: PatchFile, renames: dict[str, str]) -> dict[str, str]:
    """Overlay files follow the move of the patch's own touched files (the deepest matching directory)."""
    moved = [(posixpath.dirname(a), posixpath.dirname(renames[a])) for a in dict.fromkeys(patch.paths) if a in renames]
    out = {}
    for rel in patch.overlay:
        d = posixpath.dirname(rel)
        best = None
        for old_dir, new_dir in moved:
            if old_dir != new_dir and (d == old_dir or d.startswith(old_dir + "/")):
                if best is None or len(old_dir) > len(best[0]):
                    best = (old_dir, new_dir)
        if best:
            out[rel] = best[1] + rel[len(best[0]):]
    return out


def rewrite_message(message: str, moves: dict[str, str], renames: dict[str, str]) -> str:
    """Follow moves in the trailer lines that name wheel paths (Overlay:, Reached-If:, Unreached-If:, Superseded-By:)."""
    def paths(text: str) -> str:
        return ", ".join(renames.get(p.strip(), p.strip()) for p in text.split(","))

    def fix(line: str) -> str:
        key, sep, value = line.partition(": ")
        if key == "Overlay" and value in moves:
            return f"{key}: {moves[value]}"
        if key in ("Reached-If", "Unreached-If"):
            path, tilde, rest = value.partition(" ~ ")
            if tilde:
                return f"{key}: {paths(path)} ~ {rest}"
        if key == "Superseded-By":
            cut = value.find(':"') if '"' in value else value.rfind(":")
            if cut > 0:
                return f"{key}: {paths(value[:cut])}{value[cut:]}"
        return line
    return "\n".join(fix(l) for l in message.split("\n"))


def with_kept(message: str, reason: str) -> str:
    """The message with a Superseded-Kept trailer recording `reason` (unchanged when it has one or none is given)."""
    if not reason or any(l.startswith(f"{KEPT}: ") for l in message.split("\n")):
        return message
    return message.rstrip("\n") + f"\n{KEPT}: {reason}\n"


def ours_side(text: str) -> str:
    """The text with every conflict block reduced to its HEAD side (the new release's)."""
    out, mode = [], None
    for line in text.splitlines(keepends=True):
        if line.startswith("<<<<<<< "):
            mode = "ours"
        elif mode == "ours" and line.startswith("||||||| "):
            mode = "base"
        elif mode in ("ours", "base") and line.rstrip("\n") == "=======":
            mode = "theirs"
        elif mode == "theirs" and line.startswith(">>>>>>> "):
            mode = None
        elif mode in (None, "ours"):
            out.append(line)
    return "".join(out)


def conflicted_files(repo: Path) -> list[str]:
    return [l for l in git(repo, "diff", "--name-only", "--diff-filter=U").stdout.splitlines() if l]


def marker_lines(path: Path) -> list[int]:
    try:
        text = path.read_text(errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return []
    return [text.count("\n", 0, m.start()) + 1 for m in _MARKER_RE.finditer(text) if m.group(1).startswith("<")]


def has_markers(path: Path) -> bool:
    try:
        return bool(_MARKER_RE.search(path.read_text(errors="replace")))
    except (FileNotFoundError, IsADirectoryError):
        return False


class Replayer:
    """Cherry-picks the old series' commits, one at a time, onto `main` of a rebase repo."""

    def __init__(self, repo: Path, overlay_root: Path, keep: dict[str, str] | None = None,
                 partly: dict | None = None):
        self.repo = Path(repo)
        self.keep = keep or {}                     # patch name -> why it is kept although superseded
        self.partly = partly or {}                 # patch name -> reach.Partly (reach.toml next to the series)
        self.overlay_root = Path(overlay_root)     # the staged overlay (moves applied as we go)
        self.renames = release_renames(self.repo)
        self.scratch = self.repo / ".git" / "patchkit-hunk.patch"

    def _read(self, rel: str) -> bytes | None:
        for base in (self.repo, self.overlay_root):
            if (base / rel).is_file():
                return (base / rel).read_bytes()
        return None

    def _mapping(self, patch: PatchFile) -> dict[str, str]:
        return {p: self.renames[p] for p in patch.paths if p in self.renames}

    def replay(self, commit: str, patch: PatchFile) -> Outcome:
        out = Outcome(patch.name, patch.subject, CLEAN)
        mapping = self._mapping(patch)
        mapped = remap_patch_text(patch.path.read_text(encoding="utf-8"), mapping)
        current = self.repo / ".git" / "patchkit-current.patch"
        current.write_text(mapped, encoding="utf-8")
        out.detail += [f"moved {a} -> {b}" for a, b in mapping.items()]
        if _apply_check(self.repo, current, reverse=True)[0]:
            out.result = UPSTREAM
            out.detail.append("reverse-applies on the new release: propose dropping it")
            out.detail += [f"its header says Upstream-Status: {v}" for v in patch.trailer("Upstream-Status")]
            self._drop_overlay(patch, out)
            return out
        found = self.superseded(patch)
        if found:
            out.superseded = found
            reason = self.keep.get(patch.name) or next(iter(patch.trailer(KEPT)), "")
            if not reason:
                out.result = SUPERSEDED
                out.detail.append(f"superseded by upstream {', '.join(found)}: dropped "
                                  f"(to keep it: rebase ... --keep {patch.name}=REASON)")
                self._drop_overlay(patch, out)
                return out
            out.kept = reason
            out.detail.append(f"superseded by upstream {', '.join(found)}; kept ({KEPT}: {reason})")
        self._retarget_overlay(patch, out)
        ok, log = _apply_check(self.repo, current)
        if ok:
            offsets = hunk_offsets(log)
            out.detail += offsets
            out.result = OFFSET if offsets or mapping else CLEAN
        else:
            bad = failing_hunks(self.repo, mapped, self.scratch)
            out.detail.append("does not apply as text" + ("; failing hunks:" if bad else "; its file is missing"))
            out.detail += [f"  {b}" for b in bad]
        proc = git(self.repo, "-c", "merge.renameLimit=0", "cherry-pick", "--no-commit",
                   "-X", f"find-renames={RENAME_THRESHOLD}", commit, check=False)
        _refuse_skipped_renames(proc.stderr, f"the merge of {patch.name}")
        unmerged = conflicted_files(self.repo)
        clashes = self.collisions([mapping.get(p, p) for p in dict.fromkeys(patch.paths)])
        if proc.returncode != 0 or unmerged or clashes:
            out.result = CONFLICT
            out.conflicted = unmerged or ([] if clashes and proc.returncode == 0
                                          else [mapping.get(p, p) for p in dict.fromkeys(patch.paths)])
            for f in out.conflicted:
                lines = marker_lines(self.repo / f)
                out.detail.append(f"{f}: " + (f"conflict markers at line {', '.join(map(str, lines))}" if lines
                                              else "changed or removed upstream (no markers): re-create the change by hand"))
            for path, lines in clashes.items():
                if path not in out.conflicted:
                    out.conflicted.append(path)
                out.detail += [f"{line} (a clean text merge that breaks the module: fix it by hand)" for line in lines]
            self._reach(patch, out)
            return out
        if ok is False:
            out.result = OFFSET
            out.detail.append("merged 3-way")
        return self.finish(commit, patch, out)

    def abandon(self) -> None:
        """Drop a conflicted cherry-pick (dry run: carry on with the next patch)."""
        git(self.repo, "cherry-pick", "--abort", check=False)
        git(self.repo, "reset", "-q", "--hard", "HEAD")
        git(self.repo, "clean", "-qfd")

    def finish(self, commit: str, patch: PatchFile, out: Outcome) -> Outcome:
        """Commit the merged change with the patch's author and (re-targeted) message; check reach."""
        git(self.repo, "add", "-A")
        if git(self.repo, "diff", "--cached", "--quiet", "HEAD", check=False).returncode == 0:
            git(self.repo, "cherry-pick", "--quit", check=False)
            if out.result == CONFLICT:
                out.result = DROPPED
                out.detail.append("empty after resolution: dropped")
            else:
                out.result = UPSTREAM
                out.detail.append("merges to no change on the new release: propose dropping it")
            self._drop_overlay(patch, out)
            return out
        message = git(self.repo, "log", "-1", "--format=%B", commit).stdout
        self._commit(patch, with_kept(rewrite_message(message, out.overlay_moves, self.renames), out.kept))
        git(self.repo, "cherry-pick", "--quit", check=False)
        self._reach(patch, out)
        return out

    def _commit(self, patch: PatchFile, message: str) -> None:
        """Commit the index with `message`, as the patch's author on the patch's date."""
        msg_file = self.repo / ".git" / "patchkit-msg"
        msg_file.write_text(message, encoding="utf-8")
        git(self.repo, "commit", "-q", "--cleanup=verbatim", "-F", str(msg_file), env=author_env(patch.author, patch.date))

    def _retarget_overlay(self, patch: PatchFile, out: Outcome) -> None:
        """Move the patch's overlay files in the staged overlay alongside its moved modules."""
        out.overlay_moves = overlay_moves(patch, self.renames)
        for old, new in out.overlay_moves.items():
            src, dst = self.overlay_root / old, self.overlay_root / new
            if src.is_file():
                dst.parent.mkdir(parents=True, exist_ok=True)
                src.replace(dst)
                self._prune(src.parent)
            out.detail.append(f"overlay re-targeted {old} -> {new}")
        for rel in patch.overlay:
            new = out.overlay_moves.get(rel, rel)
            if (self.repo / new).exists():
                out.detail.append(f"overlay {new} now exists in the new release: resolve by hand")

    def _drop_overlay(self, patch: PatchFile, out: Outcome) -> None:
        """A dropped patch takes its overlay files with it (nothing would claim them)."""
        for rel in patch.overlay:
            f = self.overlay_root / out.overlay_moves.get(rel, rel)
            if f.is_file():
                f.unlink()
                self._prune(f.parent)
                out.detail.append(f"overlay {rel} removed with it")

    def _prune(self, d: Path) -> None:
        while d != self.overlay_root and d.is_dir() and not any(d.iterdir()):
            d.rmdir()
            d = d.parent

    def adopt(self, patch: PatchFile, out: Outcome) -> Outcome:
        """The user committed the resolution themselves (to edit the message too): keep their change and
        message, follow moves in its trailers, and give the commit back the patch's author and date."""
        git(self.repo, "cherry-pick", "--quit", check=False)
        message = git(self.repo, "log", "-1", "--format=%B", "HEAD").stdout
        # `git commit --no-edit` keeps git's "# Conflicts:" comment lines; an editor session would drop them
        message = "\n".join(l for l in message.split("\n") if not l.startswith("#"))
        message = re.sub(r"\n{3,}", "\n\n", message).strip("\n") + "\n"
        fixed = with_kept(rewrite_message(message, out.overlay_moves, self.renames), out.kept)
        git(self.repo, "reset", "-q", "--soft", "HEAD~1")     # the user's tree stays staged: re-commit it
        self._commit(patch, fixed)
        out.result = RESOLVED
        self._reach(patch, out, split_message(fixed)[1])
        return out

    def _reach(self, patch: PatchFile, out: Outcome, trailers: list[tuple[str, str]] | None = None) -> None:
        out.unreached = self.reach(patch, trailers)
        conds = conditions_of(patch.trailers if trailers is None else trailers, f"{patch.name}: ")
        out.stale = stale_reasons([c.moved(self.renames) for c in conds], self._read)
        partly = self.partly.get(patch.name)
        out.partly = ""
        if partly and partly.holds(self._read, self.renames):
            # the recorded figure is more exact than the trailers' yes/no: it replaces their verdict
            said = "; ".join(out.unreached + out.stale) or "reached"
            out.partly, out.unreached, out.stale = partly.fraction, [], []
            out.detail.append(f"partly reached: {partly.describe()} (its trailers said: {said})")

    def reach(self, patch: PatchFile, trailers: list[tuple[str, str]] | None = None) -> list[str]:
        """Unreached reasons of the patch's live conditions on the work tree (new release + series so far)."""
        conds = conditions_of(patch.trailers if trailers is None else trailers, f"{patch.name}: ")
        return unreached_reasons([c.moved(self.renames) for c in conds], self._read)

    def _read_pristine(self, rel: str) -> bytes | None:
        proc = git(self.repo, "show", f"{PRISTINE_TAG}:{rel}", check=False, text=False)
        return proc.stdout if proc.returncode == 0 else None

    def superseded(self, patch: PatchFile) -> list[str] | None:
        """'FILE:NAME' of the upstream code that does the patch's job on the pristine new release, if all
        of its Superseded-By trailers match there (their paths follow the release's moves)."""
        found = replacements_of(patch.trailers, f"{patch.name}: ")
        return superseded_by([r.moved(self.renames) for r in found], self._read_pristine)

    def collisions(self, paths: list[str], base: str = "HEAD") -> dict[str, list[str]]:
        """Per Python module the merge touched: definitions it adds that the release already has for the same
        object, and names it leaves undefined (pydefs.py). A file with conflict markers is read with only
        the release's side of each conflict, so what only a conflicted hunk defines counts as missing."""
        out = {}
        for rel in paths:
            f = self.repo / rel
            if not rel.endswith(".py") or not f.is_file():
                continue
            before = git(self.repo, "show", f"{base}:{rel}", check=False)
            merged = ours_side(f.read_text(encoding="utf-8", errors="replace"))
            found = collisions(rel, before.stdout if before.returncode == 0 else "", merged)
            if found:
                out[rel] = found
        return out

    def reset_to(self, head: str) -> None:
        """Put `main` back at `head` (the state's last recorded commit; "" = the new release), dropping any
        half-done cherry-pick: the replay goes on from exactly what the state says."""
        git(self.repo, "cherry-pick", "--quit", check=False)
        git(self.repo, "reset", "-q", "--hard", head or PRISTINE_TAG)
        git(self.repo, "clean", "-qfd")

    def head(self) -> str:
        return git(self.repo, "rev-parse", "HEAD").stdout.strip()

    def committed_since(self, head: str) -> bool:
        """The user committed the resolution themselves on top of `head`, leaving nothing uncommitted."""
        return self.head() != head and git(self.repo, "status", "--porcelain").stdout.strip() == ""

    def unresolved(self, files: list[str]) -> list[str]:
        """Of `files` and git's unmerged paths, those that still hold conflict markers."""
        left = [f for f in files if has_markers(self.repo / f)]
        return left + [f for f in conflicted_files(self.repo) if f not in left and has_markers(self.repo / f)]
