"""Which MMA decode tile shapes compile spill-free for sm_120 under the running Triton (AOT, no GPU), and whether a
spill comes from Triton's PTX or from its ptxas: each shape's PTX goes through this Triton's ptxas and, with
--other-ptxas, through another release's too (bench/notes/mma_decode_notes.md, "Triton 3.8").

    env -u TRITON_INTERPRET .venv-triton38/bin/python -m bench.experiments.triton_spill_sweep \
        --other-ptxas .venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/ptxas-blackwell [--line NAME]

--line: whose P1 kernel file (default: the newest line, or PATCHKIT_LINE; harness/line_files.py).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.aot import DIV16, MAIN_SIGNATURE, compile_kernel, decode_constexprs, ptxas_report
from harness.line_files import command_lock, overlay_file
from harness.upstream import load_kernel
from serving import REPO

KERNEL = "flash_mla_sm120_mma.py"   # P1, the line's overlay file
SHAPES = ((16, 16), (16, 32), (16, 64), (32, 16), (32, 32))


def other_ptxas(ptxas: str, ptx: str) -> str:
    try:
        r = ptxas_report(ptx, 120, Path(ptxas))
    except RuntimeError as exc:       # the other release's ptxas may not take this PTX version
        return "does not assemble: " + str(exc).strip().splitlines()[-1][:80]
    return f"{r['regs']} regs, {r['spill_stores']} B spill stores"


def main() -> None:
    import triton

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other-ptxas", help="another Triton release's ptxas-blackwell, for the cross-check")
    ap.add_argument("--line", help="the release line of pin.lock (default: the newest, or PATCHKIT_LINE)")
    args = ap.parse_args()
    lock = command_lock(args.line)
    mod = load_kernel(overlay_file(lock, KERNEL), "mma_sweep")
    print(f"triton {triton.__version__}, sm_120, two caches (window + compressed), unsplit; kernel {KERNEL} "
          f"of line {lock.line}")
    print("| BLOCK_H | BLOCK_T | warps | stages | shared B | regs | spill stores B | stack-free | other ptxas |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for bh, bt in SHAPES:
        for warps in (4, 8):
            for stages in (1, 2, 3):
                k = compile_kernel(mod._mma_sparse_decode_kernel, MAIN_SIGNATURE, decode_constexprs(bh, bt, False),
                                   DIV16, warps, stages, 120)
                r = ptxas_report(k.asm["ptx"], 120)
                other = other_ptxas(args.other_ptxas, k.asm["ptx"]) if args.other_ptxas else "-"
                print(f"| {bh} | {bt} | {warps} | {stages} | {k.metadata.shared} | {r['regs']} | {r['spill_stores']} "
                      f"| {'yes' if not r['spill_stores'] else 'no'} | {other} |", flush=True)


if __name__ == "__main__":
    main()
