"""A Triton release small enough to copy to an air-gapped GPU machine, and its install there.

    python3 -m bench.airgapped.carry_triton build --version 3.8.0 [--python 3.12] [--out build/carry-triton-3.8.0]
    python3 -m bench.airgapped.carry_triton install build/carry-triton-3.8.0 --into /tmp/triton-3.8.0   # on the GPU machine

The GPU machine has one Triton (its torch's); a newer line's Triton (3.8 for SGLang 0.5.23) is 248 MB as a wheel
and ~900 MB unpacked, over the 64 MiB budget of what is copied there. What a kernel run needs is much smaller: `build` takes
the release's own manylinux wheel (through pip's configuration, like every download here), leaves out what
no kernel launch loads (DROPPED: profiler, CUPTI, test plugins, the Blackwell-only ptxas), strips the
compiler library's symbols (STRIPPED: `strip --strip-unneeded`, code untouched) and packs the rest with
bench/airgapped/carry.py: one deterministic `payload.tar.xz` and `manifest.json` (the wheel's sha256, every member's
size and sha256, what was dropped or stripped and why). `install` is bench/airgapped/carry.py's: everything checked
before anything is written, a wrong byte refused with one line. Put INTO first on PYTHONPATH and `import triton` is the
carried release (with its own ptxas for sm_90: the H200's compiles use the release's code generation).
Torch stays the box's own: the decode kernels are launched by Triton, not by inductor.
"""
from __future__ import annotations

import argparse
import fnmatch
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bench.airgapped.carry import MIB, PAYLOAD, CarryError, file_sha256, install, pack
from serving import REPO


# What a kernel launch never loads, with why. Every rule must match something in the wheel (a rule that
# matches nothing means the release moved a file, and the payload would silently carry it).
DROPPED = [
    ("triton/backends/nvidia/lib/cupti/*", "CUPTI: the profiler's (proton) tracing library"),
    ("triton/backends/nvidia/lib/cupti-blackwell/*", "CUPTI for Blackwell: the profiler's"),
    ("triton/_C/libproton.so", "proton, Triton's profiler: only `triton.profiler` loads it"),
    ("triton/plugins/*", "MLIR dialect plugin examples (tests)"),
    ("triton/instrumentation/*", "GPU instrumentation test library"),
    ("triton/FileCheck", "LLVM FileCheck, for Triton's own lit tests"),
    ("triton/backends/nvidia/bin/ptxas-blackwell", "ptxas for sm_100+ only (get_ptxas: arch >= 100); sm_90 uses bin/ptxas"),
    ("triton/backends/nvidia/bin/cuobjdump", "disassembler: inspection only"),
    ("triton/backends/nvidia/bin/nvdisasm", "disassembler: inspection only"),
]
STRIPPED = ["triton/_C/libtriton.so"]  # symbols only (--strip-unneeded): 506 -> ~192 MB on 3.8.0


def download_wheel(version: str, python: str, dest: Path) -> Path:
    """The release's manylinux x86_64 wheel for CPython `python`, through pip's own configuration."""
    dest.mkdir(parents=True, exist_ok=True)
    tag = python.replace(".", "")
    have = sorted(dest.glob(f"triton-{version}-cp{tag}-cp{tag}-*.whl"))
    if not have:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", python,
               "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_27_x86_64",
               "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "-d", str(dest),
               f"triton=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        have = sorted(dest.glob(f"triton-{version}-cp{tag}-cp{tag}-*.whl"))
        if proc.returncode or not have:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise CarryError(f"expected pip to download triton=={version} for cp{tag} manylinux x86_64, found: {last}")
    return have[-1]


def dropped_by(name: str) -> str | None:
    for pattern, why in DROPPED:
        if fnmatch.fnmatchcase(name, pattern):
            return why
    return None


def strip_bytes(data: bytes, name: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(name).name
        path.write_bytes(data)
        proc = subprocess.run(["strip", "--strip-unneeded", str(path)], capture_output=True, text=True)
        if proc.returncode:
            raise CarryError(f"expected `strip --strip-unneeded {name}` to succeed, found: {proc.stderr.strip()[:200]}")
        return path.read_bytes()


def wheel_entries(wheel: Path, record: dict):
    """(name, bytes, mode) of every wheel member kept, stripped where STRIPPED says; what was dropped or
    stripped goes into record."""
    used = {pattern: 0 for pattern, _ in DROPPED}
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if name.endswith("/"):
                continue
            why = dropped_by(name)
            if why:
                used[next(p for p, _ in DROPPED if fnmatch.fnmatchcase(name, p))] += 1
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


def build(version: str, python: str, out: Path, downloads: Path, log=print) -> Path:
    """OUT/payload.tar.xz + OUT/manifest.json from the release's wheel; OUT is written whole or not at all."""
    wheel = download_wheel(version, python, downloads)
    record = {"dropped": [], "stripped": []}
    meta = {"release": version, "python": python, "wheel": wheel.name, "wheel_sha256": file_sha256(wheel), **record}
    manifest = pack(wheel_entries(wheel, record), out, meta)
    kept = sum(m["size"] for m in manifest["members"])
    log(f"{out / PAYLOAD}: triton {version} (cp{python.replace('.', '')}), {len(manifest['members'])} files, "
        f"{kept / MIB:.1f} MiB unpacked, {manifest['payload_size'] / MIB:.1f} MiB packed; "
        f"{len(record['dropped'])} files dropped ({sum(d['size'] for d in record['dropped']) / MIB:.0f} MiB)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="pack a Triton release to copy to the GPU machine")
    b.add_argument("--version", required=True, help="the Triton release, e.g. 3.8.0")
    b.add_argument("--python", default="3.12", help="the GPU box's CPython (default: %(default)s)")
    b.add_argument("--out", type=Path, help="default: build/carry-triton-VERSION")
    b.add_argument("--downloads", type=Path, default=REPO / "build" / "downloads" / "triton")
    i = sub.add_parser("install", help="check and unpack a built payload (on the GPU box)")
    i.add_argument("src", type=Path)
    i.add_argument("--into", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        if args.command == "build":
            build(args.version, args.python, args.out or REPO / "build" / f"carry-triton-{args.version}", args.downloads)
        else:
            m = install(args.src, args.into)
            print(f"{args.into}: triton {m.get('release')} from {m.get('wheel')} ({len(m['members'])} files checked)")
    except CarryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
