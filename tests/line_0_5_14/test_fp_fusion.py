"""Every Triton / Gluon kernel the set ships states its FP fusion choice at launch (`enable_fp_fusion=`), so
Triton's default (on up to 3.9; 3.9 warns at every compile that TRITON_DEFAULT_FP_FUSION turns it off in 3.10)
never decides the kernels' numerics.

Two checks: every launch in every overlay file that defines a kernel passes the module's ENABLE_FP_FUSION
(read from the source, so the Gluon launch the CPU cannot run is covered too, and a new kernel file is found by
itself); and the launches the CPU can reach (Triton's interpreter) receive that very value at run time, and the
other one when the module's switch is flipped (what the benches' `--fp-fusion both` does).
"""
from __future__ import annotations

import ast
import os

os.environ["TRITON_INTERPRET"] = "1"   # before anything imports triton: launches go through the interpreter

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from harness import dsv4_indexer_cases as C  # noqa: E402
from harness.upstream import load_kernel, load_module  # noqa: E402
from serving.mma_decode_cases import make_case  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SWITCH = "ENABLE_FP_FUSION"


def kernel_files() -> list[Path]:
    return sorted(p for p in (REPO / "overlay").rglob("*.py")
                  if "@triton.jit" in p.read_text() or "@gluon.jit" in p.read_text())


def jit_names(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
            and any(ast.unparse(d) in ("triton.jit", "gluon.jit") for d in n.decorator_list)}


def launches(tree: ast.Module) -> list[ast.Call]:
    """`kernel[grid](...)` calls of the module's own kernels."""
    names = jit_names(tree)
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
            and isinstance(n.func.value, ast.Name) and n.func.value.id in names]


def test_the_kernel_files_are_the_ones_shipped():
    found = {p.name for p in kernel_files()}
    # 0.5.23 keeps P1's Gluon kernel in a module of its own (flash_mla_sm120_mma_gluon.py)
    assert found == {"flash_mla_sm120_mma.py", "flash_mla_sm120_mma_gluon.py", "mhc_pre_triton.py",
                     "paged_mqa_logits_triton.py"}, found


def switch_of(path: Path, tree: ast.Module) -> list:
    """The module's ENABLE_FP_FUSION: its own `ENABLE_FP_FUSION = True|False`, or, for a kernel module that shares
    its sibling's choice (0.5.23's Gluon module and the Triton module it builds on), the assignment in the sibling
    it imports the name from."""
    own = [n for n in tree.body if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == [SWITCH]]
    if own:
        return own
    for n in tree.body:
        if isinstance(n, ast.ImportFrom) and any(a.name == SWITCH and a.asname is None for a in n.names):
            sibling = path.with_name(n.module.rsplit(".", 1)[-1] + ".py")
            if sibling.is_file() and sibling != path:
                return switch_of(sibling, ast.parse(sibling.read_text()))
    return []


@pytest.mark.parametrize("path", kernel_files(), ids=lambda p: str(p.relative_to(REPO / "overlay")))
def test_every_launch_states_the_modules_fp_fusion_choice(path):
    tree = ast.parse(path.read_text())
    switch = switch_of(path, tree)
    assert len(switch) == 1 and isinstance(switch[0].value, ast.Constant) and isinstance(switch[0].value.value, bool), \
        f"{path.name}: expected one module-level `{SWITCH} = True|False`, found {len(switch)}"
    calls = launches(tree)
    assert calls, f"{path.name}: expected kernel launches, found none"
    for call in calls:
        given = {kw.arg: ast.unparse(kw.value) for kw in call.keywords if kw.arg}
        assert given.get("enable_fp_fusion") == SWITCH, (
            f"{path.name}:{call.lineno}: expected {ast.unparse(call.func)}(..., enable_fp_fusion={SWITCH}), "
            f"found enable_fp_fusion={given.get('enable_fp_fusion')}")


class Launches:
    """Records the keyword arguments of every launch of the module's kernels (the launch itself is skipped:
    only what reaches Triton matters here)."""

    def __init__(self, module, monkeypatch):
        self.seen = []
        for name in jit_names(ast.parse(Path(module.__file__).read_text())):
            kernel = getattr(module, name)
            monkeypatch.setattr(kernel, "run", lambda *a, _name=name, **kw: self.seen.append((_name, kw)))

    def fusion(self) -> dict:
        return {name: kw.get("enable_fp_fusion", "not passed") for name, kw in self.seen}


def mma_calls(module):
    case = make_case(3, 16, 64, extra_topk=64)
    kw = case.kwargs()
    args = [kw[k] for k in ("q", "k_cache", "indices", "topk_length", "attn_sink", "softmax_scale",
                            "extra_k_cache", "extra_indices", "extra_topk_length")]
    module.mma_sparse_decode(*args)
    module.mma_sparse_decode(*args, num_splits=3)     # the split path: decode, then the combine kernel


def mhc_calls(module):
    x = torch.randn(3, C.HC_MULT * C.HIDDEN).to(torch.bfloat16)
    hc_fn = torch.randn(C.MIX_HC, C.HC_DIM)
    for route in ("graph", "one-launch"):
        module.mhc_pre_mixes_triton(x, hc_fn, C.RMS_EPS, route=route, programs_per_sm=24)


def indexer_calls(module):
    gen = torch.Generator().manual_seed(4)
    cache = C.make_indexer_cache(8, gen)
    q_fp8, weight = C.make_indexer_query(2, gen)
    page_table = torch.arange(8, dtype=torch.int32).view(2, 4)
    module._device_info = lambda device: (3, 9)
    module.fp8_paged_mqa_logits_triton(q_fp8, cache, weight, torch.tensor([[5], [200]], dtype=torch.int32),
                                       page_table, 4 * C.PAGE)


RUNTIME = [
    ("0.5.14/sglang/srt/layers/attention/flash_mla_sm120_mma.py", mma_calls,
     {"_mma_sparse_decode_kernel", "_combine_splits_kernel"}),
    ("0.5.14/sglang/srt/layers/mhc_pre_triton.py", mhc_calls, {"_mhc_pre_partials", "_mhc_pre_finish", "_mhc_pre_fused"}),
    ("0.5.14/sglang/srt/layers/attention/dsv4/paged_mqa_logits_triton.py", indexer_calls, {"_paged_mqa_logits_kernel"}),
]


@pytest.mark.parametrize("path, calls, kernels", RUNTIME, ids=[r[0] for r in RUNTIME])
def test_the_choice_reaches_every_launch_and_the_switch_flips_it(path, calls, kernels, monkeypatch):
    file = REPO / "overlay" / path
    name = f"fp_fusion_{file.stem}_{path.split('/')[0].replace('.', '_')}"
    module = load_module(file, name) if "paged_mqa" in path else load_kernel(file, name)
    seen = Launches(module, monkeypatch)
    calls(module)
    assert {k for k, _ in seen.seen} == kernels
    assert set(seen.fusion().values()) == {module.ENABLE_FP_FUSION}, seen.fusion()
    seen.seen.clear()
    monkeypatch.setattr(module, "ENABLE_FP_FUSION", not module.ENABLE_FP_FUSION)
    calls(module)
    assert set(seen.fusion().values()) == {module.ENABLE_FP_FUSION}, seen.fusion()


AOT_PROBE = '''
import json, sys
from harness.aot import compile_kernel
from harness.upstream import load_module
mod = load_module(sys.argv[1], "fusion_probe")
k = compile_kernel(mod._axpy, dict(x_ptr="*fp32", y_ptr="*fp32", a="fp32"), dict(BLOCK=128), [], 4, 1, 90)
print(json.dumps({"enable_fp_fusion": k.metadata.enable_fp_fusion, "fma": "fma.rn.f32" in k.asm["ptx"]}))
'''


@pytest.mark.parametrize("choice", [False, True])
def test_the_aot_gate_compiles_with_the_choice_the_module_states(choice, tmp_path):
    """harness.aot.compile_kernel (every gate's compile) builds a kernel with its module's ENABLE_FP_FUSION, as the
    launches pass it: off, a * x + y stays a multiply and an add in the PTX."""
    import json
    import subprocess
    import sys

    src = tmp_path / "axpy.py"
    src.write_text(f"import triton\nimport triton.language as tl\n\nENABLE_FP_FUSION = {choice}\n\n\n@triton.jit\n"
                   "def _axpy(x_ptr, y_ptr, a, BLOCK: tl.constexpr):\n    o = tl.arange(0, BLOCK)\n"
                   "    tl.store(y_ptr + o, a * tl.load(x_ptr + o) + tl.load(y_ptr + o))\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", AOT_PROBE, str(src)], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"enable_fp_fusion": choice, "fma": choice}
