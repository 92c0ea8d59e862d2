import sys, subprocess, tempfile
from pathlib import Path
CHECKOUT = Path(__file__).resolve().parents[3]  # the checkout, named relative to this record
sys.path.insert(0, str(CHECKOUT))
import triton
from harness.aot import *
from harness.upstream import load_module
from tests.test_mma_aot import gluon_constexprs
mod = load_module((CHECKOUT / "overlay/0.5.23/sglang/kernels/ops/attention/flash_mla_sm120_mma.py"), "k")
bin_ = Path(triton.__file__).parent / "backends/nvidia/bin"
launch = mod.GLUON_CONFIGS["g32s2"]["launch"]
for split in (False, True):
    k = compile_kernel(mod._gluon_sparse_decode_kernel, MAIN_SIGNATURE, {**gluon_constexprs(launch, split), "HAS_EXTRA": False, "HAS_EXTRA_LEN": False}, DIV16, 4, 1, 90)
    ptx = k.asm["ptx"]
    print([l for l in ptx.splitlines() if ".maxnreg" in l or ".reqntid" in l or "minnctapersm" in l or ".maxntid" in l])
    with tempfile.TemporaryDirectory() as d:
        c = Path(d) / "k.cubin"; c.write_bytes(k.asm["cubin"])
        ru = subprocess.run([str(bin_ / "cuobjdump"), "-res-usage", str(c)], capture_output=True, text=True).stdout
        p = Path(d) / "k.ptx"; p.write_text(ptx)
        for extra in ([], ["--regAllocOptLevel=2"]):
            r = subprocess.run([str(release_ptxas(90)), "-arch=sm_90a", "-v", *extra, str(p), "-o", str(Path(d) / "x.cubin")], capture_output=True, text=True).stderr
            print(extra, [l for l in r.splitlines() if "spill" in l or "Used" in l])
    ru = [l.strip() for l in ru.splitlines() if "REG" in l]
    print(triton.__version__, "g32s2 sm90 one-cache split", split, "gate:", ptxas_report(ptx, 90), "cubin:", ru, flush=True)
