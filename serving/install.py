"""`make install`: a virtualenv with the pinned SGLang release and its pinned dependencies, patched.

    python -m serving.install [--venv .venv-sglang]          # the serving environment (GPU machine)
    python -m serving.install --cpu-test-venv .venv-serve    # what tests/serving/test_serve_*.py need on a CPU

The serving environment gets `sglang==<pin>` from the package index with everything that release
pins (torch, FlashInfer, sglang-kernel, ...), pip showing progress for the large downloads; then
the patch series is applied to its site-packages and doctor says what the machine still lacks
(on a machine without a GPU: that serving needs one). A second run finds the stamp and only
re-checks: pip is skipped, apply reports "nothing to do".
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from patchkit import PatchkitError
from patchkit.hashing import sha256_bytes
from patchkit.lockfile import load_lock
from patchkit.report import printable_streams
from . import REPO

CPU_TEST_REQUIREMENTS = REPO / "serving" / "requirements-cpu-test.txt"


def say(msg: str) -> None:
    print(f"install: {msg}", flush=True)


def run(argv: list[str]) -> None:
    say("$ " + " ".join(str(a) for a in argv))
    subprocess.run([str(a) for a in argv], check=True)


def serving_requirements(lock) -> list[str]:
    """The pinned upstreams plus the runtime pins pin.lock records for them."""
    reqs = [f"{up.package}=={up.version}" for up in lock.upstreams.values()]
    reqs += [f"{name}=={lock.runtime[name]}" for name in ("torch", "triton") if name in lock.runtime]
    return reqs


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout
    return Path(out.strip())


def ensure_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", venv])
        run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"])
    return python


def stamp_ok(venv: Path, key: str) -> bool:
    stamp = venv / ".installed"
    return stamp.exists() and stamp.read_text().strip() == key


def write_stamp(venv: Path, key: str) -> None:
    (venv / ".installed").write_text(key + "\n")


def install_serving(venv: Path, line: str | None = None) -> int:
    lock = load_lock(REPO / "pin.lock", line)
    say(f"release line {lock.line}")
    reqs = serving_requirements(lock)
    key = sha256_bytes("\n".join(reqs).encode())
    python = ensure_venv(venv)
    if stamp_ok(venv, key):
        say(f"{venv} already has {' '.join(reqs)}")
    else:
        say(f"installing {' '.join(reqs)} and their pinned dependencies (several GB: CUDA torch, "
            "FlashInfer, sglang-kernel)")
        run([python, "-m", "pip", "install", "--progress-bar", "on", *reqs])
        write_stamp(venv, key)
    site = site_packages(python)
    say(f"applying the patch series to {site}")
    from patchkit.engine import Engine
    from patchkit.report import format_state
    try:
        state = Engine.from_repo(REPO, line=lock.line).apply(site)
        if state.before is not None:
            print(format_state(state))
    except PatchkitError as exc:
        say(f"error: {exc}")
        return 1
    say("checking the machine (python apply.py doctor):")
    from . import doctor
    rc = doctor.run_doctor(argparse.Namespace(venv=venv, target=site, gate=False, line=lock.line))
    if rc:
        say(f"installed and patched in {venv}; serving is not possible on this machine yet (see the verdict above)")
    else:
        say("ready: make serve (or make smoke)")
    return 0   # the install itself succeeded; doctor's verdict is about the machine


def install_cpu_tests(venv: Path, line: str | None = None) -> int:
    """The pinned sglang wheel (sha256-verified) without its CUDA-only dependencies."""
    from patchkit.fetch import fetch

    lock = load_lock(REPO / "pin.lock", line)
    wheel = fetch(lock.upstream("sglang"), log=say)
    key = sha256_bytes(CPU_TEST_REQUIREMENTS.read_bytes() + wheel.name.encode())
    python = ensure_venv(venv)
    if stamp_ok(venv, key):
        say(f"{venv} is up to date")
        return 0
    run([python, "-m", "pip", "install", "-q", "-r", CPU_TEST_REQUIREMENTS])
    run([python, "-m", "pip", "install", "-q", "--no-deps", wheel])
    write_stamp(venv, key)
    return 0


def main(argv: list[str] | None = None) -> int:
    printable_streams()   # a terminal that cannot encode a character gets it escaped
    parser = argparse.ArgumentParser(prog="python -m serving.install", description=__doc__.split("\n")[0])
    parser.add_argument("--venv", type=Path, default=REPO / ".venv-sglang")
    parser.add_argument("--cpu-test-venv", type=Path, help="build the CPU test environment here instead")
    parser.add_argument("--line", help="the release line of pin.lock (default: the newest)")
    args = parser.parse_args(argv)
    try:
        if args.cpu_test_venv:
            return install_cpu_tests(args.cpu_test_venv, args.line)
        return install_serving(args.venv, args.line)
    except subprocess.CalledProcessError as exc:
        say(f"error: {' '.join(map(str, exc.cmd))} exited with {exc.returncode}")
        return 1
    except PatchkitError as exc:
        say(f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
