"""Fetch pinned wheels through pip into a local cache, verifying sha256.

Where a file comes from is pip's configuration, never ours: pip.conf / PIP_CONFIG_FILE and the PIP_*
variables (index-url, extra-index-url, find-links, no-index, proxy, certificates) are used as the user
set them. pip is asked for one exact file: the target python, ABI and platform are the pinned wheel's
own tags, so pip picks that very file on any host. What pip saves is then checked against pin.lock.

A cached wheel is checked and used through one open file handle (`fetch_open`): it is opened without
following a link and must be a regular file, hashed from that handle, and the same handle is unpacked, so
a file swapped in after the check is never read, and a FIFO or device never blocks or feeds the unpack.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import PatchkitError, faults, fsio
from .hashing import sha256_file, sha256_stream


def cache_dir() -> Path:
    root = os.environ.get("PATCHKIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "patchkit"
    )
    path = Path(root) / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Release:
    artifact: str   # the wheel's file name
    sha256: str
    path: Path      # the file in the cache


def wheel_target(artifact: str) -> list[str]:
    """pip's --implementation/--python-version/--abi/--platform for one of the wheel's own tags.

    A compressed tag set (py2.py3, manylinux_2_17_x86_64.manylinux2014_x86_64) holds every combination,
    so any one of them names the file; the highest python version is taken.
    """
    parts = artifact[: -len(".whl")].split("-") if artifact.endswith(".whl") else []
    pythons = [re.fullmatch(r"([a-z]+)(\d+)", p) for p in parts[-3].split(".")] if len(parts) in (5, 6) else []
    if not pythons or not all(pythons):
        raise PatchkitError(f"{artifact}: expected a wheel file name NAME-VERSION-PYTHON-ABI-PLATFORM.whl")
    implementation, version = max((m.groups() for m in pythons), key=lambda g: int(g[1]))
    abi, platform = parts[-2].split(".")[0], parts[-1].split(".")[0]
    return ["--implementation", implementation, "--python-version", version, "--abi", abi, "--platform", platform]


def _pip_reason(stderr: str, returncode: int) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line[len("ERROR:"):].strip() for line in lines if line.startswith("ERROR:")]
    return "; ".join(errors or lines[-1:]) or f"pip exited with status {returncode}"


def _pip_download(package: str, version: str, like: str, dest: Path) -> Path:
    """The one file pip saves for `package==version` with `like`'s tags."""
    # pip's own progress bar on a terminal; quiet in logs and pipes (its errors still come on stderr)
    quiet = [] if sys.stdout.isatty() else ["--quiet", "--progress-bar", "off"]
    # the file is read, never installed here: the target's Requires-Python is no reason to refuse it
    # (a py3 wheel's target is Python "3", i.e. 3.0, below every release's Requires-Python)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--ignore-requires-python",
           "--disable-pip-version-check", *quiet, *wheel_target(like), "--dest", str(dest), f"{package}=={version}"]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        raise PatchkitError(f"pip download {package}=={version} (tags of {like}) failed: "
                            f"{_pip_reason(proc.stderr, proc.returncode)} (pip's configuration says where it looks)")
    saved = sorted(dest.iterdir())
    if len(saved) != 1:
        raise PatchkitError(f"pip download {package}=={version}: expected one wheel, found "
                            f"{', '.join(p.name for p in saved) or 'no file'}")
    return saved[0]


DOWNLOAD_PREFIX = ".pip-download-"
_IN_USE = ".patchkit-in-use"      # flock'ed by the run that downloads into the directory, for as long as it does
_CREATING = 600                   # seconds a directory without that file may still be one being created


@contextmanager
def _download_dir():
    """A private directory inside the cache for one pip download (a verified file is renamed into place, a
    refused one goes with the directory), holding a locked file while in use: a run killed mid-download
    leaves it unlocked, and the next fetch removes it, as pip removes its own temp directories."""
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=DOWNLOAD_PREFIX) as tmp:
        fd = os.open(Path(tmp) / _IN_USE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            files = Path(tmp) / "files"
            files.mkdir()
            yield files
        finally:
            os.close(fd)


def remove_abandoned_downloads(log=print) -> list[Path]:
    """Remove the download directories of runs that were killed (their lock can be taken); a download in
    progress (locked) is left alone. Returns what was removed."""
    removed = []
    for entry in sorted(cache_dir().glob(DOWNLOAD_PREFIX + "*")):
        if fsio.kind_of(entry) != "a directory":
            continue
        try:
            fd = os.open(entry / _IN_USE, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:    # being created this instant, or left by a version without the lock file
            try:
                if time.time() - entry.stat().st_mtime < _CREATING:
                    continue
            except FileNotFoundError:
                continue
            fd = None
        except OSError:
            continue
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
        except BlockingIOError:
            continue                 # a download in progress
        finally:
            if fd is not None:
                os.close(fd)
    if removed:
        log(f"removed {len(removed)} download folder(s) an interrupted fetch left in the cache: "
            f"{', '.join(str(p) for p in removed)}")
    return removed


def _keep(path: Path, dest: Path) -> None:
    os.chmod(path, 0o644)   # a shared cache: readable like any downloaded file
    os.replace(path, dest)


def _check_sha256(path: Path, upstream, where: str, remedy: str) -> None:
    found = sha256_file(path)
    if found != upstream.sha256:
        raise PatchkitError(f"{where}: sha256 mismatch for {upstream.package} {upstream.version}: "
                            f"expected {upstream.sha256}, found {found} ({remedy})")


_verified: dict[str, int] = {}   # verified opens per upstream by this process (the `fetched` fault point)


def _open_verified(path: Path, upstream, remedy: str):
    """`path` opened once (a regular file, no link followed), its sha256 checked from that handle; at offset 0."""
    fd = fsio.open_regular(path, f"the cached wheel of {upstream.label}", ours=True)
    fh = os.fdopen(fd, "rb")
    try:
        found = sha256_stream(fh)
        if found != upstream.sha256:
            raise PatchkitError(f"{path}: sha256 mismatch for {upstream.package} {upstream.version}: "
                                f"expected {upstream.sha256}, found {found} ({remedy})")
        fh.seek(0)
    except BaseException:
        fh.close()
        raise
    return fh


def fetch_open(upstream, log=print):
    """(path, open handle) of the cached, verified artifact of `upstream` (a lockfile.Upstream); the handle
    is the one whose bytes were hashed. pip is asked only when nothing is cached."""
    dest = cache_dir() / upstream.artifact
    remove_abandoned_downloads(log)
    if fsio.kind_of(dest) is None:      # anything else there (a link, a FIFO) is refused by _open_verified
        log(f"fetching {upstream.artifact} through pip")
        with _download_dir() as tmp:
            got = _pip_download(upstream.package, upstream.version, upstream.artifact, Path(tmp))
            faults.point("downloaded", 0)   # pip has saved the file, nothing is verified or cached yet
            if got.name != upstream.artifact:
                raise PatchkitError(f"pip download {upstream.package}=={upstream.version}: expected {upstream.artifact}, "
                                    f"found {got.name}; nothing cached")
            _check_sha256(got, upstream, f"{got.name} from pip",
                          "pin.lock and the file pip's configuration serves disagree; nothing cached")
            _keep(got, dest)
    # which of the two is wrong is not ours to guess (pip's --require-hashes does not either): never advise
    # deleting a cached file that may be the good one
    handle = _open_verified(dest, upstream, "the pin in pin.lock and the cached file disagree: if pin.lock's sha256 "
                            "was edited, restore it (git diff pin.lock); if not, the cached file is not the pinned "
                            "release: find out where it came from before replacing it; nothing read from it")
    n = _verified.get(upstream.name, 0)
    _verified[upstream.name] = n + 1
    faults.point("fetched", n)      # the race test swaps the cached file here: the handle must not care
    return dest, handle


def fetch(upstream, log=print) -> Path:
    """The cached, verified artifact of `upstream`, for callers that hand the path to another tool
    (pip install); patchkit itself reads wheels through fetch_open's handle."""
    path, fh = fetch_open(upstream, log)
    fh.close()
    return path


def find_release(package: str, version: str, like_artifact: str, log=print) -> Release:
    """The `version` wheel of `package` with the tags of `like_artifact`, downloaded through pip into the cache.

    Its sha256 is read off the downloaded file: pip has checked it against the digest the index publishes.
    """
    log(f"downloading {package}=={version} through pip")
    with _download_dir() as tmp:
        got = _pip_download(package, version, like_artifact, Path(tmp))
        digest = sha256_file(got)
        dest = cache_dir() / got.name
        if dest.exists() and sha256_file(dest) != digest:
            # two sources disagree on one file name: never pick one silently
            raise PatchkitError(f"{dest}: sha256 mismatch for {package} {version}: the cached file has "
                                f"{sha256_file(dest)}, pip downloaded {digest} (delete the cached file to use pip's)")
        _keep(got, dest)
    return Release(dest.name, digest, dest)
