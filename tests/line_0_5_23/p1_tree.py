"""Load 0.5.23's sm_120 decode dispatcher and `_kernel_num_heads` from a tree without the serving runtime.

The dispatcher module imports sglang.srt.environ (stdlib only, loaded from the tree) and
sglang.srt.utils (the whole runtime) for `is_hip`, which a CPU test answers False; the overlay
kernel modules (the mma backend's Triton kernel, and its Gluon kernel where the tree has it), are loaded by
path under their package names, since sglang/kernels/__init__.py imports every op group, which the slice a
GPU box gets (SLICE) does not hold.
"""
from __future__ import annotations

import ast
import os
import sys
import types
from contextlib import contextmanager
from pathlib import Path

from harness.scoped import scoped
from harness.upstream import import_from_tree, load_kernel, load_module, tree_package
from tests.line_0_5_23.indexer_tree import FILES as INDEXER_FILES

DISPATCHER = "sglang/kernels/ops/attention/flash_mla_sm120.py"
MMA = "sglang/kernels/ops/attention/flash_mla_sm120_mma.py"
GLUON = "sglang/kernels/ops/attention/flash_mla_sm120_mma_gluon.py"
PER_HEAD = "sglang/kernels/ops/attention/flash_mla_sm120_triton.py"
ENVIRON = "sglang/srt/environ.py"
MODEL = "sglang/srt/models/deepseek_v4.py"
SELECTOR = "SGLANG_SM120_FLASHMLA_BACKEND"
MMA_MODULE = "sglang.kernels.ops.attention.flash_mla_sm120_mma"
GLUON_MODULE = "sglang.kernels.ops.attention.flash_mla_sm120_mma_gluon"
PER_HEAD_MODULE = "sglang.kernels.ops.attention.flash_mla_sm120_triton"
DISPATCHER_MODULE = "sglang.kernels.ops.attention.flash_mla_sm120"
# The release's register_custom_op, which the MMA module registers its op with (harness.upstream.release_custom_op).
CUSTOM_OP = ("sglang/srt/utils/custom_op.py", "sglang/kernels/kernel_api_logging.py", "sglang/srt/utils/common.py")
# What dispatcher() reads, and field-check's indexer stage (indexer_tree.FILES): a GPU box gets these files alone
# (write_slice), not the whole tree.
SLICE = (DISPATCHER, PER_HEAD, MMA, GLUON, ENVIRON, *CUSTOM_OP,
         *(f for f in INDEXER_FILES if f not in (DISPATCHER, PER_HEAD, MMA, GLUON, ENVIRON, *CUSTOM_OP)))


def _env(name: str, value: str | None):
    """name=value while inside (None: name unset), then as it was."""
    return scoped(os.environ, {name: value})


def dispatcher(root: Path, backend: str | None) -> types.ModuleType:
    """The tree's flash_mla_sm120 module with SGLANG_SM120_FLASHMLA_BACKEND=backend read at import (None: the
    variable unset, the release's default)."""
    root = Path(root)
    with _env(SELECTOR, backend), tree_package(root, "sglang"):
        envs_mod = import_from_tree(root, "sglang.srt.environ")
        utils = types.ModuleType("sglang.srt.utils")
        utils.is_hip = lambda: False
        sys.modules["sglang.srt.environ"] = envs_mod
        sys.modules["sglang.srt.utils"] = utils
        if (root / MMA).is_file():
            sys.modules[MMA_MODULE] = load_kernel(root / MMA, tree=root)
        if (root / GLUON).is_file():     # it imports the Triton module (MMA_MODULE) by name
            sys.modules[GLUON_MODULE] = load_kernel(root / GLUON, tree=root)
        sys.modules[PER_HEAD_MODULE] = load_module(root / PER_HEAD)
        module = load_module(root / DISPATCHER)
        # The mma and triton branches import their kernels at call time: keep them reachable after the context
        # (a test puts them back into sys.modules around its calls, see with_kernels).
        module._test_mma = sys.modules.get(MMA_MODULE)
        module._test_gluon = sys.modules.get(GLUON_MODULE)
        module._test_per_head = sys.modules.get(PER_HEAD_MODULE)
    return module


@contextmanager
def with_kernels(module: types.ModuleType):
    """Around calls into a dispatcher(): its lazily imported kernel modules resolve to the tree's own."""
    kernels = {MMA_MODULE: module._test_mma, GLUON_MODULE: module._test_gluon, PER_HEAD_MODULE: module._test_per_head}
    with scoped(sys.modules, {name: mod for name, mod in kernels.items() if mod is not None}):
        yield


def write_slice(root: Path, out: Path) -> list[str]:
    """Copy SLICE (the files present) from the tree `root` to `out`, with SLICE.sha256 (sha256sum format): what
    a GPU box needs to run dispatcher() on this tree, a few hundred KB instead of two wheels."""
    import hashlib
    import shutil

    root, out = Path(root), Path(out)
    lines = []
    for rel in SLICE:
        if (root / rel).is_file():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, out / rel)
            lines.append(f"{hashlib.sha256((root / rel).read_bytes()).hexdigest()}  {rel}")
    (out / "SLICE.sha256").write_text("\n".join(lines) + "\n")
    return lines



def kernel_num_heads(root: Path, backend: str | None, routes=None):
    """MqaAttentionBase._kernel_num_heads of the tree's deepseek_v4.py, compiled alone, on a simulated sm_120.
    Where the tree's dispatcher has sm120_backend (the default's routing by rows), the function reads it from
    that dispatcher, loaded with `backend` (None: unset) and, given `routes`, SM120_DEFAULT_ROUTES set to them.

    Returns f(n_heads, n_local_heads, attn_tp_size, num_tokens) -> the head count the decode call gets.
    """
    path = Path(root) / MODEL
    tree = ast.parse(path.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MqaAttentionBase"]
    (fn,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_kernel_num_heads"]
    envs = import_from_tree(root, "sglang.srt.environ").envs
    max_tokens = dispatcher_constant(root, "SM120_DECODE_MAX_TOKENS")
    namespace = {
        "get_platform": lambda: types.SimpleNamespace(is_sm120=True),
        "SM120_DECODE_MAX_TOKENS": max_tokens,
        "envs": envs,
    }
    routing = None
    if "def sm120_backend(" in (Path(root) / DISPATCHER).read_text():
        routing = dispatcher(root, backend)
        if routes is not None:
            routing.SM120_DEFAULT_ROUTES = tuple(routes)
        namespace["sm120_backend"] = routing.sm120_backend
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
    method = namespace["_kernel_num_heads"]

    def call(n_heads, n_local_heads, attn_tp_size, num_tokens):
        layer = types.SimpleNamespace(n_heads=n_heads, n_local_heads=n_local_heads, attn_tp_size=attn_tp_size)
        with _env(SELECTOR, backend), _dispatcher_importable(routing):
            return method(layer, num_tokens)

    return call


@contextmanager
def _dispatcher_importable(module: types.ModuleType | None):
    """While inside, `from sglang.kernels.ops.attention.flash_mla_sm120 import ...` (what _kernel_num_heads does
    for the flashinfer backend) finds `module`, its parent packages bare; nothing done without one (a tree
    without the routing)."""
    if module is None:
        yield
        return
    names = ["sglang", "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.attention"]
    parents = {name: sys.modules.get(name) or types.ModuleType(name) for name in names}
    with scoped(sys.modules, {**parents, DISPATCHER_MODULE: module}):
        yield


def dispatcher_constant(root: Path, name: str):
    tree = ast.parse((Path(root) / DISPATCHER).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise KeyError(f"{DISPATCHER}: expected a module-level {name}, found none")


if __name__ == "__main__":   # python -m tests.line_0_5_23.p1_tree slice TREE OUT
    assert sys.argv[1:2] == ["slice"] and len(sys.argv) == 4, "usage: python -m tests.line_0_5_23.p1_tree slice TREE OUT"
    print("\n".join(write_slice(Path(sys.argv[2]), Path(sys.argv[3]))))
