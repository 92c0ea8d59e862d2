"""P1: every MMA decode config compiles ahead of time for sm_120 and sm_90, on the CPU.

sm_120 (RTX PRO 6000 / 5090) gives a block at most 101376 bytes of shared memory and has
mma.sync only; Triton's metadata reports the shared memory, and the ptxas that ships with
Triton (`-v`) reports registers and spills. Compiles run in a subprocess so this process's
TRITON_INTERPRET setting (the numerics tests use the interpreter) cannot leak in.
bench/experiments/count_instructions.py compiles the same specialisation with the helpers here.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OVERLAY = REPO / "overlay/sglang/srt/layers/attention/flash_mla_sm120_mma.py"
SM120_SHARED_LIMIT = 101376
ARCHS = (120, 90)

# Runtime specialisation in production: pointers 16-byte aligned; strides, widths, page sizes
# and page strides multiples of 16 (149760 / 37440 / 1728-byte pages, 64-aligned widths);
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
COMBINE_SIGNATURE = dict(
    part_out_ptr="*fp32", part_lse_ptr="*fp32", sink_ptr="*fp32", out_ptr="*bf16",
    lse_ptr="*fp32", H="i32", num_splits="i32",
)


def decode_constexprs(block_h: int, block_t: int, split: bool) -> dict:
    """The decode kernel's constexprs in the production specialisation (GPU: bf16 MMA operands)."""
    import triton.language as tl

    return dict(HAS_MAIN_LEN=True, HAS_EXTRA=True, HAS_EXTRA_LEN=True, HAS_SINK=True, SPLIT=split,
                POW2_PAGES=True, BLOCK_H=block_h, BLOCK_T=block_t, MMA_DTYPE=tl.bfloat16)


# Registers sit at 240-255, so the one-cache build (e.g. the top-k 2048 shape) gets its own check.
CACHE_VARIANTS = {"": {}, "/one-cache": dict(HAS_EXTRA=False, HAS_EXTRA_LEN=False)}


def ptxas_report(ptx: str, arch: int) -> dict:
    """Registers and spill bytes from the ptxas that ships with Triton (`-v`) on the PTX."""
    import triton

    tool = "ptxas-blackwell" if arch >= 100 else "ptxas"
    ptxas = Path(triton.__file__).parent / "backends/nvidia/bin" / tool
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


def gluon_constexprs(config: tuple, split: bool) -> dict:
    """The Gluon decode kernel's constexprs in the production specialisation."""
    block_t, stages, warps, q_smem, bits, dq = config
    return dict(HAS_MAIN_LEN=True, HAS_EXTRA=True, HAS_EXTRA_LEN=True, HAS_SINK=True, SPLIT=split,
                POW2_PAGES=True, BLOCK_T=block_t, STAGES=stages, NUM_WARPS=warps, Q_SMEM=q_smem, BITS=bits,
                DQ=dq, PAD=0)


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


def _compile_all() -> list[dict]:
    """Subprocess body: compile every config (and the combine kernel) for every arch."""
    sys.path.insert(0, str(REPO / "tests"))
    from upstream import load_module

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


def compile_in_subprocess(script: str) -> list[dict]:
    """Run an AOT test file as a script without the interpreter (it prints its rows as JSON last)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    for row in rows:
        print(row)
    return rows


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    return compile_in_subprocess(__file__)


def test_every_config_compiles_for_both_archs(compiled):
    sys.path.insert(0, str(REPO / "tests"))
    from upstream import extract_functions

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
