"""P1: every MMA decode config compiles ahead of time for sm_120 and sm_90, on the CPU.

sm_120 (RTX PRO 6000 / 5090) gives a block at most 101376 bytes of shared memory and has
mma.sync only; Triton's metadata reports the shared memory, and the ptxas that ships with
Triton (`-v`) reports registers and spills. Compiles run in a subprocess so this process's
TRITON_INTERPRET setting (the numerics tests use the interpreter) cannot leak in.
The compile helpers and the production specialisation are harness/aot.py's (bench/experiments/
count_instructions.py compiles the same).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.aot import DIV16, MAIN_SIGNATURE, compile_in_subprocess, compile_kernel, decode_constexprs, ptxas_report
from harness.upstream import extract_functions, load_module

REPO = Path(__file__).resolve().parents[1]
OVERLAY = REPO / "overlay/0.5.14/sglang/srt/layers/attention/flash_mla_sm120_mma.py"
SM120_SHARED_LIMIT = 101376
ARCHS = (120, 90)
COMBINE_SIGNATURE = dict(
    part_out_ptr="*fp32", part_lse_ptr="*fp32", sink_ptr="*fp32", out_ptr="*bf16",
    lse_ptr="*fp32", H="i32", num_splits="i32",
)

# Registers sit at 240-255, so the one-cache build (e.g. the top-k 2048 shape) gets its own check.
CACHE_VARIANTS = {"": {}, "/one-cache": dict(HAS_EXTRA=False, HAS_EXTRA_LEN=False)}


def gluon_constexprs(config: tuple, split: bool) -> dict:
    """The Gluon decode kernel's constexprs in the production specialisation."""
    block_t, stages, warps, q_smem, bits, dq = config
    return dict(HAS_MAIN_LEN=True, HAS_EXTRA=True, HAS_EXTRA_LEN=True, HAS_SINK=True, SPLIT=split,
                POW2_PAGES=True, BLOCK_T=block_t, STAGES=stages, NUM_WARPS=warps, Q_SMEM=q_smem, BITS=bits,
                DQ=dq, PAD=0)


def _compile_all() -> list[dict]:
    """Subprocess body: compile every config (and the combine kernel) for every arch."""
    mod = load_module(OVERLAY, "flash_mla_sm120_mma_aot")
    rows = []

    def build(fn, signature, constexprs, div16, num_warps, num_stages, arch):
        k = compile_kernel(fn, signature, constexprs, div16, num_warps, num_stages, arch)
        return {"shared": k.metadata.shared, **ptxas_report(k.asm["ptx"], arch)}

    for arch in ARCHS:
        for name, cfg in mod.MMA_CONFIGS.items():
            bh, bt, warps, stages = cfg["launch"]
            for split in (False, True):
                for suffix, over in CACHE_VARIANTS.items():
                    const = {**decode_constexprs(bh, bt, split), **over}
                    info = build(mod._mma_sparse_decode_kernel, MAIN_SIGNATURE, const, DIV16, warps, stages, arch)
                    rows.append({"arch": arch, "kernel": f"decode/{name}/split={split}{suffix}", **info})
        for name, cfg in mod.GLUON_CONFIGS.items():
            launch = cfg["launch"]
            for split in (False, True):
                for suffix, over in CACHE_VARIANTS.items():
                    const = {**gluon_constexprs(launch, split), **over}
                    info = build(mod._gluon_sparse_decode_kernel, MAIN_SIGNATURE, const, DIV16, launch[2], 1, arch)
                    rows.append({"arch": arch, "kernel": f"gluon/{name}/split={split}{suffix}", **info})
        # Both combine shapes combine_launch picks: few rows (all splits at once), many rows.
        for label, (batch, heads, splits) in {"combine/few-rows": (1, 64, 40), "combine/many-rows": (16, 64, 4)}.items():
            _, cbh, cbd, at_once, cwarps = mod.combine_launch(batch, heads, splits)
            const = dict(HAS_SINK=True, BLOCK_H=cbh, BLOCK_D=cbd, SPLITS_AT_ONCE=at_once)
            info = build(mod._combine_splits_kernel, COMBINE_SIGNATURE, const, ["H"], cwarps, 1, arch)
            rows.append({"arch": arch, "kernel": label, **info})
    return rows


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    return compile_in_subprocess(__name__, REPO)


def test_every_config_compiles_for_both_archs(compiled):
    # The config table, read without importing the module (no GPU, no interpreter).
    ns = extract_functions(OVERLAY, ["MMA_CONFIGS", "GLUON_CONFIGS"], {})
    kinds = {(r["arch"], r["kernel"]) for r in compiled}
    for arch in ARCHS:
        assert (arch, "combine/few-rows") in kinds and (arch, "combine/many-rows") in kinds
        for name in ns["MMA_CONFIGS"]:
            for split in (False, True):
                for suffix in CACHE_VARIANTS:
                    assert (arch, f"decode/{name}/split={split}{suffix}") in kinds
        for name in ns["GLUON_CONFIGS"]:
            for split in (False, True):
                for suffix in CACHE_VARIANTS:
                    assert (arch, f"gluon/{name}/split={split}{suffix}") in kinds


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


if __name__ == "__main__":
    print(json.dumps(_compile_all()))
