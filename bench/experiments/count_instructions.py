"""Static evidence for the v5 candidate: AOT-compile v4 (shipped) and v5 for sm_90 and sm_120 on
the CPU and report registers, spills, shared memory and the SASS instruction mix of the main
loop (one KV tile per iteration).

    .venv/bin/python bench/experiments/count_instructions.py [--json FILE] [--configs NAME ...]

The cubin comes from triton.compile; registers / spills from the ptxas that ships with Triton
(`-v`, the same PTX); the SASS from its nvdisasm. The main loop is the backward branch whose
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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

V4_PATH = REPO / "overlay/sglang/srt/layers/attention/flash_mla_sm120_mma.py"
V5_PATH = Path(__file__).resolve().parent / "mma_decode_v5.py"
SM120_SHARED_LIMIT = 101376

# The shipped kernel's signature and production specialisation, as the AOT test compiles it.
from test_mma_aot import DIV16, MAIN_SIGNATURE as V4_SIGNATURE  # noqa: E402

V5_SIGNATURE = {**V4_SIGNATURE, "main_shift": "i32", "extra_shift": "i32"}  # ordered by arg_names below

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


def ptxas_report(ptx: str, arch: int) -> dict:
    """Registers and spill bytes from Triton's ptxas -v on the kernel's PTX."""
    tool = "ptxas-blackwell" if arch >= 100 else "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run(
            [str(_nvidia_bin(tool)), f"-arch=sm_{arch}a", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True, text=True,
        )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    regs = re.search(r"Used (\d+) registers", proc.stderr)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr)
    return {"regs": int(regs.group(1)), "spill_stores": int(spills.group(1)), "spill_loads": int(spills.group(2))}


def compile_kernel(fn, signature: dict, constexprs: dict, div16, num_warps: int, num_stages: int, arch: int):
    import triton
    from triton.backends.compiler import GPUTarget

    names = fn.arg_names
    signature = {k: signature[k] for k in names if k in signature}
    pointers = [k for k, v in signature.items() if v.startswith("*")]
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k in pointers + [d for d in div16 if d in signature]}
    src = triton.compiler.ASTSource(
        fn=fn, signature={**signature, **{k: "constexpr" for k in constexprs}}, constexprs=constexprs, attrs=attrs,
    )
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages))


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
    loop jumps over (LAZY_RESCALE's rare rescale): the instructions of a tile in steady state."""
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


def variants(extra=()):
    """(label, kernel, signature, constexprs, warps, stages); `extra`: more v5 config tuples."""
    import triton.language as tl
    from upstream import load_module

    v4 = load_module(V4_PATH, "flash_mla_sm120_mma_count")
    v5 = load_module(V5_PATH, "mma_decode_v5_count")
    base = dict(HAS_MAIN_LEN=True, HAS_EXTRA=True, HAS_EXTRA_LEN=True, HAS_SINK=True, SPLIT=False)
    out = []
    for name, (bh, bt, w, st) in v4.MMA_CONFIGS.items():
        out.append((f"v4 {name}", v4._mma_sparse_decode_kernel, V4_SIGNATURE,
                    dict(base, BLOCK_H=bh, BLOCK_T=bt, MMA_DTYPE=tl.bfloat16), w, st))
    configs = dict(v5.V5_CONFIGS)
    configs.update({"h{}_t{}_w{}_s{}_f16{:d}_lazy{:d}".format(*c): c for c in extra})
    for name, (bh, bt, w, st, f16_rel, lazy) in configs.items():
        out.append((f"v5 {name}", v5._mma_sparse_decode_v5_kernel, V5_SIGNATURE,
                    dict(base, BLOCK_H=bh, BLOCK_T=bt, F16_REL=f16_rel, LAZY_RESCALE=lazy,
                         POW2_PAGES=True, MMA_DTYPE=tl.bfloat16, MMA16=tl.float16), w, st))
    return out


def measure(archs=(90, 120), only=None, extra=()) -> list[dict]:
    rows = []
    for label, fn, sig, const, warps, stages in variants(extra):
        if only and not any(o in label for o in only):
            continue
        for arch in archs:
            k = compile_kernel(fn, sig, const, DIV16, warps, stages, arch)
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
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--configs", nargs="*", help="only kernels whose label contains one of these")
    ap.add_argument("--extra", nargs="*", default=[],
                    help="more v5 configs, BLOCK_H,BLOCK_T,warps,stages,F16_REL,LAZY_RESCALE e.g. 32,32,8,1,1,0")
    args = ap.parse_args()
    extra = [tuple(int(x) for x in e.split(",")) for e in args.extra]
    extra = [(bh, bt, w, st, bool(f), bool(z)) for bh, bt, w, st, f, z in extra]
    rows = measure(only=args.configs, extra=extra)
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
