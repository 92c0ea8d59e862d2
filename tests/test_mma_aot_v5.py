"""v5 candidate (bench/experiments/mma_decode_v5.py): every config compiles ahead of time for
sm_120 and sm_90 on the CPU, fits sm_120's shared memory and does not spill.

Mirrors tests/test_mma_aot.py (same specialisation, same ptxas report) and also checks the
kernel paths bench_mma_decode.py --with-experiments times (bf16 K, rescale every tile). Compiles run in a
subprocess so this process's TRITON_INTERPRET setting cannot leak in.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COUNTER = REPO / "bench/experiments/count_instructions.py"
SM120_SHARED_LIMIT = 101376
ARCHS = (120, 90)
# Other main-loop paths of the shipped configs' shapes: (BLOCK_H, BLOCK_T, warps, stages, F16_REL, LAZY_RESCALE).
PATH_VARIANTS = [(32, 32, 8, 1, False, True), (32, 32, 8, 1, True, False), (32, 32, 8, 1, False, False)]


def _compile_all() -> list[dict]:
    """Subprocess body: v5's configs + path variants, and the combine kernel, for both archs."""
    sys.path.insert(0, str(COUNTER.parent))
    import count_instructions as ci

    import triton.language as tl

    rows = ci.measure(archs=ARCHS, only=["v5"], extra=PATH_VARIANTS)
    v5 = sys.modules["mma_decode_v5_count"]
    # The split variant (partial outputs + LSE instead of the sink and bf16 store) of each config.
    for name, (bh, bt, warps, stages, f16_rel, lazy) in v5.V5_CONFIGS.items():
        const = dict(HAS_MAIN_LEN=True, HAS_EXTRA=True, HAS_EXTRA_LEN=True, HAS_SINK=True, SPLIT=True,
                     BLOCK_H=bh, BLOCK_T=bt, F16_REL=f16_rel, LAZY_RESCALE=lazy, POW2_PAGES=True,
                     MMA_DTYPE=tl.bfloat16, MMA16=tl.float16)
        for arch in ARCHS:
            k = ci.compile_kernel(v5._mma_sparse_decode_v5_kernel, ci.V5_SIGNATURE, const, ci.DIV16, warps, stages, arch)
            rows.append({"kernel": f"v5 {name} split", "arch": arch, "shared": k.metadata.shared,
                         **ci.ptxas_report(k.asm["ptx"], arch)})
    cbh, cwarps = v5.v4.COMBINE_CONFIG
    sig = dict(part_out_ptr="*fp32", part_lse_ptr="*fp32", sink_ptr="*fp32", out_ptr="*bf16",
               lse_ptr="*fp32", H="i32", num_splits="i32")
    for arch in ARCHS:
        k = ci.compile_kernel(v5._combine_splits_kernel, sig, dict(HAS_SINK=True, BLOCK_H=cbh), ["H"], cwarps, 1, arch)
        rows.append({"kernel": "combine", "arch": arch, "shared": k.metadata.shared,
                     **ci.ptxas_report(k.asm["ptx"], arch)})
    return [{k: v for k, v in r.items() if k != "top"} for r in rows]


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    for row in rows:
        print(row)
    return rows


def test_every_config_and_path_compiles_for_both_archs(compiled):
    sys.path.insert(0, str(REPO / "tests"))
    from upstream import extract_functions

    ns = extract_functions(REPO / "bench/experiments/mma_decode_v5.py", ["V5_CONFIGS"], {})
    kinds = {(r["arch"], r["kernel"]) for r in compiled}
    for arch in ARCHS:
        assert (arch, "combine") in kinds
        for name in ns["V5_CONFIGS"]:
            assert (arch, f"v5 {name}") in kinds
            assert (arch, f"v5 {name} split") in kinds
    assert len(compiled) == len(ARCHS) * (2 * len(ns["V5_CONFIGS"]) + len(PATH_VARIANTS) + 1)


def test_sm120_shared_memory_fits(compiled):
    for row in compiled:
        if row["arch"] == 120:
            assert 0 < row["shared"] <= SM120_SHARED_LIMIT, row


@pytest.mark.parametrize("arch", ARCHS)
def test_no_register_spills(compiled, arch):
    for row in compiled:
        if row["arch"] == arch:
            assert row["spill_stores"] == 0 and row["spill_loads"] == 0, row
            assert row["regs"] <= 255, row


def test_main_loop_found_with_its_mma(compiled):
    """The SASS parse found the loop: a tile has MMA, and the steady state is no longer than it."""
    for row in compiled:
        if row["kernel"] != "combine" and not row["kernel"].endswith("split"):
            assert row["mma"] > 0 and 0 < row["fast"] <= row["total"], row


if __name__ == "__main__":
    print(json.dumps(_compile_all()))
