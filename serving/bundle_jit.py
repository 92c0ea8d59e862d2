"""`prebuild-jit`: compile SGLang's jit_kernel modules here, so the GPU machine's first server start does not.

An sglang that has sglang/jit_kernel (the lines serving/jit_modules.json lists) builds those modules with nvcc
through tvm-ffi on first use; the Marlin MoE module alone takes minutes and looks like a hang inside CUDA-graph
capture. sglang.jit_kernel.utils.load_jit keys the cache by content, not location: the directory is

    $TVM_FFI_CACHE_DIR/sgl_kernel_jit_<args>_<sha256 of the sources, paths relative to jit_kernel/>
                      __arch_<major.minor>__tvmffi_<tvm-ffi version>/<module>.so

and a present .so is loaded directly (no ninja, no mtime check). So a cache compiled here for arch 9.0 with the
same tvm-ffi (0.1.15.post2, serving/bundle_requirements.txt) and the same jit_kernel sources is used as-is on an
H200, whatever the path of the tree there. The patch set does not touch sglang/jit_kernel (checked below), so one
cache serves the pinned and the patched tree.

Compiling needs nvcc, a Python with torch and apache-tvm-ffi (the test venv has both; no torch headers are
used: the jit sources include only tvm-ffi and CUDA headers), and the modules' import-time dependencies, which
are installed into build/jit-prebuild/deps. torchvision is replaced in the compiling process by a placeholder
(sglang.srt.utils.common imports torchvision.io at module load; the CPU torch here has no matching torchvision;
no jit module uses it).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from . import REPO
from .bundle_closure import REQUIREMENTS, read_requirements

WORK = REPO / "build" / "jit-prebuild"

# Per release line (data: serving/jit_modules.json), the modules the DeepSeek-V4 server's sm_120 branches build on
# first use whose template arguments do not depend on the model's shapes: (python module, builder function,
# argument expressions). Marlin MXFP4 MoE (its GEMM, the weight repack at load, the activation between the GEMMs)
# is the one that costs minutes. Modules with shape arguments compile on first use there, ~10-20 s each.
JIT_MODULES = json.loads((Path(__file__).parent / "jit_modules.json").read_text())   # {line: [[module, builder, args]]}
# Lines not listed have no such modules to prebuild for this project's bundle (0.5.23 has no sglang/jit_kernel).
# sglang/jit_kernel/dsv4/__init__.py imports dsv4/gemm.py, which imports sglang.srt.layers.deep_gemm_wrapper and
# with it the model stack (down to transformers' torchvision image utils) that this CPU process cannot load. The
# compiling process registers that package without running its __init__; the kernel modules themselves load as is.
PACKAGES_WITHOUT_INIT = ["sglang.jit_kernel.dsv4"]

# What the GPU box's image has (KINDS.md) but the test venv lacks, and importing the jit modules needs.
PREBUILD_EXTRA = ["psutil==7.2.2", "pillow==13.0.0", "anyio==4.16.0", "aiohttp==3.14.5", "aiohappyeyeballs==2.7.1",
                  "aiosignal==1.4.0", "attrs==26.1.0", "frozenlist==1.8.0", "multidict==7.2.1", "propcache==0.5.4",
                  "yarl==1.25.1"]

_DRIVER = r"""
import importlib, json, sys, time, types
tv, tvio = types.ModuleType("torchvision"), types.ModuleType("torchvision.io")
def decode_jpeg(*a, **k):
    raise RuntimeError("torchvision placeholder of the JIT prebuild process")
tvio.decode_jpeg, tv.io = decode_jpeg, tvio
sys.modules.update({"torchvision": tv, "torchvision.io": tvio})
import importlib.util
import torch
from sglang.jit_kernel.utils import override_jit_cuda_arch
for pkg in json.loads(sys.argv[3]):
    spec = importlib.util.find_spec(pkg)
    shell = types.ModuleType(pkg)
    shell.__spec__, shell.__path__, shell.__package__ = spec, list(spec.submodule_search_locations), pkg
    sys.modules[pkg] = shell
major, minor = map(int, sys.argv[1].split("."))
for module, func, args in json.loads(sys.argv[2]):
    label = f"{module.rsplit('.', 1)[-1]}.{func}({', '.join(args)})"
    t0 = time.time()
    try:
        with override_jit_cuda_arch(major, minor):
            getattr(importlib.import_module(module), func)(*[eval(a, {"torch": torch}) for a in args])
        result = "ok"
    except Exception as exc:
        result = f"FAILED: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else ''}"
    print("RESULT " + json.dumps({"module": label, "result": result, "seconds": round(time.time() - t0, 1)}), flush=True)
"""


def say(msg: str) -> None:
    print(f"prebuild-jit: {msg}", flush=True)


def add_arguments(parser) -> None:
    parser.add_argument("--arch", default="9.0", help="CUDA arch as sglang names it (major.minor): 9.0 for H100/H200, 12.0 for sm_120")
    parser.add_argument("--out", type=Path, help="the tvm-ffi cache to fill (default: build/jit-cache-ARCH)")
    parser.add_argument("--python", type=Path, default=REPO / ".venv" / "bin" / "python",
                        help="a Python with torch and apache-tvm-ffi (default: the test venv)")
    parser.add_argument("--log", type=Path, help="also write the results table here")
    parser.add_argument("--line", help="the release line whose sglang to compile (pin.lock; default: the newest)")


def _cuda_home() -> str:
    for cand in [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]:
        if cand and (Path(cand) / "bin" / "nvcc").exists():
            return cand
    nvcc = shutil.which("nvcc")
    if not nvcc:
        raise SystemExit("prebuild-jit: expected nvcc (CUDA_HOME or PATH), found none")
    return str(Path(nvcc).resolve().parent.parent)


def _patch_touches_jit_kernel(engine) -> list[str]:
    return [p for p in engine.chain("sglang").files if p.startswith("sglang/jit_kernel/")]


def prepare(python: Path, engine) -> tuple[Path, Path]:
    """(sglang tree, deps dir) for the compiling process."""
    tree = WORK / f"tree-{engine.lock.line}"     # one per line: two lines' wheels never share a tree
    if not (tree / "sglang" / "jit_kernel").is_dir():
        say(f"unpacking the pinned sglang wheel into {tree}")
        engine.pristine("sglang").unpack(tree, root=engine.lock.upstream("sglang").root)
    tag = subprocess.run([str(python), "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True).stdout.strip()
    deps = WORK / f"deps-{tag}"
    stamp = deps / ".complete"
    reqs = [f"{n}=={v}" for n, v, _ in read_requirements(REQUIREMENTS) if n != "sglang-kernel"] + PREBUILD_EXTRA
    if not stamp.exists() or stamp.read_text() != "\n".join(reqs) + "\n":
        say(f"installing the jit modules' import dependencies into {deps}")
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--upgrade", "--target", str(deps), *reqs], check=True)
        stamp.write_text("\n".join(reqs) + "\n")
    return tree, deps


def run(args) -> int:
    from patchkit.engine import Engine
    engine = Engine.from_repo(REPO, line=args.line)
    modules = JIT_MODULES.get(engine.lock.line)
    if modules is None:
        say(f"error: expected a line with jit_kernel modules to prebuild ({', '.join(JIT_MODULES)}), found line "
            f"{engine.lock.line}: run it with --line (make prebuild-jit LINE=...)")
        return 1
    touched = _patch_touches_jit_kernel(engine)
    if touched:
        say(f"error: expected the patch set to leave sglang/jit_kernel alone, found it changes {touched[0]}; "
            "a cache built from the pinned tree would not match the patched one")
        return 1
    python = Path(args.python).absolute()   # not resolve(): a venv's python is a symlink
    if not python.exists():
        say(f"error: expected a Python with torch and apache-tvm-ffi at {python} (make .venv/.installed), found none")
        return 1
    tree, deps = prepare(python, engine)
    out = Path(args.out or REPO / "build" / f"jit-cache-{args.arch}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    cuda_home = _cuda_home()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(deps), str(REPO / "serving" / "bundle_stubs")]),
           "TVM_FFI_CACHE_DIR": str(out), "CUDA_HOME": cuda_home, "PYTHONUNBUFFERED": "1"}
    say(f"arch {args.arch}, cache {out}, CUDA_HOME {cuda_home}, {len(modules)} module(s)")
    t0 = time.time()
    argv = [str(python), "-c", _DRIVER, args.arch, json.dumps(modules), json.dumps(PACKAGES_WITHOUT_INIT)]
    proc = subprocess.Popen(argv, env=env, cwd=str(WORK), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = []
    for line in proc.stdout:                    # one line per module as it finishes: a cold Marlin takes minutes
        if line.startswith("RESULT "):
            results.append(json.loads(line[len("RESULT "):]))
            say(f"{results[-1]['module']}: {results[-1]['result']} ({results[-1]['seconds']} s)")
    stderr = proc.stderr.read()
    proc.wait()
    if proc.returncode or len(results) != len(modules):
        say(f"error: the compiling process exited {proc.returncode}: {stderr.strip().splitlines()[-3:]}")
    rows = [f"| {r['module']} | {r['result']} | {r['seconds']} |" for r in results]
    table = "\n".join([f"arch {args.arch}, nvcc from {cuda_home}, {time.time() - t0:.0f} s in all",
                       "| module | result | seconds |", "|---|---|---|", *rows])
    print(table)
    if args.log:
        Path(args.log).write_text(table + "\n")
    ok = proc.returncode == 0 and all(r["result"] == "ok" for r in results) and len(results) == len(modules)
    return 0 if ok else 1
