"""Static evidence for the shipped MMA decode kernel: AOT-compile it for sm_90 and sm_120 on the
CPU and report registers, spills, shared memory and the SASS instruction mix of the main loop
(one KV tile per iteration), per config.

    .venv/bin/python -m bench.experiments.count_instructions [--line NAME] [--json FILE] [--configs NAME ...]
        [--extra BLOCK_H,BLOCK_T,warps,stages ...]

--line: the release line whose overlay kernel is compiled (default: the newest, or PATCHKIT_LINE;
harness/line_files.py says where the line keeps it).

The kernel is compiled as tests/kernels/test_mma_aot.py compiles it (same signature, production
specialisation, unsplit), with the same helpers (harness/aot.py); registers / spills from the ptxas that ships with
Triton (`-v`, the same PTX); the SASS from its nvdisasm. The main loop is the backward branch whose
body holds the most HMMA instructions. Counts are per thread (SASS is per warp, one
instruction per lane), per iteration = one BLOCK_T-token tile of BLOCK_H heads.
Run it without TRITON_INTERPRET.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

# The shipped kernel's signature, production specialisation and compile / ptxas helpers, as the
# AOT test uses them.
from harness.aot import DIV16, MAIN_SIGNATURE, compile_kernel, decode_constexprs, ptxas_report
from harness.line_files import command_lock, overlay_file
from harness.upstream import load_kernel
from serving import REPO

KERNEL = "flash_mla_sm120_mma.py"   # P1, the line's overlay file

# SASS opcode (before the first '.') -> column of the table.
CLASSES = {
    "HMMA": "mma", "HGMMA": "mma", "LDSM": "ldsm", "BAR": "bar",
    "F2F": "cvt", "F2FP": "cvt", "I2F": "cvt", "I2FP": "cvt", "F2I": "cvt", "PRMT": "prmt",
    "LDS": "lds", "STS": "sts", "STSM": "sts", "LDG": "ldg",
}
COLUMNS = ["total", "fast", "mma", "ldsm", "bar", "cvt", "prmt", "lds", "sts", "ldg"]


def _nvidia_bin(tool: str) -> Path:
    import triton

    return Path(triton.__file__).parent / "backends/nvidia/bin" / tool


_INSN = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[^ ;]*)?\s*(.*?);")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_LABEL = re.compile(r"^(\.L_x_\d+):")


def sass(cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(_nvidia_bin("nvdisasm")), "-c", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return proc.stdout


def main_loop_mix(text: str) -> dict:
    """Opcode classes of the loop body (backward branch) with the most MMA instructions.

    `fast` counts the body without the blocks that a conditional forward branch inside the
    loop jumps over (the lazy softmax rescale): the instructions of a tile in steady state."""
    insns, labels = [], {}
    for line in text.splitlines():
        lab = _LABEL.match(line.strip())
        if lab:
            labels[lab.group(1)] = len(insns)
            continue
        m = _INSN.match(line)
        if m:
            insns.append((m.group(3), m.group(5), bool(m.group(2)) or m.group(4) == ".U"))
    best = None
    for i, (op, args, _) in enumerate(insns):
        t = _TARGET.search(args) if op == "BRA" else None
        if t and labels.get(t.group(1), i + 1) <= i:
            lo = labels[t.group(1)]
            n_mma = sum(o in ("HMMA", "HGMMA") for o, _, _ in insns[lo : i + 1])
            if best is None or n_mma > best[0]:
                best = (n_mma, lo, i)
    mix = {c: 0 for c in COLUMNS}
    if best is None:
        return mix
    _, lo, hi = best
    body = insns[lo : hi + 1]
    skipped = set()
    for j in range(lo, hi):
        op, args, conditional = insns[j]
        t = _TARGET.search(args) if op == "BRA" and conditional else None
        if t and j < labels.get(t.group(1), -1) <= hi:
            skipped.update(range(j + 1, labels[t.group(1)]))
    ops = Counter(o for o, _, _ in body)
    mix["total"] = len(body)
    mix["fast"] = len(body) - len(skipped)
    for op, n in ops.items():
        if op in CLASSES:
            mix[CLASSES[op]] += n
    mix["top"] = ops.most_common(12)
    return mix


def variants(lock, extra=()):
    """(label, kernel, constexprs, warps, stages) per MMA_CONFIGS entry of `lock`'s line's kernel; `extra`: more
    (BLOCK_H, BLOCK_T, warps, stages) tuples."""
    mod = load_kernel(overlay_file(lock, KERNEL), "flash_mla_sm120_mma_count")
    configs = {name: cfg["launch"] for name, cfg in mod.MMA_CONFIGS.items()}
    configs.update({"h{}_t{}_w{}_s{}".format(*c): c for c in extra})
    return [(f"shipped {name}", mod._mma_sparse_decode_kernel, decode_constexprs(bh, bt, False), w, st)
            for name, (bh, bt, w, st) in configs.items()]


def measure(lock, archs=(90, 120), only=None, extra=()) -> list[dict]:
    rows = []
    for label, fn, const, warps, stages in variants(lock, extra):
        if only and not any(o in label for o in only):
            continue
        for arch in archs:
            k = compile_kernel(fn, MAIN_SIGNATURE, const, DIV16, warps, stages, arch)
            row = {"kernel": label, "arch": arch, "BLOCK_H": const["BLOCK_H"], "BLOCK_T": const["BLOCK_T"],
                   "warps": warps, "shared": k.metadata.shared, **ptxas_report(k.asm["ptx"], arch)}
            row.update(main_loop_mix(sass(k.asm["cubin"])))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def print_table(rows) -> None:
    print("| kernel | arch | regs | spills (st/ld B) | shared (B) | SASS/tile | without rare branch | HMMA | LDSM | BAR "
          "| F2F/F2FP/I2F/F2I | PRMT | LDS | STS | LDG | SASS per head-token | HMMA share |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        per_ht = r["fast"] * r["warps"] / (r["BLOCK_H"] * r["BLOCK_T"])  # warp-instructions / (head x token)
        print(f"| {r['kernel']} | sm_{r['arch']} | {r['regs']} | {r['spill_stores']}/{r['spill_loads']} | {r['shared']} | "
              f"{r['total']} | {r['fast']} | {r['mma']} | {r['ldsm']} | {r['bar']} | {r['cvt']} | {r['prmt']} | {r['lds']} | {r['sts']} | "
              f"{r['ldg']} | {per_ht:.1f} | {100 * r['mma'] / max(r['fast'], 1):.0f}% |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--line", help="the release line of pin.lock (default: the newest, or PATCHKIT_LINE)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--configs", nargs="*", help="only kernels whose label contains one of these")
    ap.add_argument("--extra", nargs="*", default=[],
                    help="more configs of the shipped kernel, BLOCK_H,BLOCK_T,warps,stages e.g. 16,32,8,1")
    args = ap.parse_args()
    extra = [tuple(int(x) for x in e.split(",")) for e in args.extra]
    rows = measure(command_lock(args.line), only=args.configs, extra=extra)
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
