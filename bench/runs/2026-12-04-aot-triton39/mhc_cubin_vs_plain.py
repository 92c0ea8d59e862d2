import sys
from pathlib import Path
CHECKOUT = Path(__file__).resolve().parents[3]  # the checkout, named relative to this record
sys.path.insert(0, str(CHECKOUT))
import triton
from harness.aot import *
from harness.upstream import load_module
from tests.test_p3p4_aot import PARTIALS_SIGNATURE, MHC_DIV16, overlay_file
mhc = load_module(overlay_file("0.5.23", "mhc_pre_triton.py"), "m")
for arch in (120, 90):
    for bt in (16, 32):
        tiles = dict(BLOCK_T=bt, BLOCK_N=mhc.BLOCK_N, BLOCK_K=mhc.BLOCK_K)
        k = compile_kernel(mhc._mhc_pre_partials, PARTIALS_SIGNATURE, {**tiles, "PDL": mhc.GRAPH_PDL}, MHC_DIV16, 4, 3, arch)
        print(triton.__version__, arch, bt, "build:", build_report(k), "plain ptxas:", ptxas_report(k.asm["ptx"], arch),
              [l.strip() for l in k.asm["ptx"].splitlines() if "maxnreg" in l or "reqntid" in l or "minnctapersm" in l], flush=True)
