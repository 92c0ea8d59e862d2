"""Dump a codegen fingerprint of every Gluon build (shipped kernel + WS experiment): PTX sha (debug lines
stripped), SASS sha, regs/spills/shared. argv: out.json [kernel file]"""
import hashlib, json, re, sys, os
from pathlib import Path
CHECKOUT = Path(__file__).resolve().parents[3]  # the checkout, named relative to this record
sys.path.insert(0, str(CHECKOUT))
import triton
from harness.aot import DIV16, MAIN_SIGNATURE, compile_kernel, ptxas_report
from harness.upstream import load_module
from bench.experiments.count_instructions import sass
from tests.test_mma_aot import gluon_constexprs, CACHE_VARIANTS

def strip_ptx(p):
    out = []
    for l in p.splitlines():
        s = l.strip()
        if s.startswith(".loc") or s.startswith(".file") or s.startswith("//"):
            continue
        out.append(l)
    txt = "\n".join(out)
    return re.sub(r"\.section\s+\.debug.*", "", txt, flags=re.S)

def fp(k, arch):
    ptx = k.asm["ptx"]
    s = sass(k.asm["cubin"])
    s = "\n".join(l for l in s.splitlines() if not l.strip().startswith("//") and ".loc" not in l)
    try:
        rep = ptxas_report(ptx, arch)
    except Exception as e:
        rep = {"ptxas_error": str(e)[:200]}
    return {"ptx": hashlib.sha256(strip_ptx(ptx).encode()).hexdigest()[:16],
            "sass": hashlib.sha256(s.encode()).hexdigest()[:16], "shared": k.metadata.shared, **rep}

mod = load_module((CHECKOUT / "overlay/0.5.23/sglang/kernels/ops/attention/flash_mla_sm120_mma.py"), "kmod")
rows = {}
which = os.environ.get("WHICH", "gluon,ws").split(",")
for arch in (120, 90):
    if "gluon" in which:
        for name, cfg in mod.GLUON_CONFIGS.items():
            launch = cfg["launch"]
            for split in (False, True):
                for suffix, over in CACHE_VARIANTS.items():
                    key = f"{arch}/gluon/{name}/split={split}{suffix}"
                    try:
                        k = compile_kernel(mod._gluon_sparse_decode_kernel, MAIN_SIGNATURE,
                                           {**gluon_constexprs(launch, split), **over}, DIV16, launch[2], 1, arch)
                        rows[key] = fp(k, arch)
                    except Exception as e:
                        rows[key] = {"error": f"{type(e).__name__}: {str(e)[-300:]}"}
                    print(key, rows[key], flush=True)
    if "ws" in which:
        from bench.experiments.gluon_ws_decode import WS_CONFIGS, _gluon_ws_decode_kernel, ws_constexprs
        for name in WS_CONFIGS:
            for split in (False, True):
                for suffix, over in CACHE_VARIANTS.items():
                    key = f"{arch}/ws/{name}/split={split}{suffix}"
                    try:
                        k = compile_kernel(_gluon_ws_decode_kernel, MAIN_SIGNATURE, ws_constexprs(name, split, **over),
                                           DIV16, 4, 1, arch)
                        rows[key] = fp(k, arch)
                    except Exception as e:
                        rows[key] = {"error": f"{type(e).__name__}: {str(e)[-300:]}"}
                    print(key, rows[key], flush=True)
json.dump({"triton": triton.__version__, "rows": rows}, open(sys.argv[1], "w"), indent=1)
