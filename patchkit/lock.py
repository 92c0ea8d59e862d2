"""One writer at a time: an advisory lock file (fcntl.flock) that names its holder's pid.

The kernel drops a flock when its holder exits, however it exits, so a lock file whose lock can be
taken is stale by definition: the pid in it is reported and the lock taken over. A second command
waits for the holder (PATCHKIT_LOCK_WAIT seconds, default 300; 0 = refuse at once) and then refuses.
The lock file is removed on release; a waiter that locked a removed file notices and tries again.
It is opened without following a link and must be a regular file of this user (fsio.open_regular): a
symlink planted at its name (even one committed to a repository) never makes patchkit write elsewhere.
"""
from __future__ import annotations

import fcntl
import math
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from . import PatchkitError, fsio

_held: set[str] = set()     # locks this process holds (re-entrant: apply inside a locked command)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _wait_seconds() -> float:
    text = os.environ.get("PATCHKIT_LOCK_WAIT", "300")
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):   # nan and inf would wait forever, a negative never
        raise PatchkitError(f"PATCHKIT_LOCK_WAIT: expected a finite number of seconds >= 0, found {text!r}")
    return seconds


def _holder(fd: int) -> tuple[int | None, str]:
    text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    pid, _, what = text.partition(" ")
    return (int(pid) if pid.isdigit() else None), what


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _flocked(inode: int) -> bool | None:
    """Whether the kernel lists a flock held on `inode` (Linux /proc/locks); None where it cannot be read."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            rows = [line.split() for line in fh]
    except OSError:
        return None
    # "1: FLOCK  ADVISORY  WRITE 4242 00:2e:1234 0 EOF"; a waiter's row reads "1: -> FLOCK ..." and is skipped.
    # The pid column is the holder's as this process's pid namespace sees it (0 if it cannot): not compared.
    return any(len(r) > 5 and r[1] == "FLOCK" and r[5].rsplit(":", 1)[-1] == str(inode) for r in rows)


def live_holder(path: Path) -> tuple[int, str] | None:
    """(pid, command) of another process that holds the lock at `path` now; None if none does (no lock file, or
    one its writer left when it died). Read-only: it never takes the lock, so asking never delays a writer."""
    try:
        fd = fsio.open_regular(path, "a lock file", owned=True)
    except PatchkitError:
        return None
    if fd is None:
        return None
    try:
        pid, what = _holder(fd)
        inode = os.fstat(fd).st_ino
    finally:
        os.close(fd)
    if pid is None or pid == os.getpid() or not _alive(pid):
        return None
    if _flocked(inode) is False:      # the pid of a writer that died, since taken by another process
        return None
    return pid, what or "a command"


@contextmanager
def locked(path: Path, label: str, command: str, log=_stderr):
    """Hold the lock at `path` for `label` (what it protects) while `command` runs."""
    path = Path(path)
    key = str(path.parent.resolve() / path.name)   # the lock's own name: a link there is refused, not followed
    if key in _held:
        yield
        return
    deadline = time.monotonic() + _wait_seconds()
    waiting = False
    while True:
        try:
            fd = fsio.open_regular(path, f"the lock file of {label}", owned=True, create=True, mode="rw")
        except PatchkitError as exc:
            raise PatchkitError(f"{exc}; nothing written") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, what = _holder(fd)
            os.close(fd)
            who = f"pid {pid} ({what})" if pid else "another process"
            if time.monotonic() >= deadline:
                raise PatchkitError(f"{label} is locked by {who} ({path}); nothing written: try again when it has finished")
            if not waiting:
                log(f"waiting for {who} to finish with {label} ...")
                waiting = True
            time.sleep(0.1)
            continue
        try:
            same = os.lstat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:            # its holder removed it between our open and our flock
            os.close(fd)
            continue
        break
    try:
        pid, what = _holder(fd)
        if pid is not None and pid != os.getpid():
            state = "is no longer running" if not _alive(pid) else "no longer holds it"
            log(f"note: took over a stale lock on {label} ({path}): pid {pid} ({what}) {state}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {command}\n".encode(), 0)
        _held.add(key)
        yield
    finally:
        _held.discard(key)
        try:
            if os.lstat(path).st_ino == os.fstat(fd).st_ino:   # ours still: never remove what replaced it
                os.unlink(path)
        except FileNotFoundError:
            pass
        os.close(fd)
