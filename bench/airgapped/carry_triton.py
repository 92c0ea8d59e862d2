"""A Triton release small enough to travel to an air-gapped GPU machine, and its install there.

    python3 -m bench.airgapped.carry_triton build --version 3.9.0 [--python 3.12] [--archs 90,120] [--out build/carry-triton-3.9.0]
    python3 -m bench.airgapped.carry_triton install build/carry-triton-3.9.0 --into /tmp/triton-3.9.0   # on the GPU machine

The GPU machine has one Triton (its torch's); a newer one (3.8 for SGLang 0.5.23, 3.9 for torch 2.15) is a
250-290 MB wheel and ~900 MB unpacked, far more than a small copy to an air-gapped machine should carry. What a kernel run needs is much smaller.
`build` reads the release itself rather than assuming how the last one was laid out:
  * the wheel: `pip download` through pip's own configuration, then the one whose tags the target interpreter
    supports, best first (packaging.tags: 3.8 ships `cp312-cp312`, 3.9 `cp312-abi3`);
  * ptxas: its NVIDIA backend's `get_ptxas(arch)` (triton/backends/nvidia/compiler.py in the wheel), evaluated for
    the target archs (`--archs`, default sm_90 for the H100/H200 and sm_120 for the RTX PRO 6000); every ptxas
    it picks for them is kept (3.8: ptxas for sm_90, ptxas-blackwell for sm_120; 3.9: ptxas-blackwell for both),
    the others are left out;
  * the launcher: what triton/backends/nvidia/driver.py compiles and includes (its `driver.c`, its include dirs)
    is kept whatever the rules below say; a rule that would drop it fails the build.
DROPPED lists what no NVIDIA kernel launch loads (profiler, CUPTI, test plugins, disassemblers, AMD's code
generator), STRIPPED the compiler library whose symbols go (`strip --strip-unneeded`, code untouched). The rest is
packed with bench/airgapped/carry.py: one deterministic `payload.tar.xz` and `manifest.json` (the wheel's sha256, every
member's size and sha256, what was dropped or stripped and why, the ptxas each arch uses). `install` is
bench/airgapped/carry.py's: everything checked before anything is written, a wrong byte refused with one line. Put INTO
first on PYTHONPATH and `import triton` is the carried release, compiling with its own ptxas.
Torch stays the machine's own: the decode kernels are launched by Triton, not by inductor.
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, NamedTuple

from bench.airgapped.carry import MIB, PAYLOAD, CarryError, file_sha256, install, pack
from serving import REPO

try:
    from packaging import tags as wheel_tags
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import InvalidVersion, Version
except ImportError:  # pip carries its own copy; pip is what downloads the wheel anyway
    from pip._vendor.packaging import tags as wheel_tags
    from pip._vendor.packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from pip._vendor.packaging.version import InvalidVersion, Version

# sm_90: the GPU machine (H100/H200); sm_120: the users' RTX PRO 6000 and other Blackwell workstation cards.
DEFAULT_ARCHS = (90, 120)
# Archs get_ptxas is asked about to say what a left-out ptxas would have served (the manifest's why).
KNOWN_ARCHS = (75, 80, 86, 89, 90, 100, 103, 110, 120, 121)
# The platforms the wheel is looked for on (x86_64 Linux, glibc 2.17 to 2.28: the manylinux tags Triton ships).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
COMPILER = "triton/backends/nvidia/compiler.py"
KNOBS = "triton/knobs.py"
DRIVER = "triton/backends/nvidia/driver.py"
NVIDIA = "triton/backends/nvidia"


class Rule(NamedTuple):
    pattern: str
    why: str
    since: str = "3.6"   # the first release that ships it: from there on the rule must match a file


# What an NVIDIA kernel launch never loads, with why. Every rule must match a file of each release from `since`
# on (a rule that matches nothing means the release moved a file, and the payload would silently carry it).
# ptxas is not here: which one goes is the release's own get_ptxas rule (ptxas_plan).
DROPPED = [
    Rule("triton/backends/nvidia/lib/cupti/*", "CUPTI: the profiler's (proton) tracing library"),
    Rule("triton/backends/nvidia/lib/cupti-blackwell/*", "CUPTI for Blackwell: the profiler's"),
    Rule("triton/_C/libproton.so", "proton, Triton's profiler: only `triton.profiler` loads it"),
    Rule("triton/plugins/*", "MLIR dialect plugin examples (tests)"),
    Rule("triton/instrumentation/*", "GPU instrumentation test library"),
    Rule("triton/FileCheck", "LLVM FileCheck, for Triton's own lit tests"),
    Rule("triton/backends/nvidia/bin/cuobjdump", "disassembler: inspection only"),
    Rule("triton/backends/nvidia/bin/nvdisasm", "disassembler: inspection only"),
    Rule("triton/backends/amd/lib/libtriton_amd_codegen.so",
         "AMD's code generator: only the AMD backend loads it (ctypes, backends/amd/compiler.py), to compile for AMD GPUs",
         since="3.9"),
]
STRIPPED = ["triton/_C/libtriton.so"]  # symbols only (--strip-unneeded): 506 -> ~192 MB on 3.8.0

Reader = Callable[[str], str]   # a release file's text by its path in the wheel ("triton/knobs.py")


def release_key(version: str) -> tuple:
    return tuple(int(p) for p in version.split(".")[:2])


# ---- the wheel: by the target interpreter's tags --------------------------------------------------------------
def supported_tags(python: str) -> list:
    """The tags a CPython `python` (e.g. "3.12") on x86_64 Linux installs, best first (packaging.tags, as pip)."""
    version = tuple(int(p) for p in python.split("."))
    return list(wheel_tags.cpython_tags(version, platforms=PLATFORMS)) + \
        list(wheel_tags.compatible_tags(version, f"cp{python.replace('.', '')}", platforms=PLATFORMS))


def pick_wheel(candidates: list[Path], version: str, python: str) -> Path | None:
    """The triton VERSION wheel among CANDIDATES that CPython `python` installs, by the best tag it carries."""
    rank = {tag: i for i, tag in enumerate(supported_tags(python))}
    best = None
    for path in candidates:
        try:
            name, ver, _, file_tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        score = min((rank[t] for t in file_tags if t in rank), default=None)
        if name == "triton" and ver == Version(version) and score is not None and (best is None or score < best[0]):
            best = (score, path)
    return best[1] if best else None


def pip_errors(stderr: str) -> str:
    """What pip says went wrong: its ERROR lines (its last line may be a warning about an index location)."""
    errors = [l.strip() for l in stderr.splitlines() if l.strip().startswith("ERROR:")]
    return " ".join(errors) if errors else f"no ERROR line (exit status only; last line: {stderr.strip().splitlines()[-1:]})"


def download_wheel(version: str, python: str, dest: Path) -> Path:
    """The release's manylinux x86_64 wheel for CPython `python`, through pip's own configuration."""
    try:
        Version(version)
    except InvalidVersion:
        raise CarryError(f"expected a Triton release such as 3.9.0, found {version!r}") from None
    dest.mkdir(parents=True, exist_ok=True)
    found = pick_wheel(sorted(dest.glob("triton-*.whl")), version, python)
    if found:
        return found
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", python,
           "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)], "-d", str(dest),
           f"triton=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = pick_wheel(sorted(dest.glob("triton-*.whl")), version, python)
    if proc.returncode:
        raise CarryError(f"expected pip to download triton=={version} for CPython {python} on x86_64 Linux, "
                         f"found pip failing (exit {proc.returncode}): {pip_errors(proc.stderr)}")
    if not found:
        got = ", ".join(p.name for p in sorted(dest.glob("triton-*.whl")) if version in p.name) or "no triton wheel"
        raise CarryError(f"expected a triton {version} wheel CPython {python} installs on x86_64 Linux (best tag "
                         f"{supported_tags(python)[0]}), found {got} in {dest}")
    return found


# ---- ptxas: the release's own get_ptxas(arch) -----------------------------------------------------------------
def nvidia_tools(read: Reader) -> dict[str, str]:
    """knobs.nvidia's tools as the release declares them: attribute -> binary (`ptxas_blackwell: env_nvidia_tool =
    env_nvidia_tool("ptxas-blackwell")` in triton/knobs.py)."""
    tools = {}
    for node in ast.walk(ast.parse(read(KNOBS))):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "env_nvidia_tool" and node.value.args
                and isinstance(node.value.args[0], ast.Constant)):
            tools[node.target.id] = node.value.args[0].value
    if not tools:
        raise CarryError(f"expected {KNOBS} to declare its NVIDIA tools (env_nvidia_tool(\"ptxas\")), found none")
    return tools


def release_get_ptxas(read: Reader) -> Callable[[int], str]:
    """The release's get_ptxas(arch), answering with the binary's name: the function's own code from compiler.py,
    run against its knobs' tool names (it compares the arch and returns a knob; nothing else is in reach)."""
    fn = next((n for n in ast.parse(read(COMPILER)).body if isinstance(n, ast.FunctionDef) and n.name == "get_ptxas"),
              None)
    if fn is None or len(fn.args.args) != 1:
        raise CarryError(f"expected {COMPILER} to define get_ptxas(arch), the rule that picks ptxas, found "
                         f"{'none' if fn is None else ast.unparse(fn.args) or 'no argument'}")
    fn.returns, fn.args.args[0].annotation = None, None
    knobs = type("knobs", (), {"nvidia": type("nvidia", (), nvidia_tools(read))})
    scope = {"__builtins__": {}, "knobs": knobs}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), COMPILER, "exec"), scope)

    def get_ptxas(arch: int) -> str:
        try:
            tool = scope["get_ptxas"](arch)
        except Exception as exc:
            raise CarryError(f"expected {COMPILER}'s get_ptxas({arch}) to name a ptxas, found "
                             f"{type(exc).__name__}: {exc}") from None
        if not isinstance(tool, str):
            raise CarryError(f"expected {COMPILER}'s get_ptxas({arch}) to return a knob of knobs.nvidia, found {tool!r}")
        return tool
    return get_ptxas


def ptxas_plan(read: Reader, names: list[str], archs) -> tuple[dict[int, str], dict[str, str]]:
    """({arch: the ptxas path it assembles with}, {ptxas path left out: why}) by the release's get_ptxas."""
    get_ptxas = release_get_ptxas(read)
    used = {arch: f"{NVIDIA}/bin/{get_ptxas(arch)}" for arch in archs}
    missing = sorted({p for p in used.values() if p not in names})
    if missing:
        raise CarryError(f"expected the wheel to ship {', '.join(missing)} (get_ptxas picks it for "
                         f"{', '.join(f'sm_{a}' for a, p in used.items() if p in missing)}), found no such file")
    ptxases = {f"{NVIDIA}/bin/{tool}" for tool in nvidia_tools(read).values() if tool.startswith("ptxas")}
    left = {}
    for path in sorted((ptxases & set(names)) - set(used.values())):
        served = [a for a in KNOWN_ARCHS if f"{NVIDIA}/bin/{get_ptxas(a)}" == path]
        targets = ", ".join(f"sm_{a}" for a in archs)
        left[path] = (f"get_ptxas (the release's compiler.py) picks it for {', '.join(f'sm_{a}' for a in served) or 'no arch'}"
                      f" only; the target archs {targets} assemble with {', '.join(sorted({Path(p).name for p in used.values()}))}")
    return used, left


# ---- the launcher: what driver.py compiles and includes ------------------------------------------------------
def launcher_paths(read: Reader) -> list[str]:
    """Wheel paths the NVIDIA launcher loads: driver.py's `os.path.join(dirname, X)` that reach its
    compile_module_from_* call as src_path= or include_dirs= (directly or through a module-level name)."""
    tree = ast.parse(read(DRIVER))
    assigned: dict[str, list[str]] = {}

    def joined(node) -> list[str]:
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "os.path.join" and len(node.args) == 2 \
                and ast.unparse(node.args[0]) == "dirname" and isinstance(node.args[1], ast.Constant):
            return [f"{NVIDIA}/{node.args[1].value}"]
        if isinstance(node, (ast.List, ast.Tuple)):
            return [p for e in node.elts for p in joined(e)]
        if isinstance(node, ast.Name):
            return assigned.get(node.id, [])
        return []

    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = joined(node.value)
    paths = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1].startswith("compile_module_from"):
            paths += [p for kw in node.keywords if kw.arg in ("src_path", "include_dirs") for p in joined(kw.value)]
    if not paths:
        raise CarryError(f"expected {DRIVER} to compile its launcher from files of the wheel (compile_module_from_*"
                         "(src_path=os.path.join(dirname, ...), include_dirs=...)), found none")
    return sorted(set(paths))


def under(name: str, paths: list[str]) -> str | None:
    return next((p for p in paths if name == p or name.startswith(p + "/")), None)


# ---- the payload ---------------------------------------------------------------------------------------------
def rules_for(release: str) -> list[Rule]:
    """The DROPPED rules that apply to `release` (a plain (pattern, why) pair applies to every release)."""
    return [rule for rule in map(lambda r: Rule(*r), DROPPED) if release_key(release) >= release_key(rule.since)]


def dropped_by(name: str, release: str = "99.0") -> str | None:
    return next((rule.why for rule in rules_for(release) if fnmatch.fnmatchcase(name, rule.pattern)), None)


def strip_bytes(data: bytes, name: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(name).name
        path.write_bytes(data)
        proc = subprocess.run(["strip", "--strip-unneeded", str(path)], capture_output=True, text=True)
        if proc.returncode:
            raise CarryError(f"expected `strip --strip-unneeded {name}` to succeed, found: {proc.stderr.strip()[:200]}")
        return path.read_bytes()


def wheel_release(wheel: Path) -> str:
    try:
        return str(parse_wheel_filename(wheel.name)[1])
    except InvalidWheelFilename as exc:
        raise CarryError(f"expected a wheel file name (triton-VERSION-TAGS.whl), found {wheel.name}: {exc}") from None


def wheel_entries(wheel: Path, record: dict, archs=DEFAULT_ARCHS):
    """(name, bytes, mode) of every wheel member kept, stripped where STRIPPED says; what was dropped or
    stripped, and which ptxas each arch uses, go into record."""
    release = wheel_release(wheel)
    rules = rules_for(release)
    used = {r.pattern: 0 for r in rules}
    with zipfile.ZipFile(wheel) as zf:
        names = [i.filename for i in zf.infolist() if not i.filename.endswith("/")]

        def read(name: str) -> str:
            if name not in names:
                raise CarryError(f"expected {wheel.name} to ship {name}, found no such file")
            return zf.read(name).decode()

        ptxas_for, ptxas_left = ptxas_plan(read, names, archs)
        needed = {p: "get_ptxas picks it for " + ", ".join(f"sm_{a}" for a, q in ptxas_for.items() if q == p)
                  for p in set(ptxas_for.values())}
        launcher = launcher_paths(read)
        # filled in place: the manifest's meta holds these very objects (pack writes it after the last entry)
        record.setdefault("ptxas", {}).update({f"sm_{a}": p for a, p in ptxas_for.items()})
        record.setdefault("launcher", []).extend(launcher)
        for info in zf.infolist():
            name = info.filename
            if name.endswith("/"):
                continue
            rule = next((r for r in rules if fnmatch.fnmatchcase(name, r.pattern)), None)
            if rule and (name in needed or under(name, launcher)):
                why = needed.get(name) or f"{DRIVER} builds its launcher from {under(name, launcher)}"
                raise CarryError(f"expected DROPPED to leave what the release loads, found {rule.pattern!r} "
                                 f"dropping {name} ({why})")
            why = rule.why if rule else ptxas_left.get(name)
            if why:
                if rule:
                    used[rule.pattern] += 1
                record["dropped"].append({"path": name, "size": info.file_size, "why": why})
                continue
            data = zf.read(name)
            if name in STRIPPED:
                before = len(data)
                data = strip_bytes(data, name)
                record["stripped"].append({"path": name, "before": before, "after": len(data)})
            yield name, data, 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
    unused = [p for p, n in used.items() if not n]
    missing = [p for p in STRIPPED if p not in {s["path"] for s in record["stripped"]}]
    if unused or missing:
        raise CarryError(f"expected every DROPPED / STRIPPED rule to match a file of {wheel.name}, "
                         f"found none for {', '.join(unused + missing)}")


def build(version: str, python: str, out: Path, downloads: Path, archs=DEFAULT_ARCHS, log=print) -> Path:
    """OUT/payload.tar.xz + OUT/manifest.json from the release's wheel; OUT is written whole or not at all."""
    wheel = download_wheel(version, python, downloads)
    record = {"dropped": [], "stripped": [], "ptxas": {}, "launcher": []}
    meta = {"release": version, "python": python, "archs": list(archs), "wheel": wheel.name,
            "wheel_sha256": file_sha256(wheel), **record}
    manifest = pack(wheel_entries(wheel, record, archs), out, meta)
    kept = sum(m["size"] for m in manifest["members"])
    log(f"{out / PAYLOAD}: triton {version} ({wheel.name}), {len(manifest['members'])} files, "
        f"{kept / MIB:.1f} MiB unpacked, {manifest['payload_size'] / MIB:.1f} MiB packed; "
        f"{len(record['dropped'])} files dropped ({sum(d['size'] for d in record['dropped']) / MIB:.0f} MiB); "
        f"ptxas: " + ", ".join(f"{a} {Path(p).name}" for a, p in record["ptxas"].items()))
    return out


def parse_archs(text: str) -> tuple[int, ...]:
    try:
        archs = tuple(int(a.strip().removeprefix("sm_")) for a in text.split(",") if a.strip())
    except ValueError:
        archs = ()
    if not archs:
        raise CarryError(f"expected --archs as compute capabilities such as 90,120, found {text!r}")
    return archs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="pack a Triton release to copy to the GPU machine")
    b.add_argument("--version", required=True, help="the Triton release, e.g. 3.9.0")
    b.add_argument("--python", default="3.12", help="the GPU machine's CPython (default: %(default)s)")
    b.add_argument("--archs", default=",".join(map(str, DEFAULT_ARCHS)),
                   help="the GPU archs its kernels compile for; each keeps the ptxas get_ptxas picks (default: %(default)s)")
    b.add_argument("--out", type=Path, help="default: build/carry-triton-VERSION")
    b.add_argument("--downloads", type=Path, default=REPO / "build" / "downloads" / "triton")
    i = sub.add_parser("install", help="check and unpack a built payload (on the GPU machine)")
    i.add_argument("src", type=Path)
    i.add_argument("--into", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        if args.command == "build":
            build(args.version, args.python, args.out or REPO / "build" / f"carry-triton-{args.version}", args.downloads,
                  parse_archs(args.archs))
        else:
            m = install(args.src, args.into)
            print(f"{args.into}: triton {m.get('release')} from {m.get('wheel')} ({len(m['members'])} files checked)")
    except CarryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
