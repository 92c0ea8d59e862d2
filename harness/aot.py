"""Ahead-of-time kernel compiles for a GPU architecture, on a machine without one.

Used by tests/kernels/test_mma_aot.py, tests/kernels/test_indexer_mhc_aot.py, tests/line_0_5_14/test_hc_sinkhorn.py and
bench/experiments/count_instructions.py. Compiles must not run under TRITON_INTERPRET (the numerics tests
set it), so the tests compile in a subprocess: compile_in_subprocess. The gate runs under each release line's
own Triton and under the releases it follows ahead of any line (aot_runs).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The P1 decode kernel's runtime specialisation in production: pointers 16-byte aligned; strides, widths,
# page sizes and page strides multiples of 16 (149760 / 37440 / 1728-byte pages, 64-aligned widths);
# both caches with lengths, a sink, power-of-two pages (256 / 64 / 2).
DIV16 = (
    "stride_qb", "stride_qh", "main_idx_stride", "extra_idx_stride", "main_topk",
    "extra_topk", "main_page_bytes", "extra_page_bytes", "H",
)
MAIN_SIGNATURE = dict(
    q_ptr="*bf16", stride_qb="i32", stride_qh="i32",
    main_u8="*u8", main_idx="*i32", main_idx_stride="i32", main_len="*i32", main_topk="i32",
    main_page="i32", main_page_bytes="i32", main_shift="i32",
    extra_u8="*u8", extra_idx="*i32", extra_idx_stride="i32", extra_len="*i32", extra_topk="i32",
    extra_page="i32", extra_page_bytes="i32", extra_shift="i32",
    sink_ptr="*fp32", out_ptr="*bf16", lse_ptr="*fp32", part_out_ptr="*fp32", part_lse_ptr="*fp32",
    H="i32", num_splits="i32", qk_scale_log2="fp32",
)


def decode_constexprs(block_h: int, block_t: int, split: bool) -> dict:
    """The decode kernel's constexprs in the production specialisation (GPU: bf16 MMA operands)."""
    import triton.language as tl

    return dict(HAS_MAIN_LEN=True, HAS_EXTRA=True, HAS_EXTRA_LEN=True, HAS_SINK=True, SPLIT=split,
                POW2_PAGES=True, BLOCK_H=block_h, BLOCK_T=block_t, MMA_DTYPE=tl.bfloat16)


def release_ptxas(arch: int) -> Path:
    """The ptxas this Triton release assembles `arch` with, by the release's own rule: its NVIDIA backend's
    get_ptxas(arch) (3.6 and 3.8: ptxas-blackwell from sm_100 on; 3.9: from sm_90 on, its older ptxas cannot
    read the PTX 3.9 writes for sm_90), honouring TRITON_PTXAS_PATH / TRITON_PTXAS_BLACKWELL_PATH as it does."""
    import triton
    from triton.backends.nvidia import compiler

    get_ptxas = getattr(compiler, "get_ptxas", None)
    if get_ptxas is None:
        raise RuntimeError(f"triton {triton.__version__}: expected triton.backends.nvidia.compiler.get_ptxas(arch) "
                           "(triton 3.6 and later), found none")
    return Path(get_ptxas(arch).path)


def ptxas_report(ptx: str, arch: int, ptxas: Path | None = None) -> dict:
    """Registers and spill bytes from `ptxas -v` on the PTX: the ptxas this Triton compiles `arch` with
    (release_ptxas), or `ptxas` (another release's, to tell its code generation from its assembler)."""
    ptxas = ptxas or release_ptxas(arch)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run(
            [str(ptxas), f"-arch=sm_{arch}a", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True, text=True,
        )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return parse_ptxas_log(proc.stderr)


def parse_ptxas_log(log: str) -> dict:
    """Registers and spill bytes from a `ptxas -v` log."""
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {
        "regs": int(regs.group(1)),
        "spill_stores": int(spills.group(1)),
        "spill_loads": int(spills.group(2)),
    }


def compile_kernel(fn, signature: dict, constexprs: dict, div16, num_warps: int, num_stages: int, arch: int):
    """triton.compile for `arch` with every pointer and the `div16` arguments marked 16-divisible
    (a Gluon kernel through GluonASTSource: same signature, explicit layouts), with the FP fusion choice its
    module states. The kernel's `ptxas_log` is the `ptxas -v` log of the very cubin Triton built (build_report)."""
    import contextlib
    import io

    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

    names = fn.arg_names
    pointers = [k for k, v in signature.items() if v.startswith("*")]
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k in pointers + [d for d in div16 if d in signature]}
    source_cls = GluonASTSource if isinstance(fn, GluonJITFunction) else triton.compiler.ASTSource
    src = source_cls(
        fn=fn, signature={**signature, **{k: "constexpr" for k in constexprs}}, constexprs=constexprs, attrs=attrs,
    )
    options = dict(num_warps=num_warps, num_stages=num_stages)
    # A kernel module that states its FP fusion choice (ENABLE_FP_FUSION, passed at every launch) is compiled
    # with it, so the gate builds what runs; others get Triton's default.
    fusion = getattr(fn, "fn", fn).__globals__.get("ENABLE_FP_FUSION")
    if fusion is not None:
        options["enable_fp_fusion"] = fusion
    # Triton prints its own ptxas log (its ptxas, its flags: 3.8 on add --regAllocOptLevel=2) when asked, and
    # only when it assembles: a cached kernel would give none, so compile afresh.
    saved = knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile
    knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile = True, True
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    finally:
        knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile = saved
    kernel.ptxas_log = log.getvalue()
    return kernel


def build_report(kernel) -> dict:
    """Registers and spill bytes of the cubin Triton built (compile_kernel's ptxas log): the release's own
    ptxas with the release's own flags, so the gate judges what would run."""
    return parse_ptxas_log(kernel.ptxas_log)


def compile_in_subprocess(module: str, root: Path, python: str | None = None, args: tuple = ()) -> list | dict:
    """Run `python -m module ARGS` from the checkout `root` without the interpreter (`python`: another
    Triton runtime's interpreter, see triton_runtimes); the module prints its rows (a list, or a dict
    with "rows") as JSON on its last line."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([python or sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=root, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for row in result if isinstance(result, list) else result.get("rows", []):
        print(row)
    return result


def release_of(version: str) -> str:
    """major.minor of a version string ("3.8.0" -> "3.8")."""
    return ".".join(version.split(".")[:2])


def aot_venv(root: Path, release: str) -> Path:
    """The venv `make test` builds for the AOT gate under Triton `release` (requirements-aot-tritonXY.txt)."""
    return root / f".venv-triton{release.replace('.', '')}"


def requirements_release(requirements: Path) -> str:
    """The Triton release (major.minor) a requirements-aot-tritonXY.txt pins (its `triton==` line)."""
    pins = [l.split("==", 1)[1].strip() for l in requirements.read_text().splitlines()
            if l.replace(" ", "").startswith("triton==")]
    if len(pins) != 1:
        raise ValueError(f"{requirements.name}: expected one 'triton==X.Y.Z' line, found {len(pins)}")
    return release_of(pins[0])


@dataclass(frozen=True)
class AotRun:
    """One run of the AOT gate: release line `line`'s files under Triton `release`, with `python`, an
    interpreter that has it (None where none is installed). `own`: the line's runtime (pin.lock [runtime]);
    else a release no line runs yet, followed on the newest line's files (followed_releases)."""

    line: str
    release: str
    python: Path | None
    own: bool

    @property
    def name(self) -> str:
        return f"line{self.line}" if self.own else f"line{self.line}-triton{self.release}"


def followed_releases(root: Path) -> list[str]:
    """Triton releases the gate follows ahead of any line: each requirements-aot-tritonXY.txt whose release no
    line of pin.lock runs (a newer Triton users may install under the newest line). Now: triton 3.9, which
    torch 2.15 requires (torch 2.15.0: triton ~= 3.9), the runtime of the next SGLang release that moves to it."""
    from patchkit.lockfile import load_locks

    own = {release_of(lock.runtime["triton"]) for lock in load_locks(root / "pin.lock")}
    found = {requirements_release(req) for req in root.glob("requirements-aot-triton*.txt")}
    return sorted(found - own, key=lambda r: tuple(map(int, r.split("."))))


def _python_with(root: Path, release: str) -> Path | None:
    """This interpreter where its Triton is `release`, else that release's AOT venv, else None."""
    import triton

    if release_of(triton.__version__) == release:
        return Path(sys.executable)
    python = aot_venv(root, release) / "bin" / "python"
    return python if python.is_file() else None


def aot_runs(root: Path) -> list[AotRun]:
    """Every run of the gate: each release line under its runtime's Triton, then each followed release on the
    newest line's files."""
    from patchkit.lockfile import load_locks

    locks = load_locks(root / "pin.lock")
    lines = [lock.line for lock in locks]
    runs = []
    for lock in locks:
        release = release_of(lock.runtime["triton"])
        runs.append(AotRun(lock.line, release, _python_with(root, release), own=True))
    for release in followed_releases(root):
        runs.append(AotRun(lines[-1], release, _python_with(root, release), own=False))
    return runs


def compile_for_run(module: str, root: Path, run: AotRun, args: tuple = ()) -> dict:
    """compile_in_subprocess under the run's Triton (aot_runs): a pytest skip naming the venv to build where no
    Python has it, and an error if the run's Triton is not that release."""
    import pytest

    if run.python is None:
        pytest.skip(f"no Python with triton {run.release} for {run.name}: make {aot_venv(root, run.release).name}"
                    "/.installed (make test builds it)")
    result = compile_in_subprocess(module, root, str(run.python), args)
    assert release_of(result["triton"]) == run.release, (
        f"expected triton {run.release}, the run had {result['triton']}")
    return result


def error_text(exc: BaseException) -> str:
    """One line saying why a kernel did not build: the innermost cause of the exception (a Triton
    CompilationError ends in a source excerpt and a '^' marker; the error itself is in its innermost cause's
    error_message)."""
    inner = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    message = getattr(inner, "error_message", None) or str(inner)
    lines = [l.strip() for l in str(message).splitlines() if l.strip().strip("^").strip()]
    return f"{type(inner).__name__}: {lines[-1] if lines else repr(inner)}"[:300]
