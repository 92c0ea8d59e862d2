"""`python apply.py doctor`: is this machine ready to serve the patched SGLang, and if not, why.

Reports the GPU (name, compute capability), driver and CUDA, the versions installed in the
sglang environment against pin.lock, nvcc, and the patch state of that environment's
site-packages; then a verdict saying what to fix. `--gate` prints only the first blocking
reason as one line and exits 1 (make serve / make smoke run it first).

`--tree pinned` asks for the pinned baseline on purpose (make serve/smoke TREE=pinned): then a
pristine tree is what the gate wants, and a patched one is refused. Without it (TREE=patched, the
default) a tree that is not fully patched is refused, as before. gate_bundle() is the same gate
for a tree of an installed offline bundle (serving/bundle.py), run by serve_cmd/smoke/bench.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from patchkit import PatchkitError, jsonio
from patchkit.report import printable_streams
from . import REPO

# make install's venv in a checkout; installed (pip install . into the sglang environment), that environment
_INSTALLED = __package__ != "serving" and not (REPO / "pyproject.toml").is_file()
DEFAULT_VENV = Path(sys.prefix) if _INSTALLED else REPO / ".venv-sglang"
MIN_SM120_CUDA = (12, 8)   # sglang's is_sm120_supported(): capability major 12 and CUDA >= 12.8

def install_command(venv: Path) -> str:
    """What (re)builds the sglang environment: make's target in a checkout; installed, where `make` means
    nothing, the install module the package ships, run by this interpreter."""
    if not _INSTALLED:
        return "make install"
    return f"{shlex.quote(sys.executable)} -m {__package__}.install --venv {shlex.quote(str(venv))}"


def apply_command(site) -> str:
    """What patches a site-packages: apply.py in a checkout, the `patchkit` command installed."""
    return f"{'patchkit' if _INSTALLED else 'python apply.py'} apply --target {shlex.quote(str(site))}"


# Runs inside the sglang environment's interpreter: what is installed there and what torch sees.
PROBE = r"""
import json, sys, sysconfig
from importlib import metadata
out = {"python": sys.version.split()[0], "site": sysconfig.get_paths()["purelib"], "versions": {}}
for dist in ("torch", "triton", "flashinfer-python", "sglang", "sglang-kernel"):
    try:
        out["versions"][dist] = metadata.version(dist)
    except metadata.PackageNotFoundError:
        out["versions"][dist] = None
try:
    import torch
    out["torch_cuda"] = torch.version.cuda
    out["gpus"] = [{"name": torch.cuda.get_device_name(i), "cc": list(torch.cuda.get_device_capability(i))}
                   for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@dataclass
class Gpu:
    name: str
    cc: tuple[int, int]

    @property
    def sm(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"


@dataclass
class Facts:
    python: str | None = None                 # the sglang environment's interpreter (None: absent)
    site: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    torch_cuda: str | None = None
    torch_error: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    driver: str | None = None                 # from nvidia-smi
    driver_cuda: str | None = None
    nvcc: str | None = None                   # "path (release X)"
    patch_state: str | None = None            # patchkit TargetState.summary
    patch_lines: list[str] = field(default_factory=list)


@dataclass
class Problem:
    blocking: bool     # serve/smoke cannot work until it is fixed
    text: str


# -- gathering ----------------------------------------------------------------------------------

def _run(argv: list[str], timeout: float = 60) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def probe_env(python: Path) -> dict:
    out = _run([str(python), "-c", PROBE], timeout=300)
    if out is None:
        return {"torch_error": f"{python} could not run the probe"}
    try:   # the probe's last line; bounded like every JSON serving reads
        return jsonio.parse(out.strip().splitlines()[-1] if out.strip() else "", "the probe's output")
    except PatchkitError as exc:
        return {"torch_error": str(exc)}


def nvidia_smi() -> tuple[str | None, str | None]:
    """(driver version, CUDA version the driver supports), or Nones without nvidia-smi."""
    out = _run(["nvidia-smi"])
    if not out:
        return None, None
    driver = re.search(r"Driver Version:\s*([\d.]+)", out)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", out)
    return (driver and driver.group(1)), (cuda and cuda.group(1))


def find_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = str(Path(home) / "bin" / "nvcc") if home else shutil.which("nvcc")
    if not nvcc or not os.path.exists(nvcc):
        return None
    release = re.search(r"release ([\d.]+)", _run([nvcc, "--version"]) or "")
    return f"{nvcc} (release {release.group(1) if release else '?'})"


def patch_status(target: Path, engine=None) -> tuple[str, list[str]]:
    """The engine's summary for target and one line per upstream/patch."""
    if engine is None:
        from patchkit.engine import Engine
        engine = Engine.from_repo(REPO)
    from patchkit import attestation

    state = engine.status(target)
    lines = []
    for up in state.upstreams:
        lines.append(f"{up.name}: {up.summary}")
        lines += [f"  {p.state:9} {p.name}" for p in up.patches]
    lines.append(attestation.describe(target, engine.patch_set()))   # which patch set the tree says it carries
    return state.summary, lines


def gather(venv: Path, target: Path | None = None, engine=None) -> Facts:
    facts = Facts()
    python = Path(venv) / "bin" / "python"
    if python.exists():
        env = probe_env(python)
        facts.python = str(python)
        facts.site = env.get("site")
        _read_probe(facts, env)
    _read_machine(facts)
    target = target or (Path(facts.site) if facts.site else None)
    if target is not None:
        try:
            facts.patch_state, facts.patch_lines = patch_status(Path(target), engine)
        except Exception as exc:   # a report must still come out; the verdict names the failure
            facts.patch_state, facts.patch_lines = "unknown", [f"{type(exc).__name__}: {exc}"]
    return facts


# -- judging ------------------------------------------------------------------------------------

def _version_tuple(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:2])


def pinned_versions(lock) -> dict[str, str]:
    pins = {up.package: up.version for up in lock.upstreams.values()}
    pins.update({k: v for k, v in lock.runtime.items() if k in ("torch", "triton")})
    return pins


def verdict(facts: Facts, pins: dict[str, str], venv: Path, want_tree: str = "patched",
            environ=os.environ) -> list[Problem]:
    problems = []
    if facts.python is None:
        problems.append(Problem(True, f"no sglang environment at {venv}: run {install_command(venv)}"))
    elif facts.torch_error:
        problems.append(Problem(True, f"torch does not import in {venv} ({facts.torch_error}): run {install_command(venv)}"))
    if facts.python is not None and not facts.torch_error and not facts.gpus:
        smi = f"nvidia-smi: driver {facts.driver}" if facts.driver else "nvidia-smi not found"
        problems.append(Problem(True, f"no CUDA GPU visible to torch ({smi}): serve and smoke need an NVIDIA GPU, "
                                      "sm_120 (RTX 50xx / RTX PRO Blackwell) for the patched paths"))
    for gpu in facts.gpus[:1]:
        if gpu.cc[0] != 12 and environ.get("OVERLAY_EMULATE_SM120") == "1":
            problems.append(Problem(False, f"this GPU is {gpu.sm}: OVERLAY_EMULATE_SM120=1 forces sglang's sm_120 "
                                           "branches on it (TEST ONLY; docs/serving.md says what differs)"))
        elif gpu.cc[0] != 12:
            problems.append(Problem(False, f"this GPU is {gpu.sm}: the sm_120 paths are inactive; the patches "
                                           "change nothing here (sglang uses FlashMLA/DeepGEMM on it)"))
        elif _version_tuple(facts.torch_cuda) < MIN_SM120_CUDA:
            problems.append(Problem(True, f"torch is built for CUDA {facts.torch_cuda}; sglang takes its sm_120 "
                                          f"paths only with CUDA >= 12.8: run {install_command(venv)}"))
    for dist, want in pins.items():
        have = facts.versions.get(dist)
        if facts.python is not None and have is not None and have.split("+")[0] != want:
            problems.append(Problem(False, f"{dist} {have} installed, pin.lock pins {want}: run {install_command(venv)}"))
        elif facts.python is not None and have is None:
            problems.append(Problem(True, f"{dist} is not installed in {venv}: run {install_command(venv)}"))
    if want_tree == "pinned":
        if facts.patch_state not in (None, "pristine"):
            problems.append(Problem(True, f"TREE=pinned asks for the pinned baseline, but patches are "
                                          f"{facts.patch_state} in {facts.site}"))
        elif facts.patch_state == "pristine":
            problems.append(Problem(False, f"serving the pinned baseline (TREE=pinned): patches are pristine in "
                                           f"{facts.site}, as asked"))
    elif facts.patch_state not in (None, "applied"):
        problems.append(Problem(True, f"patches are {facts.patch_state} in {facts.site}: run {install_command(venv)} "
                                      f"(or {apply_command(facts.site)})"))
    if facts.gpus and facts.nvcc is None:
        problems.append(Problem(False, "nvcc not found (CUDA_HOME or PATH): FlashInfer cannot JIT-build its "
                                       "kernels (FP4 quantization) on first use; install the CUDA toolkit >= 12.8"))
    return problems


def overlay_state(tree_dir: Path, overlay: Path) -> str:
    """Patch state of an installed bundle tree without the pinned wheels (the offline box has none):
    'applied' when every overlay file of this checkout's line (overlay/LINE) is there byte for byte, 'pristine' when none
    is, 'outdated' when all are there but some differ (installed from another checkout), else 'partial'."""
    files = [f for f in sorted(overlay.rglob("*")) if f.is_file() and "__pycache__" not in f.parts]
    present = [f for f in files if (tree_dir / f.relative_to(overlay)).is_file()]
    if not present:
        return "pristine"
    if len(present) < len(files):
        return "partial"
    same = all((tree_dir / f.relative_to(overlay)).read_bytes() == f.read_bytes() for f in files)
    return "applied" if same else "outdated"


def _read_probe(facts: Facts, env: dict) -> None:
    """What PROBE printed about the interpreter: its versions, torch's CUDA and GPUs."""
    facts.versions = env.get("versions", {})
    facts.torch_cuda = env.get("torch_cuda")
    facts.torch_error = env.get("torch_error")
    facts.gpus = [Gpu(g["name"], tuple(g["cc"])) for g in env.get("gpus", [])]


def _read_machine(facts: Facts) -> None:
    """What the machine has outside the interpreter: the driver and nvcc."""
    facts.driver, facts.driver_cuda = nvidia_smi()
    facts.nvcc = find_nvcc()


def _runtime_lock(versions: dict):
    """The line whose [runtime] is this machine's torch/triton, from one reading of pin.lock; where none is, the
    line pin.lock gives by default, whose pins the verdict then names as missing."""
    from patchkit.lines import runtime_line
    from patchkit.lockfile import load_lock, load_locks
    try:
        return runtime_line(load_locks(REPO / "pin.lock"), versions.get("torch"), versions.get("triton"))
    except PatchkitError:
        return load_lock(REPO / "pin.lock")


def gate_bundle(python: Path, site_root: Path, tree: str, log=print, environ=os.environ) -> int:
    """The gate for one tree of an installed bundle, run by `python` (this machine's torch/triton).
    Prints the first blocking reason as 'doctor: ...' and returns 1, or the notes and returns 0."""
    from . import bundle

    try:
        entries = bundle.tree_pythonpath(Path(site_root), tree)
    except Exception as exc:
        log(f"doctor: {exc}")
        return 1
    facts = Facts(python=str(python), site=entries[0])
    out = None
    try:
        out = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=300, check=True,
                             env={**environ, "PYTHONPATH": os.pathsep.join(entries)}).stdout
    except (OSError, subprocess.SubprocessError):
        facts.torch_error = f"{python} could not run the probe"
    env = None
    if out:
        try:
            env = jsonio.parse(out.strip().splitlines()[-1] if out.strip() else "", "the probe's output",
                               lambda v: None if isinstance(v, dict) else "expected a JSON object")
        except PatchkitError as exc:
            facts.torch_error = str(exc)
    if env:
        _read_probe(facts, env)
    _read_machine(facts)
    lock = _runtime_lock(facts.versions)   # the line this machine's runtime runs
    facts.patch_state = overlay_state(Path(entries[0]), REPO / "overlay" / lock.line)
    # sglang/flashinfer come from the bundle's pinned wheels (its manifest); the machine brings torch/triton.
    pins = {k: v for k, v in pinned_versions(lock).items() if k in ("torch", "triton")}
    problems = verdict(facts, pins, Path(python), want_tree=tree, environ=environ)
    for p in problems:   # the fix for a bundle tree is a reinstall, not make install
        if p.text.startswith("patches are "):
            p.text = (f"patches are {facts.patch_state} in {facts.site}: reinstall the bundle "
                      f"(python3 -m serving.bundle install BUNDLE --into {site_root})")
    blocking = [p for p in problems if p.blocking]
    if blocking:
        log(f"doctor: {blocking[0].text}")
        return 1
    for p in problems:
        log(f"doctor: note: {p.text}")
    return 0


def summary_line(facts: Facts, problems: list[Problem]) -> str:
    if not problems and facts.gpus and facts.gpus[0].cc[0] == 12:
        return f"{facts.gpus[0].sm} detected; all patches applied"
    first = next((p for p in problems if p.blocking), problems[0] if problems else None)
    return first.text if first else "ready"


# -- output -------------------------------------------------------------------------------------

def report(facts: Facts, pins: dict[str, str], problems: list[Problem], venv: Path) -> str:
    lines = []
    if facts.gpus:
        lines += [f"GPU {i}: {g.name}, compute capability {g.cc[0]}.{g.cc[1]} ({g.sm})" for i, g in enumerate(facts.gpus)]
    else:
        lines.append("GPU: none visible")
    lines.append(f"driver: {facts.driver or 'unknown (no nvidia-smi)'}, driver CUDA {facts.driver_cuda or '-'}, "
                 f"torch CUDA {facts.torch_cuda or '-'}")
    lines.append(f"nvcc: {facts.nvcc or 'not found'}")
    lines.append(f"environment: {facts.python or f'{venv} (absent)'}")
    for dist, want in pins.items():
        have = facts.versions.get(dist)
        mark = "ok" if have and have.split("+")[0] == want else "MISMATCH" if have else "missing"
        lines.append(f"  {dist:18} {have or '-':16} pin {want:10} {mark}")
    for dist in ("sglang-kernel",):
        lines.append(f"  {dist:18} {facts.versions.get(dist) or '-'}")
    lines.append(f"patches in {facts.site or '-'}: {facts.patch_state or 'not checked'}")
    lines += [f"  {line}" for line in facts.patch_lines]
    lines.append("verdict: " + summary_line(facts, problems))
    lines += [f"  {'fix' if p.blocking else 'note'}: {p.text}" for p in problems]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the sglang environment (make install; installed: this one)")
    parser.add_argument("--target", type=Path, help="site-packages to check the patches in (default: the venv's)")
    parser.add_argument("--gate", action="store_true",
                        help="print only the first blocking reason, as one line; exit 1 if there is one")
    parser.add_argument("--tree", choices=("patched", "pinned"), default="patched",
                        help="which tree is wanted: patched (default) or the pinned baseline, asked for explicitly")


def run_doctor(args: argparse.Namespace, engine=None) -> int:
    """`engine`: the command's own (apply.py doctor hands down the one its command line resolved); standalone, the
    line is resolved here, once, and that Engine is what every check below reads."""
    if engine is None:
        from patchkit.engine import Engine
        engine = Engine.from_repo(REPO, line=getattr(args, "line", None))
    facts = gather(args.venv, args.target, engine)
    pins = pinned_versions(engine.lock)
    problems = verdict(facts, pins, args.venv, want_tree=getattr(args, "tree", "patched"))
    blocking = [p for p in problems if p.blocking]
    if args.gate:
        if blocking:
            print(f"doctor: {blocking[0].text}")
            return 1
        for p in problems:
            print(f"doctor: note: {p.text}")
        return 0
    print(report(facts, pins, problems, args.venv))
    return 1 if blocking else 0


def add_parser(subparsers) -> None:
    """The `doctor` subcommand of apply.py (apply.py hands it to patchkit.cli as an extension)."""
    p = subparsers.add_parser("doctor", help="GPU, versions, nvcc and patch state; what to fix",
                              description=__doc__.split("\n")[0])
    add_arguments(p)
    p.set_defaults(func=lambda engine, args: run_doctor(args, engine))


def main(argv: list[str] | None = None) -> int:
    printable_streams()   # a terminal that cannot encode a character gets it escaped
    parser = argparse.ArgumentParser(prog="python -m serving.doctor", description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument("--line", help="the release line of pin.lock (default: the newest)")
    return run_doctor(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
