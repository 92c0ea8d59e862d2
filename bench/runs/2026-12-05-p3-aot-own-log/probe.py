"""Registers/spills of P3's _mhc_pre_partials and _mhc_pre_fused: Triton's own build log vs plain ptxas -v."""
import json, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout
import triton
from harness.aot import compile_kernel, build_report, ptxas_report
from harness.upstream import load_kernel
from tests.test_p3p4_aot import PARTIALS_SIGNATURE, FUSED_SIGNATURE, MHC_DIV16, overlay_file
line = sys.argv[1]
variants = json.loads(sys.argv[2]) if len(sys.argv) > 2 else [[4, 3]]
mhc = load_kernel(overlay_file(line, "mhc_pre_triton.py"), "mhc_probe")
for arch in (120, 90):
    for bt in (16, 32, 64):
        for warps, stages in variants:
            tiles = dict(BLOCK_T=bt, BLOCK_N=mhc.BLOCK_N, BLOCK_K=mhc.BLOCK_K)
            k = compile_kernel(mhc._mhc_pre_partials, PARTIALS_SIGNATURE, {**tiles, "PDL": mhc.GRAPH_PDL}, MHC_DIV16, warps, stages, arch)
            own, plain = build_report(k), ptxas_report(k.asm["ptx"], arch)
            print(triton.__version__, f"sm_{arch}", f"partials t{bt} w{warps} s{stages}", "own", own, "plain", plain, "shared", k.metadata.shared, flush=True)
            for chunk in (1, 8):
                k = compile_kernel(mhc._mhc_pre_fused, FUSED_SIGNATURE, {**tiles, "SPLIT_CHUNK": chunk}, MHC_DIV16, warps, stages, arch)
                print(triton.__version__, f"sm_{arch}", f"fused t{bt} c{chunk} w{warps} s{stages}", "own", build_report(k), flush=True)
