"""The one way patchkit writes a file it owns, and reads one back: atomically, never through a link.

Every write patchkit makes to its own files (target files, journal, written record, rebase state, backups,
pin.lock) goes through `atomic_write`: the bytes go to a temp file beside the destination, created with
O_EXCL | O_NOFOLLOW (so no link, dangling or not, is ever followed), are fsync'ed, and are renamed over the
destination (rename replaces a link itself, never what it points at). A kill at any moment leaves either the
old file or the new one, plus at most a temp file that `stale_temp_files` finds and `remove_stale` deletes.

`read_owned` is the matching reader for bookkeeping: the file must be a regular file owned by this user,
opened without following a link; anything else is a one-line PatchkitError naming the path. `read_regular`
reads data (patches, overlay files, target files) the same way without the owner check; `open_regular`
hands out the descriptor itself (a lock file, a cached wheel that is hashed and then read through it);
`link_on_the_way` finds a symlink between a tree's root and a file in it.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from . import PatchkitError, faults

TMP_SUFFIX = ".patchkit-tmp"
_counts: dict[str, int] = {}     # passes through each fault point by this process


def temp_path(path: Path) -> Path:
    """The temp name a write of `path` uses (`.NAME.patchkit-tmp` beside it)."""
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a regular file" if stat.S_ISREG(mode) else "something else"


def kind_of(path: Path) -> str | None:
    """What is at `path` without following a link ('a regular file', 'a symlink', ...), None if nothing."""
    try:
        return _kind(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


def _found(path: Path, kind: str) -> str:
    """What was found at `path`, in words for a refusal: its kind, and for a directory how many entries it holds."""
    if kind == "a directory":
        try:
            n = len(os.listdir(path))
        except OSError:
            return kind
        return f"{kind} ({n} {'entry' if n == 1 else 'entries'} in it)"
    return kind


def _unlink_any(path: Path) -> None:
    """Remove a non-directory entry of any type (a dangling link too); absent is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise PatchkitError(f"{path}: expected a file or nothing, found a directory; remove it and run again")
    os.unlink(path)


def atomic_write(path: Path, data: bytes, mode: int | None = None, fault: str | None = None) -> None:
    """Replace `path` with `data` all at once. `mode`: permission bits (default: 0o644 minus the umask).
    `fault`: the fault-injection point between the temp file's write and its rename (faults.py)."""
    path = Path(path)
    tmp = temp_path(path)
    _unlink_any(tmp)                    # a stale temp of an earlier, killed write: never written through
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o644 if mode is None else 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        if fault:
            n = _counts.get(fault, 0)
            _counts[fault] = n + 1
            faults.point(fault, n)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:   # a failed write() names no file: name it
            raise named(exc, path) from None
        raise
    _fsync_dir(path.parent)


def named(exc: OSError, path: Path) -> OSError:
    """`exc` with the file it was about (a full disk, an I/O error of write(), which carry no file name)."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def open_regular(path: Path, what: str, owned: bool = False, create: bool = False, mode: str = "r",
                 ours: bool = False) -> int | None:
    """A descriptor of the regular file at `path` (None if absent and not `create`), opened without following
    a link and without blocking on a FIFO; `owned`: it must belong to this user. `mode` "rw" opens it for
    writing too (a lock file). Anything else at `path` is a one-line PatchkitError naming it and what is there.
    Only at a name of patchkit's own (`owned`, or `ours`: its cache) does the error advise removing the entry:
    anywhere else (a target's file, the patch data) the entry is the user's, and may hold their files."""
    path = Path(path)
    advice = "; remove it if no patchkit command is running" if owned or ours else ""
    flags = (os.O_RDWR if mode == "rw" else os.O_RDONLY) | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if create:
        flags |= os.O_CREAT
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        if create:
            raise PatchkitError(f"{path}: cannot create {what} (its directory is missing)") from None
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR):
            kind = "a symlink" if exc.errno == errno.ELOOP else "a directory"
            raise PatchkitError(f"{path}: expected {what} (a regular file), found {_found(path, kind)}{advice}") from None
        raise PatchkitError(f"{path}: cannot open {what} ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PatchkitError(f"{path}: expected {what} (a regular file), found {_found(path, _kind(st.st_mode))}{advice}")
        if owned and hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise PatchkitError(f"{path}: expected {what} owned by uid {os.geteuid()}, found uid {st.st_uid}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read(path: Path, what: str, limit: int, owned: bool) -> bytes | None:
    fd = open_regular(path, what, owned=owned)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise PatchkitError(f"{path}: expected {what} of at most {limit} bytes, found {size}")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise PatchkitError(f"{path}: expected {what} of at most {limit} bytes, found more")
        return data
    finally:
        os.close(fd)


def read_owned(path: Path, what: str, limit: int = 64 << 20) -> bytes | None:
    """The bytes of a file patchkit owns, None if absent. It must be a regular file of this user, at most
    `limit` bytes; opened without following a link and without blocking on a FIFO."""
    return _read(Path(path), what, limit, owned=True)


def read_regular(path: Path, what: str, limit: int = 256 << 20) -> bytes | None:
    """The bytes of a data file (a patch, an overlay file), None if absent: a regular file, never a link's target."""
    return _read(Path(path), what, limit, owned=False)


def link_on_the_way(root: Path, rel: str) -> Path | None:
    """The first entry below `root` on the way to `root/rel` (the file itself included) that is a symlink."""
    path = Path(root)
    for part in rel.split("/"):
        path = path / part
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return path
        except (FileNotFoundError, NotADirectoryError):
            return None
    return None


def stale_temp_files(directory: Path) -> list[Path]:
    """Temp entries of any type (a dangling link too) an interrupted write left in `directory`."""
    directory = Path(directory)
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(directory / n for n in names if n.startswith(".") and n.endswith(TMP_SUFFIX))


def remove_stale(paths) -> None:
    for p in paths:
        _unlink_any(Path(p))
