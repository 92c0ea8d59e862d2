"""Ahead-of-time kernel compiles for a GPU architecture, on a machine without one.

Used by tests/test_mma_aot.py, tests/test_p3p4_aot.py, tests/test_hc_sinkhorn.py and
bench/experiments/count_instructions.py. Compiles must not run under TRITON_INTERPRET (the numerics tests
set it), so the tests compile in a subprocess: compile_in_subprocess.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
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


def ptxas_report(ptx: str, arch: int, ptxas: Path | None = None) -> dict:
    """Registers and spill bytes from `ptxas -v` on the PTX: the ptxas that ships with this Triton, or `ptxas`
    (another release's, to tell its code generation from its assembler)."""
    import triton

    tool = "ptxas-blackwell" if arch >= 100 else "ptxas"
    ptxas = ptxas or Path(triton.__file__).parent / "backends/nvidia/bin" / tool
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run(
            [str(ptxas), f"-arch=sm_{arch}a", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True, text=True,
        )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    log = proc.stderr
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {
        "regs": int(regs.group(1)),
        "spill_stores": int(spills.group(1)),
        "spill_loads": int(spills.group(2)),
    }


def compile_kernel(fn, signature: dict, constexprs: dict, div16, num_warps: int, num_stages: int, arch: int):
    """triton.compile for `arch` with every pointer and the `div16` arguments marked 16-divisible
    (a Gluon kernel through GluonASTSource: same signature, explicit layouts)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

    names = fn.arg_names
    pointers = [k for k, v in signature.items() if v.startswith("*")]
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k in pointers + [d for d in div16 if d in signature]}
    source_cls = GluonASTSource if isinstance(fn, GluonJITFunction) else triton.compiler.ASTSource
    src = source_cls(
        fn=fn, signature={**signature, **{k: "constexpr" for k in constexprs}}, constexprs=constexprs, attrs=attrs,
    )
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages))


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


def triton_runtimes(root: Path) -> dict[str, tuple[str, Path | None]]:
    """release line -> (its runtime's Triton release, a Python that has it, or None where none is installed):
    this interpreter where its Triton is that release, else the line's AOT venv (aot_venv)."""
    import triton

    from patchkit.lockfile import load_lock, lock_lines

    out = {}
    for line in lock_lines(root / "pin.lock"):
        release = release_of(load_lock(root / "pin.lock", line).runtime["triton"])
        python = aot_venv(root, release) / "bin" / "python"
        out[line] = (release, Path(sys.executable) if release_of(triton.__version__) == release
                     else python if python.is_file() else None)
    return out


def compile_for_line(module: str, root: Path, line: str, args: tuple = ()) -> dict:
    """compile_in_subprocess under release line `line`'s own Triton (triton_runtimes): a pytest skip naming the
    venv to build where no Python has it, and an error if the run's Triton is not that release."""
    import pytest

    release, python = triton_runtimes(root)[line]
    if python is None:
        pytest.skip(f"no Python with triton {release} for the {line} line: make {aot_venv(root, release).name}"
                    "/.installed (make test builds it)")
    result = compile_in_subprocess(module, root, str(python), args)
    assert release_of(result["triton"]) == release, f"expected triton {release}, the run had {result['triton']}"
    return result
