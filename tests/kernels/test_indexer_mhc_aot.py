"""P3/P4: every shipped MHC-pre and indexer kernel config compiles ahead of time for sm_120 and sm_90, on the CPU.

The sm_120 gate of tests/kernels/test_mma_aot.py (with the same compile helpers, harness/aot.py): at most 101376 bytes of
shared memory per block, no register spills, and mma.sync only (no wgmma, which sm_120 lacks). The
configs are read from the overlay modules, so a new entry in INDEXER_CONFIGS or a new MHC tile size
is checked without touching this file. Compiles run in a subprocess (no TRITON_INTERPRET leak), under each
release line's own Triton (harness.aot.aot_runs: 0.5.14 triton 3.6, 0.5.23 triton 3.8) and the followed one (3.9,
on the 0.5.23 line's files), on the files that line ships (the indexer and MHC-pre kernels only in 0.5.14: 0.5.23
retired P4 and, from patch set 0.1.10, P3). Registers and spills: Triton's own `ptxas -v` log of the very cubin it built (harness.aot.build_report),
as in the P1 gate: 3.8 and 3.9 assemble with --regAllocOptLevel=2, whose spills a plain `ptxas -v` of the PTX does
not show (bench/notes/mma_decode_notes.md "Triton 3.9"). Launch warps are the module's (PARTIALS_NUM_WARPS by release).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.aot import aot_runs, build_report, compile_for_run, compile_kernel
from harness.upstream import extract_functions, load_kernel, load_module

REPO = Path(__file__).resolve().parents[2]
INDEXER_FILE, MHC_FILE = "paged_mqa_logits_triton.py", "mhc_pre_triton.py"
ARCHS = (120, 90)
SM120_SHARED_LIMIT = 101376

INDEXER_SIGNATURE = dict(
    q_ptr="*fp8e4nv", kv_ptr="*fp8e4nv", scale_ptr="*fp32", w_ptr="*fp32", seq_lens_ptr="*i32",
    page_table_ptr="*i32", out_ptr="*fp32", stride_qb="i32", stride_qh="i32", stride_wb="i32",
    stride_pt="i32", stride_out="i32", max_seq_len="i32", num_splits="i32",
)
INDEXER_DIV16 = ["stride_qb", "stride_qh", "stride_wb", "stride_pt", "stride_out", "max_seq_len"]
PARTIALS_SIGNATURE = dict(
    x_ptr="*bf16", w_ptr="*fp32", part_ptr="*fp32", sq_ptr="*fp32", T="i32", K="i32", N="i32",
    stride_x="i32", stride_w="i32", k_per_split="i32",
)
FINISH_SIGNATURE = dict(part_ptr="*fp32", sq_ptr="*fp32", out_ptr="*fp32", T="i32", N="i32", num_splits="i32",
                        inv_k="fp32", eps="fp32")
FUSED_SIGNATURE = dict(
    x_ptr="*bf16", w_ptr="*fp32", part_ptr="*fp32", count_ptr="*i32", out_ptr="*fp32", T="i32", K="i32",
    N="i32", stride_x="i32", stride_w="i32", k_per_split="i32", num_splits="i32", inv_k="fp32", eps="fp32",
)
MHC_DIV16 = ["K", "stride_x", "stride_w", "k_per_split"]
# Token counts whose launch shapes cover every MHC tile size; SM counts of the sm_120 cards and the H200.
MHC_TOKENS = (1, 2, 16, 32, 64, 256, 4096)
SM_COUNTS = (188, 170, 132)


def overlay_file(line: str, name: str) -> Path | None:
    found = sorted((REPO / "overlay" / line).rglob(name))
    return found[0] if found else None


def _compile_all(line: str) -> dict:
    import triton

    indexer, mhc_path = overlay_file(line, INDEXER_FILE), overlay_file(line, MHC_FILE)
    idx = load_module(indexer, "indexer_aot") if indexer else None
    mhc = load_kernel(mhc_path, "mhc_pre_aot") if mhc_path else None
    rows = []

    def build(label, fn, signature, constexprs, div16, warps, stages, arch):
        k = compile_kernel(fn, signature, constexprs, div16, warps, stages, arch)
        ptx = k.asm["ptx"]
        rows.append({"arch": arch, "kernel": label, "shared": k.metadata.shared, "wgmma": "wgmma" in ptx,
                     "mma_sync": "mma.sync" in ptx, "warps": warps, **build_report(k)})

    for arch in ARCHS:
        for name, (warps, stages, _, _) in (idx.INDEXER_CONFIGS.items() if idx else ()):
            for fill_tail in (False, True):
                const = dict(H=64, D=idx.HEAD_DIM, PAGE=idx.PAGE_SIZE, FILL_TAIL=fill_tail)
                build(f"indexer/{name}/fill_tail={fill_tail}", idx._paged_mqa_logits_kernel, INDEXER_SIGNATURE,
                      const, INDEXER_DIV16, warps, stages, arch)
        shapes = set()
        for sms in (SM_COUNTS if mhc else ()):
            for tokens in MHC_TOKENS:
                for per_sm in {mhc.GRAPH_PROGRAMS_PER_SM, mhc.EAGER_PROGRAMS_PER_SM}:
                    block_t, _, splits, _ = mhc.launch_config(tokens, 16384, sms, per_sm)
                    chunk = max(1, min(triton.next_power_of_2(splits), mhc._REDUCE_ELEMS // (block_t * mhc.BLOCK_N)))
                    shapes.add((block_t, triton.next_power_of_2(splits), chunk))
        for block_t, splits_pow2, chunk in sorted(shapes):
            tiles = dict(BLOCK_T=block_t, BLOCK_N=mhc.BLOCK_N, BLOCK_K=mhc.BLOCK_K)
            # The graph route as shipped: with programmatic dependent launch (griddepcontrol) when GRAPH_PDL.
            build(f"mhc/partials/t{block_t}", mhc._mhc_pre_partials, PARTIALS_SIGNATURE,
                  {**tiles, "PDL": mhc.GRAPH_PDL}, MHC_DIV16, mhc.PARTIALS_NUM_WARPS, 3, arch)
            build(f"mhc/finish/s{splits_pow2}", mhc._mhc_pre_finish, FINISH_SIGNATURE,
                  dict(SPLITS_POW2=splits_pow2, BLOCK_N=mhc.BLOCK_N, PDL=mhc.GRAPH_PDL), [], 4, 3, arch)
            build(f"mhc/one-launch/t{block_t}/c{chunk}", mhc._mhc_pre_fused, FUSED_SIGNATURE,
                  {**tiles, "SPLIT_CHUNK": chunk}, MHC_DIV16, 4, 3, arch)
    unique = {(r["arch"], r["kernel"]): r for r in rows}
    return {"triton": triton.__version__, "rows": list(unique.values())}


@pytest.fixture(scope="module", params=aot_runs(REPO), ids=lambda run: run.name)
def compiled(request) -> list[dict]:
    run = request.param
    if not (overlay_file(run.line, INDEXER_FILE) or overlay_file(run.line, MHC_FILE)):
        pytest.skip(f"line {run.line} ships neither kernel (P4 and P3 retired there): nothing to build")
    return [{**row, "line": run.line} for row in compile_for_run(__name__, REPO, run, (run.line,))["rows"]]


def test_every_config_is_built(compiled):
    line = compiled[0]["line"]
    indexer = overlay_file(line, INDEXER_FILE)
    ns = extract_functions(indexer, ["INDEXER_CONFIGS"], {}) if indexer else {"INDEXER_CONFIGS": {}}
    kinds = {(r["arch"], r["kernel"]) for r in compiled}
    for arch in ARCHS:
        for name in ns["INDEXER_CONFIGS"]:
            assert (arch, f"indexer/{name}/fill_tail=False") in kinds and (arch, f"indexer/{name}/fill_tail=True") in kinds
        if overlay_file(line, MHC_FILE):
            assert any(k.startswith("mhc/one-launch/") for a, k in kinds if a == arch)
            assert any(k.startswith("mhc/partials/") for a, k in kinds if a == arch)


def test_sm120_shared_memory_fits(compiled):
    for row in compiled:
        if row["arch"] == 120:
            assert 0 < row["shared"] <= SM120_SHARED_LIMIT, row


def test_sm120_uses_mma_sync_only(compiled):
    for row in compiled:
        if row["arch"] == 120 and "finish" not in row["kernel"]:
            assert row["mma_sync"] and not row["wgmma"], row


@pytest.mark.parametrize("arch", ARCHS)
def test_no_register_spills(compiled, arch):
    for row in compiled:
        if row["arch"] == arch:
            assert row["spill_stores"] == 0 and row["spill_loads"] == 0, row
            assert row["regs"] <= 255, row


if __name__ == "__main__":
    print(json.dumps(_compile_all(sys.argv[1])))
