"""P1's and P3's torch ops register the way each release registers its own kernels: SGLang's
`register_custom_op` (sglang/srt/utils/custom_op.py, in both 0.5.14 and 0.5.23), as a decorator with an
`op_name` in the release's `sglang` namespace, `mutates_args` and a `fake_impl`; nothing shipped (overlay
files, lines the patches add) calls `torch.library` itself.

The static rule reads the shipped files. The per-line checks load each line's overlay kernels with that
line's pinned wheel's own custom_op.py (harness.upstream.load_kernel), each line in a fresh interpreter (an
op name is registered once per process, by whichever module registers it first, as upstream's
direct_register_custom_op does):
- the op is `torch.ops.sglang.<op_name>`, with a CUDA kernel (the key upstream registers on a CUDA machine)
  and the schema of the decorated function; the module's entry is what the line's helper returns (0.5.14:
  the op itself, every call through the dispatcher; 0.5.23: `_call_directly_in_eager`'s wrapper);
- its fake implementation (what torch.compile traces) gives the real call's shapes and dtypes
  (FakeTensorMode; P3 also torch.library.opcheck's schema and fake-tensor tests);
- an eager call of the public entry gives, bit for bit, what calling the kernel function directly gives.
On this CPU machine that call reaches the function through the dispatcher: the CPU kernel the harness adds
under TRITON_INTERPRET=1 re-dispatches to the CUDA kernel upstream registered. 0.5.23's direct call in
eager (`_call_directly_in_eager`, for CUDA tensors only) is the GPU-only part: tests/gpu cover it.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.lockfile import lock_lines
from tests.conftest import REPO

LINES = lock_lines(REPO / "pin.lock")
# The set's modules that register torch ops, by file name (their place differs per line).
KERNELS = {"flash_mla_sm120_mma.py": "sm120_mma_sparse_decode", "mhc_pre_triton.py": "mhc_pre_mixes",
           "flash_mla_sm120_mma_gluon.py": "sm120_mma_gluon_sparse_decode"}
RAW = re.compile(r"torch\.library|from\s+torch\s+import\s+library|\w+::\w+")


def overlay_files(line: str) -> list[Path]:
    return sorted((REPO / "overlay" / line).rglob("*.py"))


def added_lines(line: str) -> list[tuple[str, int, str]]:
    """(patch, line number, text) of every line the line's patches add."""
    found = []
    for patch in sorted((REPO / "patches" / line).glob("*/*.patch")):
        for number, text in enumerate(patch.read_text().splitlines(), 1):
            if text.startswith("+") and not text.startswith("+++"):
                found.append((str(patch.relative_to(REPO)), number, text[1:]))
    return found


def _torch_library_uses(tree: ast.Module) -> list[int]:
    """Lines that reach torch.library: the attribute, or an import of it."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "library" and isinstance(node.value, ast.Name) \
                and node.value.id == "torch":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.library"):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "torch" and any(a.name == "library" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name.startswith("torch.library") for a in node.names):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("line", LINES)
def test_nothing_shipped_registers_through_torch_library(line):
    found = []
    for path in overlay_files(line):
        text = path.read_text()
        found += [f"{path.relative_to(REPO)}:{n}" for n in _torch_library_uses(ast.parse(text))]
        found += [f"{path.relative_to(REPO)}:{n}" for n, t in enumerate(text.splitlines(), 1)
                  if re.search(r"\bsglang_sm120\b", t)]
    found += [f"{p}:{n}" for p, n, t in added_lines(line) if RAW.search(t) and "torch.ops." not in t]
    found = sorted(set(found), key=lambda s: (s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])))
    assert not found, f"expected every op registered through sglang's register_custom_op, found torch.library " \
                      f"or an own op namespace at {', '.join(found)}"


def _registrations(tree: ast.Module) -> list[dict]:
    """Every top-level function decorated with register_custom_op(...): its keywords (literal where they are)."""
    regs = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "register_custom_op":
                kw = {k.arg: k.value for k in dec.keywords}
                regs.append({"function": node.name, "keywords": kw})
    return regs


def shipped(line: str) -> list[str]:
    """The op-registering kernels a line ships (0.5.23 retired P3's mhc_pre_triton.py in patch set 0.1.10)."""
    return [k for k in sorted(KERNELS) if any(p.name == k for p in overlay_files(line))]


def test_each_line_ships_the_kernels_its_series_carries():
    # 0.5.23: one kernel per file, the Gluon kernel its own module and op (sglang 0003)
    assert shipped("0.5.14") == ["flash_mla_sm120_mma.py", "mhc_pre_triton.py"]
    assert shipped("0.5.23") == ["flash_mla_sm120_mma.py", "flash_mla_sm120_mma_gluon.py"]


@pytest.mark.parametrize("line, kernel", [(line, k) for line in LINES for k in shipped(line)])
def test_the_kernels_register_with_the_releases_helper(line, kernel):
    (path,) = [p for p in overlay_files(line) if p.name == kernel]
    tree = ast.parse(path.read_text())
    imports = {(n.module, a.name) for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("sglang.srt.utils.custom_op", "register_custom_op") in imports, \
        f"{path.relative_to(REPO)}: expected `from sglang.srt.utils.custom_op import register_custom_op`"
    regs = _registrations(tree)
    assert len(regs) == 1, f"{path.relative_to(REPO)}: expected one @register_custom_op(...) function, found {regs}"
    kw = regs[0]["keywords"]
    assert set(kw) == {"op_name", "mutates_args", "fake_impl"}, sorted(kw)
    assert ast.literal_eval(kw["op_name"]) == KERNELS[kernel]
    assert ast.literal_eval(kw["mutates_args"]) == []
    fakes = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert isinstance(kw["fake_impl"], ast.Name) and kw["fake_impl"].id in fakes


# ------------------------------------------------------------------------ per line, in a fresh interpreter
@pytest.mark.parametrize("line", LINES)
def test_each_lines_ops_register_fake_and_run_through_its_own_helper(line):
    proc = subprocess.run([sys.executable, "-m", __name__, line], capture_output=True, text=True, timeout=600,
                          cwd=REPO, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["helper"].endswith(".whl/sglang/srt/utils/custom_op.py")
    assert f"sglang-{line}-" in facts["helper"]


def _line_main(line: str) -> None:
    """Subprocess body: the line's two kernel modules loaded with its wheel's register_custom_op."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from harness.mma_backend import TRITON_MODULE
    from harness.scoped import scoped
    from harness.upstream import load_kernel, release_custom_op
    from serving.mma_decode_cases import make_case

    files = {p.name: p for p in overlay_files(line)}
    mma = load_kernel(files["flash_mla_sm120_mma.py"], "mma_under_test")
    gluon = None
    if "flash_mla_sm120_mma_gluon.py" in files:     # it imports the Triton module by its package name
        with scoped(sys.modules, {TRITON_MODULE: mma}):
            gluon = load_kernel(files["flash_mla_sm120_mma_gluon.py"], "gluon_under_test")
    mhc = load_kernel(files["mhc_pre_triton.py"], "mhc_under_test") if "mhc_pre_triton.py" in files else None
    with release_custom_op(line=line) as helper:
        pass
    assert mma.register_custom_op is helper.register_custom_op
    assert mhc is None or mhc.register_custom_op is helper.register_custom_op
    assert gluon is None or gluon.register_custom_op is helper.register_custom_op
    eager_direct = hasattr(helper, "_call_directly_in_eager")     # 0.5.23's helper has it, 0.5.14's not
    assert eager_direct == (line != "0.5.14"), f"{line}: _call_directly_in_eager in its custom_op.py: {eager_direct}"

    schemas = {
        "sm120_mma_sparse_decode": "sglang::sm120_mma_sparse_decode(Tensor q, Tensor k_cache, Tensor indices, "
        "Tensor? topk_length, Tensor? attn_sink, float softmax_scale, Tensor? extra_k_cache, "
        "Tensor? extra_indices, Tensor? extra_topk_length) -> (Tensor, Tensor)",
        "mhc_pre_mixes": "sglang::mhc_pre_mixes(Tensor x_flat, Tensor hc_fn, float eps) -> Tensor",
        "sm120_mma_gluon_sparse_decode": "sglang::sm120_mma_gluon_sparse_decode(Tensor q, Tensor k_cache, "
        "Tensor indices, Tensor? topk_length, Tensor? attn_sink, float softmax_scale, Tensor? extra_k_cache, "
        "Tensor? extra_indices, Tensor? extra_topk_length) -> (Tensor, Tensor)",
    }
    entries = {"sm120_mma_sparse_decode": mma._mma_sparse_decode_op}
    if gluon is not None:
        entries["sm120_mma_gluon_sparse_decode"] = gluon._gluon_sparse_decode_op
    if mhc is not None:
        entries["mhc_pre_mixes"] = getattr(mhc, "mhc_pre_mixes_op", mhc.mhc_pre_mixes)
    for name, schema in ((n, schemas[n]) for n in entries):
        op = getattr(torch.ops.sglang, name)
        assert str(op.default._schema) == schema, str(op.default._schema)
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"sglang::{name}", "CUDA")
        entry = entries[name]
        if eager_direct:   # the decorated function: called directly in eager on CUDA tensors, else the op
            assert entry.__code__.co_qualname == "_call_directly_in_eager.<locals>.call", entry.__code__.co_qualname
            assert entry.__wrapped__.__module__ in ("mma_under_test", "mhc_under_test", "gluon_under_test")
        else:              # the op itself
            assert entry is op, entry

    # P1: fake shapes and dtypes; the eager entry against the kernel function called directly.
    case = make_case(3, 16, 64, extra_topk=64, seed=5)
    kw = case.kwargs()
    out, lse = mma.flash_mla_sparse_decode_mma(**kw)
    direct = mma.mma_sparse_decode(kw["q"], kw["k_cache"], kw["indices"], kw["topk_length"], kw["attn_sink"],
                                   kw["softmax_scale"], kw["extra_k_cache"], kw["extra_indices"],
                                   kw["extra_topk_length"])
    assert torch.equal(out, direct[0]) and torch.equal(lse, direct[1])
    assert (out.shape, out.dtype, lse.shape, lse.dtype) == ((3, 1, 16, 512), torch.bfloat16, (3, 16, 1), torch.float32)
    # (torch.library.opcheck cannot be used here: it clones the strided page view, losing the pool behind it.)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        f_out, f_lse = mma.flash_mla_sparse_decode_mma(**fake)
    assert (f_out.shape, f_out.dtype, f_lse.shape, f_lse.dtype) == (out.shape, out.dtype, lse.shape, lse.dtype)
    if gluon is not None:   # the Gluon kernel runs on a GPU only (no interpreter): its fake implementation here
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
            g_out, g_lse = gluon.flash_mla_sparse_decode_mma_gluon(**fake)
        assert (g_out.shape, g_out.dtype, g_lse.shape, g_lse.dtype) == (out.shape, out.dtype, lse.shape, lse.dtype)

    # P3: the same, and opcheck's schema and fake-tensor tests (they run the op on these CPU tensors too).
    if mhc is None:
        print(json.dumps({"helper": helper.__file__}))
        return
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 512, generator=gen).to(torch.bfloat16)
    w = torch.randn(24, 512, generator=gen) * 0.05
    want = mhc.mhc_pre_mixes_triton(x, w, 1e-6)
    assert torch.equal(mhc.mhc_pre_mixes(x, w, 1e-6), want)
    assert torch.equal(torch.ops.sglang.mhc_pre_mixes(x, w, 1e-6), want)
    with FakeTensorMode() as mode:
        got = torch.ops.sglang.mhc_pre_mixes(mode.from_tensor(x), mode.from_tensor(w), 1e-6)
    assert (got.shape, got.dtype) == (want.shape, want.dtype) == ((5, 1, 24), torch.float32)
    torch.library.opcheck(torch.ops.sglang.mhc_pre_mixes.default, (x, w, 1e-6),
                          test_utils=("test_schema", "test_faketensor"))
    print(json.dumps({"helper": helper.__file__}))


if __name__ == "__main__":
    _line_main(sys.argv[1])
