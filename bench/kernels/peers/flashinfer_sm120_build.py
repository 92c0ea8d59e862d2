"""Compile the FlashInfer sparse_mla_sm120 decode, merge and prefill kernels for sm_90a.

    python3 -m bench.kernels.peers.flashinfer_sm120_build [--src build/peer-flashinfer[-VERSION]] [--arch sm_90a] [--jobs N]
                                                   [--only NAME.cu] [--ptxas-verbose]

SRC is what flashinfer_sm120_sources laid out (patched). The translation units are the ones of
FlashInfer's own `gen_sparse_mla_sm120_module` that hold the sparse-MLA attention (decode, merge,
prefill, their resolver and FFI binding), compiled with the flags its JIT uses (c++17, -O3,
-use_fast_math, its bundled CCCL first) but for ARCH, and linked into SRC/lib/sparse_mla_sm120_ARCH.so
against the tvm-ffi library of SRC/site. One nvcc per unit, JOBS at a time. `--only` compiles one
unit to an object file and links nothing (the CPU-side proof that the patched sources compile); a
later full build reuses such objects, then deletes them once the library is linked.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.kernels.peers.flashinfer_sm120_sources import STAMP, default_out, load_spec

NVCC_FLAGS = [  # flashinfer/jit/core.py gen_jit_spec + cpp_ext.build_cuda_cflags, non-debug
    "-std=c++17", "-use_fast_math", "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16",
    "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2", "-DNDEBUG", "-O3",
    "-DPy_LIMITED_API=0x03090000", "-D_GLIBCXX_USE_CXX11_ABI=1", "--compiler-options=-fPIC",
    "--expt-relaxed-constexpr", "-static-global-template-stub=false",
]


def library_path(src: Path, arch: str) -> Path:
    return src / "lib" / f"sparse_mla_sm120_{arch}.so"


def include_flags(src: Path) -> list[str]:
    data = src / "flashinfer" / "data"
    cccl = [data / "cccl" / "cub", data / "cccl" / "libcudacxx" / "include", data / "cccl" / "thrust"]
    return ([f"-I{p}" for p in cccl] + [f"-I{data / 'include'}", f"-I{data / 'csrc'}"]
            + ["-isystem", str(src / "site" / "tvm_ffi" / "include")])


def nvcc() -> str:
    found = shutil.which("nvcc") or (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc")
    if not Path(found).exists():
        raise SystemExit("error: expected nvcc on PATH or in $CUDA_HOME/bin, found neither")
    return str(found)


def cuda_home() -> Path:
    """The toolkit whose libcudart the library links: $CUDA_HOME, /usr/local/cuda, or nvcc's parent."""
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda", str(Path(nvcc()).resolve().parents[1])):
        if home and (Path(home) / "lib64" / "libcudart.so").exists():
            return Path(home)
    raise SystemExit("error: expected lib64/libcudart.so under $CUDA_HOME, /usr/local/cuda or nvcc's folder, found none")


def compile_unit(src: Path, unit: str, arch: str, objdir: Path, extra: list[str]) -> tuple[Path, float]:
    cu = src / "flashinfer" / "data" / "csrc" / unit
    obj = objdir / (unit.replace("/", "__") + f".{arch}.o")
    if not extra and obj.exists() and obj.stat().st_mtime > (src / STAMP).stat().st_mtime:
        return obj, 0.0  # compiled from these very sources (--only runs, one unit at a time)
    cmd = [nvcc(), *NVCC_FLAGS, f"-gencode=arch=compute_{arch[3:]},code={arch}", *include_flags(src),
           *extra, "-c", str(cu), "-o", str(obj)]
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"nvcc failed on {unit} ({arch}):\n{proc.stderr[-6000:]}")
    if proc.stderr.strip():
        print(proc.stderr[-4000:], file=sys.stderr)
    return obj, time.time() - start


def link(src: Path, objs: list[Path], arch: str) -> Path:
    out = library_path(src, arch)
    lib = src / "site" / "tvm_ffi" / "lib"
    # No -lcuda: these units call no driver API (FlashInfer's JIT links it for other modules).
    cmd = [nvcc(), "-shared", "--cudart=shared", "-o", str(out), *map(str, objs), f"-L{lib}", "-ltvm_ffi",
           "-Xlinker=-rpath,$ORIGIN/../site/tvm_ffi/lib",  # relative: the folder travels whole to the GPU box
           f"-L{cuda_home() / 'lib64'}", "-lcudart", "-Xlinker=--no-undefined"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"link failed:\n{proc.stderr[-6000:]}")
    return out


# What load_peer reads at run time, and all that travels to the GPU box (not the 32 MiB of headers and CCCL).
RUNTIME_PARTS = ["lib", "site", "sglang", STAMP, "flashinfer/mla", "flashinfer/autotuner"]


def pack_runtime(src: Path, out: Path) -> Path:
    """OUT: SRC's RUNTIME_PARTS as one checked payload (bench/airgapped/carry.py; `python3 -m bench.airgapped.carry install` there)."""
    from bench.airgapped.carry import MIB, dir_entries, pack

    manifest = pack(dir_entries(src, RUNTIME_PARTS), out, {"source": src.name, "kept": RUNTIME_PARTS})
    print(f"packed {out} ({manifest['payload_size'] / MIB:.1f} MiB) from {src}")
    return out


def build(src: Path, arch: str = "sm_90a", jobs: int = 0, only: str | None = None, extra=()) -> Path:
    if not (src / STAMP).exists():
        raise SystemExit(f"error: expected sources laid out by bench.kernels.peers.flashinfer_sm120_sources in {src}, "
                         f"found no {STAMP}")
    units = load_spec()["sources"]
    if only:
        units = [u for u in units if u == only or u.endswith("/" + only)]
        if not units:
            raise SystemExit(f"error: --only {only}: expected one of {load_spec()['sources']}")
    objdir = src / "obj"
    objdir.mkdir(exist_ok=True)
    (src / "lib").mkdir(exist_ok=True)
    jobs = jobs or min(len(units), os.cpu_count() or 1)
    print(f"compiling {len(units)} units for {arch}, {jobs} at a time", flush=True)
    with ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(lambda u: (u, *compile_unit(src, u, arch, objdir, list(extra))), units))
    for unit, _, secs in results:
        print(f"  {unit}: {secs:.0f} s", flush=True)
    if only:
        return results[0][1]
    out = link(src, [obj for _, obj, _ in results], arch)
    for _, obj, _ in results:  # the library is what travels; the objects would double it
        obj.unlink()
    print(f"built {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashinfer", help="the release whose sources --src holds (default: the spec's own, 0.7.2)")
    ap.add_argument("--src", type=Path, help="default: build/peer-flashinfer[-VERSION]")
    ap.add_argument("--arch", default="sm_90a", help="nvcc code target (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=0, help="units compiled at once (default: one per core)")
    ap.add_argument("--only", help="compile this one unit (e.g. decode_dispatch.cu), link nothing")
    ap.add_argument("--ptxas-verbose", action="store_true", help="registers, shared memory and spills per kernel")
    ap.add_argument("--carry", type=Path, metavar="OUT",
                    help="then pack what the peer needs at run time into OUT, to carry to the GPU box")
    args = ap.parse_args(argv)
    src = args.src or default_out(args.flashinfer)
    try:
        if not (args.only is None and args.carry and library_path(src, args.arch).exists()):
            build(src, args.arch, args.jobs, args.only, ["-Xptxas=-v"] if args.ptxas_verbose else [])
        if args.carry:
            pack_runtime(src, args.carry)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
