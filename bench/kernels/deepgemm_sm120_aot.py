"""Compile DeepGEMM's sm_120 paged fp4 MQA-logits kernel ahead of time for sm_120, on a machine without a GPU.

SGLang 0.5.23 scores DeepSeek-V4.1's ratio-1/2 index layers on sm_120 with `deep_gemm.fp8_fp4_paged_mqa_logits`
(v41_indexer: capability major >= 10), which DeepGEMM builds at run time from its shipped headers. This writes the
instantiation DeepGEMM's JIT generates for `sm120_fp4_paged_mqa_logits` (the template and the nvcc flags its _C.so
carries) for each shape V4.1 asks for, and compiles each with nvcc to a cubin for sm_120f, ptxas verbose:
it builds or it does not, with its registers, spills and shared memory. Nothing runs. --heads is the model's
index_n_heads: 32 (DeepSeek-V4.1-Flash's published value, the default) or 64 (V4-Flash-sized configs).

    python3 -m bench.kernels.deepgemm_sm120_aot --wheel sgl_deep_gemm-0.2.3.post2-py3-none-manylinux2014_x86_64.whl [--heads 32] OUT_DIR
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

KERNEL = "sm120_fp4_paged_mqa_logits"
# DeepGEMM's JIT flags for sm_120, as its _C.so carries them (strings: -std=c++{}, --expt-relaxed-constexpr,
# -gencode=arch=compute_120f,code=sm_120f, the diag-suppress list); -O3 and ptxas verbose/spill warnings added.
FLAGS = ["-std=c++20", "--compiler-options=-fPIC", "--compiler-options=-fconcepts", "--expt-relaxed-constexpr",
         "--expt-extended-lambda", "-O3", "--diag-suppress=39,161,174,177,186,940",
         "--compiler-options=-Wno-deprecated-declarations,-Wno-abi", "-gencode=arch=compute_120f,code=sm_120f",
         "--ptxas-options=--verbose", "--ptxas-options=--warn-on-spills", "-cubin"]
# (next_n, context_lens_2d): a decode row alone with 1-D and with 2-D lengths (0.5.23's
# deep_gemm_fp4_paged_mqa_logits hands every decode [rows, 1] lengths), the 2-row atom its scheduler pairs, and a
# request's verify rows at DSPARK block 5 and 6 (block + 1 = 6 and 7 rows, 2-D lengths; 7 pads to 4 atoms).
# Dim 128, block_kv 64, split_kv 128, 2 Q / 3 KV stages, 128 TMA + 256 math threads: the one shape DeepGEMM's
# sm_120 host code builds (its asserts), with fp32 logits as 0.5.23 asks off sm_100; the heads are the model's.
SHAPES = [(1, "false"), (2, "true"), (1, "true"), (6, "true"), (7, "true")]
# index_n_heads DeepGEMM's paged MQA logits accept (its host assert: num_heads == 32 or num_heads == 64).
# DeepSeek-V4.1-Flash's published config has 32 (TensorRT-LLM's DeepseekV41TextConfig); V4-Flash has 64.
HEADS = (32, 64)
V41_INDEX_HEADS = 32


def source(next_n: int, ctx2d: str, heads: int) -> str:
    return (f"#include <deep_gemm/impls/{KERNEL}.cuh>\nusing namespace deep_gemm;\n"
            f"static void __instantiate_kernel() {{\n    auto ptr = reinterpret_cast<void*>(&{KERNEL}<\n"
            f"        {next_n}, {heads},\n        128, 64,\n        {ctx2d}, false,\n        2, 3,\n        128,\n"
            f"        128, 256,\n        float\n    >);\n}}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", required=True, type=Path, help="the sgl-deep-gemm wheel (pip download)")
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("--next-n", type=int, action="append",
                    help="only the shapes of these next_n (repeatable; default: every shape)")
    ap.add_argument("--heads", type=int, choices=HEADS, default=V41_INDEX_HEADS,
                    help=f"the model's index_n_heads (default {V41_INDEX_HEADS}, DeepSeek-V4.1-Flash's; "
                         "64 for V4-Flash-sized configs)")
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    if not args.wheel.is_file() or not zipfile.is_zipfile(args.wheel):
        print(f"error: --wheel: expected a wheel file, found {args.wheel}", file=sys.stderr)
        return 2
    if shutil.which(args.nvcc) is None:
        print(f"error: --nvcc: expected an nvcc on PATH, found none named {args.nvcc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(args.wheel.read_bytes()).hexdigest()
    version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    lines = [f"wheel: {args.wheel.name} sha256 {digest}", f"nvcc: {version}",
             f"heads: {args.heads} (index_n_heads) x dim 128, block_kv 64, split_kv 128, fp32 logits"]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(args.wheel) as z:
            z.extractall(tmp, [n for n in z.namelist() if n.startswith("deep_gemm/include/")])
        include = Path(tmp) / "deep_gemm" / "include"
        for next_n, ctx2d in [s for s in SHAPES if not args.next_n or s[0] in args.next_n]:
            name = f"{KERNEL}_n{next_n}_{'2d' if ctx2d == 'true' else '1d'}"
            cu = args.out / f"{name}.cu"
            cu.write_text(source(next_n, ctx2d, args.heads))
            cmd = [args.nvcc, *FLAGS, "-I", "<deep_gemm/include>", "-o", f"{name}.cubin", cu.name]
            proc = subprocess.run([c.replace("<deep_gemm/include>", str(include)) for c in cmd],
                                  cwd=args.out, capture_output=True, text=True)
            (args.out / f"{name}.log").write_text(proc.stdout + proc.stderr)
            (args.out / f"{name}.cubin").unlink(missing_ok=True)     # the log is the result; keep the tree small
            failed += proc.returncode != 0
            lines += [f"$ {' '.join(cmd)}", f"{name}: rc {proc.returncode}"]
            lines += [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines()
                      if "registers" in ln or "spill" in ln or "error" in ln.lower()]
    (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
