"""The engine: apply / status / revert / check a series set on a target directory.

Everything project-specific comes from the repository it is pointed at and the release line chosen:
pin.lock's [line."LINE"] tables (which upstreams, which artifacts) and patches/LINE/<upstream>/ +
overlay/LINE/ (what to change); the default target is build/site-LINE.
"""
from __future__ import annotations

import dataclasses
import shlex
import shutil
from contextlib import nullcontext
from pathlib import Path

from . import PatchkitError, attestation, fsio, patchset
from .chain import Chain, build_chain
from .fetch import fetch_open
from .lockfile import Lock, Upstream, load_lock
from .hashing import sha256_bytes, sha256_file
from .pristine import STAGE_PREFIX, Pristine
from .series import Series, load_series
from .state import (APPLIED, MODIFIED, OUTDATED, PARTIAL, PRISTINE, FileState, PatchState, TargetState,
                    UpstreamState)
from .bookkeeping import TargetFiles
from .target import Target
from .transaction import Change, commit


def _quiet(*_args, **_kw):
    pass


class EditedFileError(PatchkitError):
    """A file the set touches holds bytes of no state of the series (edited by hand): refused, nothing written.
    The command line adds how to recover (`--discard-edits`), which the engine cannot word for its caller."""


def _staging_dirs(directory: Path) -> list[str]:
    """Unpack staging directories an interrupted unpack left (real directories only: a link is not ours)."""
    return sorted(p.name for p in Path(directory).glob(STAGE_PREFIX + "*") if fsio.kind_of(p) == "a directory")


class Engine:
    def __init__(self, lock: Lock, patches_root: Path, overlay_root: Path, build_root: Path | None):
        self.lock = lock
        self.patches_root = Path(patches_root)
        self.overlay_root = Path(overlay_root)
        self._build_root = Path(build_root) if build_root is not None else None
        self._chains: dict[str, Chain] = {}
        self._pristine: dict[str, Pristine] = {}

    @classmethod
    def from_repo(cls, repo: Path, read_only: bool = False, line: str | None = None) -> "Engine":
        """`line`: the release line (None: the newest pin.lock names). `read_only`: the data an installed package
        ships: read, never written, and no build/ beside it."""
        repo = Path(repo)
        return cls.for_lock(repo, load_lock(repo / "pin.lock", line), read_only)

    @classmethod
    def for_lock(cls, repo: Path, lock: Lock, read_only: bool = False) -> "Engine":
        """The repository's engine on the line of a Lock already read (one reading of pin.lock per command)."""
        repo = Path(repo)
        return cls(lock, repo / "patches" / lock.line, repo / "overlay" / lock.line,
                   None if read_only else repo / "build")

    def for_line(self, line: str) -> "Engine":
        """The same repository's engine on another release line."""
        lock = load_lock(self.lock.path, line)
        return Engine(lock, self.patches_root.parent / line, self.overlay_root.parent / line, self._build_root)

    @property
    def read_only(self) -> bool:
        """The series an installed package ships: no build/ beside it, nothing written there."""
        return self._build_root is None

    @property
    def build_root(self) -> Path:
        """build/ of the repository: the default target, worktrees, rebase state, the repository lock."""
        if self._build_root is None:
            raise PatchkitError(self.needs_checkout())
        return self._build_root

    def needs_checkout(self, instead: str = "") -> str:
        """The one-line refusal of what needs a checkout's build/; `instead`: the command's own way around it."""
        return (f"{self.repo}: expected a checkout (a build/ directory beside pin.lock), found the read-only series "
                f"an installed package ships: {'pass ' + instead + ', or ' if instead else 'run it in a checkout, or pass '}"
                "--repo DIR for a checkout")

    @property
    def repo(self) -> Path:
        """The repository whose pin.lock, patches/ and overlay/ this engine reads."""
        return Path(self.lock.path).resolve().parent

    # -- inputs -------------------------------------------------------------------------------
    def pristine(self, name: str, log=_quiet) -> Pristine:
        if name not in self._pristine:
            up = self.lock.upstream(name)
            pristine = Pristine(*fetch_open(up, log=log))
            if not pristine.files_under(up.root):   # a typo'd root would make every command skip the series
                raise PatchkitError(f"{self.lock.path}: [{self.lock.where}.upstream.{name}] root: expected a directory of {up.artifact}, "
                                    f"found no file under {up.root!r} in it (its top-level names: "
                                    f"{', '.join(pristine.top_level()[:6])}); nothing written")
            self._pristine[name] = pristine
        return self._pristine[name]

    def series(self, name: str) -> Series:
        up = self.lock.upstream(name)
        return load_series(name, self.patches_root, self.overlay_root, up.root)

    def chain(self, name: str, log=_quiet) -> Chain:
        if name not in self._chains:
            self._chains[name] = build_chain(self.series(name), self.pristine(name, log))
        return self._chains[name]

    @staticmethod
    def pin_label(up: Upstream) -> str:
        return f"{up.label} ({up.artifact}, sha256 {up.sha256[:12]}…)"

    # -- state ----------------------------------------------------------------------------------
    def _inspect(self, target: Target, log=_quiet) -> TargetState:
        journal = target.files.journal()     # first: a journal that is not a file stops everything
        for name in self.lock.upstreams:    # every root checked against its wheel: a typo never skips a series
            self.pristine(name, log)
        states, touched = [], []
        for name, up in self.lock.upstreams.items():
            st = UpstreamState(name, self.pin_label(up), present=target.holds(up.root))
            if not st.present:
                states.append(st)
                continue
            found = target.installed_version(up.package)
            if found and found[0] != up.version:
                st.found_version, st.version_ok = f"{up.package} {found[0]} ({found[1]})", False
                states.append(st)
                continue
            chain = self.chain(name, log)
            ours = target.files.written_by_us()
            touched += list(chain.files) + [p for p in ours if p.startswith(up.root + "/")]
            files = {}
            for path, fc in chain.files.items():
                digest = target.digest(path)
                pos = fc.position(digest)
                fs = FileState(path, digest, pos, fc.states[pos][0] if pos is not None else None,
                               stale=pos is None and digest is not None and digest in ours.get(path, ()))
                files[path] = fs
                if pos is None and not fs.stale:
                    st.modified.append(fs)
            # Files an older series wrote that the current one no longer touches.
            pristine = self.pristine(name, log)
            for path in sorted(set(ours) - set(chain.files)):
                if not path.startswith(up.root + "/"):
                    continue
                digest = target.digest(path)
                base = sha256_bytes(pristine.read(path)) if pristine.has(path) else None
                if digest == base:
                    continue
                fs = FileState(path, digest, None, None, stale=digest in ours[path])
                (st.leftover if fs.stale else st.modified).append(fs)
            for i, p in enumerate(chain.series.patches):
                mine = list(dict.fromkeys(p.paths))
                st.patches.append(PatchState(p.name, p.subject, self._patch_state(i, mine, files), mine))
            for rel, owner in chain.series.overlay_owner.items():
                st.overlay.append((rel, self._patch_state(owner, [rel], files)))
            states.append(st)
        leftovers = target.files.stale_temps(touched) + _staging_dirs(target.path)
        return TargetState(str(target.path), states, journal, leftovers, running=target.files.live_holder())

    @staticmethod
    def _patch_state(index: int, paths: list[str], files: dict[str, FileState]) -> str:
        if any(files[p].position is None and not files[p].stale for p in paths):
            return MODIFIED
        if any(files[p].stale for p in paths):
            return OUTDATED
        applied = [files[p].applied_through >= index for p in paths]
        return APPLIED if all(applied) else PRISTINE if not any(applied) else PARTIAL

    def _refuse_if_unusable(self, state: TargetState, target: Path, discard_edits: bool = False) -> None:
        present = [u for u in state.upstreams if u.present]
        if not present:
            roots = " or ".join(f"{u.root}/" for u in self.lock.upstreams.values())
            raise PatchkitError(f"target {target}: expected a directory holding {roots}, found neither")
        for u in present:
            up = self.lock.upstream(u.name)
            if not u.version_ok:
                raise PatchkitError(f"target {target}: expected {up.label}, found {u.found_version}"
                                    f"{self._other_line_hint(u.name, u.found_version)}; nothing written")
        edited = [(u, f) for u in present for f in u.modified]
        if edited and not discard_edits:
            u, f = edited[0]
            up = self.lock.upstream(u.name)
            fc = self.chain(u.name).files.get(f.path)
            pristine = self.pristine(u.name)
            expected = fc.states[0][1] if fc else (
                sha256_bytes(pristine.read(f.path)) if pristine.has(f.path) else None)
            more = f" (and {len(edited) - 1} more edited file(s))" if len(edited) > 1 else ""
            raise EditedFileError(
                f"{target / f.path}: expected sha256 {(expected or 'absent')[:16]} ({up.label}) "
                f"or a patched state, found {(f.digest or 'absent')[:16]}{more}; nothing written"
            )

    def _other_line_hint(self, name: str, found: str | None) -> str:
        """' (the release of line X: pass --line X)' where another line of pin.lock pins the version found."""
        version = (found or "").split(" ")[1:2]
        for other in self.lock.lines:
            if other != self.lock.line and version:
                up = load_lock(self.lock.path, other).upstreams.get(name)
                if up is not None and up.version == version[0]:
                    return f" (the release of line {other}: pass --line {other})"
        return ""

    def _installed(self, target: Target) -> dict[str, str]:
        """upstream name -> the version the tree holds (from its dist-info), for those that have one."""
        found = {}
        for name, up in self.lock.upstreams.items():
            got = target.installed_version(up.package)
            if got:
                found[name] = got[0]
        return found

    def _line_holding(self, installed: dict[str, str]) -> str | None:
        """The line of pin.lock whose pins are the releases the tree holds, if one is."""
        for line in self.lock.lines:
            lock = self.lock if line == self.lock.line else load_lock(self.lock.path, line)
            if installed and all(name in lock.upstreams and lock.upstreams[name].version == v
                                 for name, v in installed.items()):
                return line
        return None

    def stale_attestation(self, path: Path, op: str) -> str | None:
        """Where the tree's attestation pins other releases than the tree now holds (a newer release installed
        over an applied tree): one line naming the file and the command that resets it, then `op` on the line
        that fits; else None. apply and revert refuse with it, status prints it."""
        target = Target(Path(path))
        try:
            data = attestation.read(target.path)
        except PatchkitError:
            return None
        if data is None:
            return None
        installed = self._installed(target)
        holds = ", ".join(f"{self.lock.upstream(n).package} {v}" for n, v in installed.items()) or "it"
        try:
            attested = self.lock if data["line"] == self.lock.line else load_lock(self.lock.path, data["line"])
        except PatchkitError:
            return None
        if not any(n in attested.upstreams and attested.upstreams[n].version != v for n, v in installed.items()):
            return None
        manifest = target.path / attestation.MANIFEST
        line = self._line_holding(installed)
        then = f"{op} --line {line}" if line else op
        way_out = f"reset it with `rm {shlex.quote(str(manifest))}`, then run {then}"
        pinned = sorted(attested.upstreams[n].label for n in installed if n in attested.upstreams)
        found = sorted(f"{self.lock.upstream(n).package} {v}" for n, v in installed.items())
        if sorted(data["applied_to"]) != pinned:
            # Its own fields disagree (apply writes 'applied_to' from the pins of 'line'): edited or forged, not
            # outrun by an install. Name the field that disagrees with the tree, never "installed over them".
            odd = "'line'" if sorted(data["applied_to"]) == found else "'line' and 'applied_to'"
            return (f"target {target.path}: expected an attestation whose fields agree, found {manifest} with "
                    f"'line' {data['line']} (which pins {', '.join(pinned) or 'none'}) and 'applied_to' "
                    f"{', '.join(data['applied_to']) or 'none'}, on a tree holding {holds}: its {odd} disagrees "
                    f"(apply never writes such a manifest); {way_out}")
        return (f"target {target.path}: expected the releases its attestation {manifest} names "
                f"(line {data['line']}: {', '.join(data['applied_to']) or 'none'}), found {holds} "
                f"installed over them since; that attestation describes nothing here any more: {way_out}")

    def _refuse_other_line(self, target: Target, op: str) -> None:
        """A tree whose attestation names another line carries that line's set: only that line may touch it.
        An attestation whose line pins other releases than the tree now holds (a newer release installed over
        an applied tree) describes nothing there any more: every line would refuse the tree, so the refusal
        names the file and the one command that resets it, as git names a stale index.lock."""
        try:
            data = attestation.read(target.path)
        except PatchkitError:
            return          # a malformed manifest is status's to report; the hashes still guard every write
        if data is None:
            return
        stale = self.stale_attestation(target.path, op)
        if stale:
            raise PatchkitError(f"{stale}; nothing written")
        holds = ", ".join(f"{self.lock.upstream(n).package} {v}" for n, v in self._installed(target).items()) or "it"
        if data["line"] != self.lock.line:
            raise PatchkitError(f"target {target.path}: expected line {self.lock.line}, found line {data['line']}'s "
                                f"patch set on {holds}: {op} it with --line {data['line']}; nothing written")

    # -- operations -----------------------------------------------------------------------------
    def _changes(self, state: TargetState, target: Target, to_final: bool) -> list[Change]:
        """What to write to bring every present upstream to its final (or pristine) bytes; refused if read-only.
        A file edited by hand is among them only where the caller chose to discard edits (else refused before)."""
        changes = []
        for u in state.upstreams:
            if not u.present:
                continue
            chain = self.chain(u.name)
            for path, fc in chain.files.items():
                want, current = (fc.final if to_final else fc.pristine), target.read(path)
                if current != want:
                    changes.append(Change(path, current, want))
            pristine = self.pristine(u.name)
            # ours from an older series (as written, or edited since): back to the release's bytes
            for fs in u.leftover + [fs for fs in u.modified if fs.path not in chain.files]:
                changes.append(Change(fs.path, target.read(fs.path), pristine.read(fs.path) if pristine.has(fs.path) else None))
        blocked = target.first_unwritable([c.path for c in changes]) if changes else None
        if blocked:
            raise PatchkitError(f"target {target.path} is read-only: cannot write {blocked}; nothing written")
        return changes

    def _run(self, op: str, target: Target, to_final: bool, dry_run: bool, log, discard_edits: bool = False) -> TargetState:
        # One writer per target. A target we may not write needs no lock: _changes refuses any change to it.
        guard = target.files.lock(op) if not dry_run and target.writable() else nullcontext()
        with guard:
            before = self._inspect(target, log)
            self._refuse_other_line(target, op)
            self._refuse_if_unusable(before, target.path, discard_edits)
            changes = self._changes(before, target, to_final)
            if not dry_run:
                for u in before.upstreams:
                    for fs in u.modified:
                        log(f"{op}: discarding the edit of {fs.path} (sha256 {(fs.digest or 'absent')[:16]}), as asked")
            if not dry_run and (changes or target.writable()):
                target.files.refuse_if_foreign(attestation.KEY)   # before the first write: a link there stops us
            if before.temp_files and not dry_run:
                self._remove_leftovers(target.path, before.temp_files, log)
            if not changes:
                if not dry_run and target.writable():
                    self._attest(target, before, to_final, log)
                if before.journal is not None and not dry_run:
                    target.files.end()
                    log(f"{op}: finished the interrupted '{before.journal.get('op')}' (nothing left to write)")
                else:
                    log(f"{op}: nothing to do, target already {'applied' if to_final else 'pristine'}")
                return before if dry_run else dataclasses.replace(before, journal=None, temp_files=[])
            if dry_run:
                log(f"{op} --dry-run: would write {len(changes)} file(s):")
                for c in changes:
                    verb = "create" if c.before is None else "remove" if c.after is None else "patch"
                    log(f"  {verb} {c.path}")
                return before
            commit(target.path, op, changes)
            target.files.record([(c.path, c.after) for c in changes if c.after is not None] if to_final else [],
                                replace=not to_final)
            self._attest(target, before, to_final, log)
            for c in changes:
                target.wrote(c.path, c.after)
            return dataclasses.replace(self._inspect(target), before=before)

    def _attest(self, target: Target, state: TargetState, applied: bool, log) -> None:
        """Right after the transaction: an applied tree says which patch set it carries, a reverted one nothing."""
        if not applied:
            if target.files.read_bytes(attestation.KEY) is not None:   # a malformed one of ours goes too
                target.files.remove(attestation.KEY)
                log(f"removed {attestation.MANIFEST}")
            return
        releases = [self.lock.upstream(u.name).label for u in state.upstreams if u.present]
        ident = self.patch_set()
        if target.files.refresh_json(attestation.KEY, attestation.record(ident, releases)):
            log(f"wrote {attestation.MANIFEST}: {ident.label}")

    def patch_set(self) -> patchset.PatchSetId:
        """Which patch set this repository holds (release line, version, series digest)."""
        return patchset.identify(self)

    @staticmethod
    def _remove_leftovers(target: Path, leftovers: list[str], log) -> None:
        """Temp files and unpack staging directories of interrupted runs (never a user's file: only our names)."""
        for rel in leftovers:
            path = target / rel
            if fsio.kind_of(path) == "a directory":
                shutil.rmtree(path)
            else:
                fsio.remove_stale([path])    # a file, or a link of any kind: removed, never followed
        log(f"removed {len(leftovers)} temp file(s) left by an interrupted run: {', '.join(leftovers)}")

    def apply(self, target: Path, dry_run: bool = False, log=print, discard_edits: bool = False) -> TargetState:
        """The state after the apply; its `before` is the state it started from when it wrote anything.
        `discard_edits`: a file edited by hand is rewritten instead of refused (the edit is lost)."""
        return self._run("apply", Target(target), True, dry_run, log, discard_edits)

    def revert(self, target: Path, dry_run: bool = False, log=print, discard_edits: bool = False) -> TargetState:
        return self._run("revert", Target(target), False, dry_run, log, discard_edits)

    def status(self, target: Path, log=_quiet) -> TargetState:
        return self._inspect(Target(target), log)

    # -- the embedded default target ------------------------------------------------------------
    @property
    def default_target(self) -> Path:
        return self.build_root / f"site-{self.lock.line}"

    def prepare_default_target(self, log=print) -> Path:
        """build/site with every pinned upstream unpacked (each all or nothing: see Pristine.unpack)."""
        site = self.default_target
        for name in self.lock.upstreams:    # every root checked against its wheel before anything is unpacked
            self.pristine(name, log)
        site.mkdir(parents=True, exist_ok=True)
        with TargetFiles(site).lock("unpack"):
            stale = _staging_dirs(site)
            if stale:
                self._remove_leftovers(site, stale, log)
            for name, up in self.lock.upstreams.items():
                if (site / up.root).exists():
                    continue
                pristine = self.pristine(name, log)
                # the dist-info is renamed into place before the root: one without its root is an interrupted unpack
                if (site / pristine.dist_info()).is_dir():
                    shutil.rmtree(site / pristine.dist_info())
                log(f"unpacking pristine {up.label} into {site}")
                pristine.unpack(site, root=up.root, log=log)
        return site

    def verify_pristine_tree(self, target: Path) -> list[str]:
        """Files under each upstream root whose bytes differ from the pinned wheel's (plus extras)."""
        bad = []
        for name, up in self.lock.upstreams.items():
            if not (Path(target) / up.root).is_dir():
                continue
            pristine = self.pristine(name)
            expected = set(pristine.files_under(up.root))
            for rel in sorted(expected):
                f = Path(target) / rel
                if not f.is_file() or sha256_file(f) != sha256_bytes(pristine.read(rel)):
                    bad.append(rel)
            for f in (Path(target) / up.root).rglob("*"):
                rel = f.relative_to(target).as_posix()
                if f.is_file() and rel not in expected and "__pycache__" not in rel:
                    bad.append(rel)
        return bad
