"""Fault injection for the recovery tests, off unless PATCHKIT_TEST_FAULT is set.

PATCHKIT_TEST_FAULT is a comma-separated list of [POINT:]KIND:N; POINT defaults to `write` (the
transaction's file writes). At the N-th pass through `point(POINT, N)` the process acts as KIND says:
  kill    exit at once with status 137, as SIGKILL would (no cleanup, no finally blocks)
  raise   raise OSError (an I/O error the code must survive)
  enospc  raise OSError(ENOSPC) (a full disk)
  pause   create $PATCHKIT_TEST_PAUSE.waiting, then wait until $PATCHKIT_TEST_PAUSE exists (at most 60 s)
Points: write, rollback (transaction.py), tmp (between a temp file's write and its rename), unpack
(pristine.py, per file), backup, restore (backup.py), replay, refresh (rebase.py), fetched (fetch.py: a
cached wheel verified and open, before it is read), downloaded (fetch.py: pip has saved a wheel into its
download folder, nothing verified or cached yet), pr-body (export-pr: a PR body between its temp file and
its rename), pin-lock (rebase: pin.lock between its temp file and its rename), state (the rebase state
file), backup-manifest (the rebase backup's manifest).
"""
from __future__ import annotations

import errno
import os
import re
import time

from . import PatchkitError

VARIABLE = "PATCHKIT_TEST_FAULT"
KINDS = ("kill", "raise", "enospc", "pause")
# Every point the code passes through (tests/faults/test_faults_tracebacks.py holds this list to the code): a
# name not here never fires, so a misspelled one would make a recovery test pass without its fault.
POINTS = ("write", "rollback", "tmp", "unpack", "backup", "backup-manifest", "restore", "replay", "refresh",
          "fetched", "downloaded", "pr-body", "pin-lock", "state")
_ITEM = re.compile(r"(?:([A-Za-z][A-Za-z0-9_-]*):)?(" + "|".join(KINDS) + r"):(\d+)")


def problem() -> str | None:
    """What is wrong with PATCHKIT_TEST_FAULT, in one line (None when it is unset or well formed)."""
    for item in os.environ.get(VARIABLE, "").split(","):
        if not item:
            continue
        m = _ITEM.fullmatch(item)
        if not m:
            return (f"{VARIABLE}: expected a comma-separated list of [POINT:]KIND:N with KIND one of "
                    f"{', '.join(KINDS)} and N a count, found {item!r}")
        if m.group(1) and m.group(1) not in POINTS:
            return f"{VARIABLE}: expected a POINT of {', '.join(POINTS)}, found {m.group(1)!r} in {item!r}"
    return None


def _specs():
    bad = problem()
    if bad:      # the command line checks it first (exit 2); a library caller still gets one line
        raise PatchkitError(bad)
    for item in filter(None, os.environ.get(VARIABLE, "").split(",")):
        where, kind, n = _ITEM.fullmatch(item).groups()
        yield where or "write", kind, int(n)


def point(name: str, count: int) -> None:
    for where, kind, n in _specs():
        if where != name or n != count:
            continue
        if kind == "kill":
            os._exit(137)
        if kind == "enospc":
            raise OSError(errno.ENOSPC, f"No space left on device (injected at {name}:{count})")
        if kind == "pause":
            flag = os.environ["PATCHKIT_TEST_PAUSE"]
            open(flag + ".waiting", "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.05)
            continue
        raise OSError(f"injected fault at {name}:{count}")
