import sys, subprocess, tempfile
from pathlib import Path
CHECKOUT = Path(__file__).resolve().parents[3]  # the checkout, named relative to this record
sys.path.insert(0, str(CHECKOUT))
import triton
from harness.aot import *
from harness.upstream import load_module
mod = load_module((CHECKOUT / "overlay/0.5.23/sglang/kernels/ops/attention/flash_mla_sm120_mma.py"), "k")
bin_ = Path(triton.__file__).parent / "backends/nvidia/bin"
for name, arch, split in [("h16_t64_w8", 90, False), ("h16_t64_w8", 90, True), ("h32_t32_w8", 120, False), ("h16_t64_w8", 120, False)]:
    bh, bt, w, st = mod.MMA_CONFIGS[name]["launch"]
    k = compile_kernel(mod._mma_sparse_decode_kernel, MAIN_SIGNATURE, decode_constexprs(bh, bt, split), DIV16, w, st, arch)
    with tempfile.TemporaryDirectory() as d:
        c = Path(d) / "k.cubin"; c.write_bytes(k.asm["cubin"])
        ru = subprocess.run([str(bin_ / "cuobjdump"), "-res-usage", str(c)], capture_output=True, text=True).stdout
    ru = [l.strip() for l in ru.splitlines() if "REG" in l]
    print(triton.__version__, name, arch, split, "gate:", ptxas_report(k.asm["ptx"], arch), "cubin:", ru, flush=True)
