"""The DSv4 indexer and MHC-pre functions out of a real upstream tree, inputs for them, and probes.

Shared by tests/line_0_5_14/test_indexer_bf16.py, test_indexer_len_bound.py, test_mhc_bf16.py,
tests/gpu/test_indexer_gpu.py, tests/gpu/test_mhc_gpu.py and bench/kernels/bench_indexer.py, bench/kernels/bench_mhc_pre.py,
bench/experiments/mhc_graph_sweep.py.

`indexer.py` and `deepseek_v4.py` import the whole SGLang runtime, so the pure functions are
compiled out of the file of the tree under test (pristine or patched) with only what they reference.

Indexer cache layout (DeepSeekV4IndexerPool): a page holds 64 c4 positions, 64x128 fp8-e4m3 values
then 64 fp32 scales (8448 bytes); the caller passes a [pages, 64, 1, 132] uint8 view.
"""
from __future__ import annotations

import ast
import math
import sys
import types
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from harness.scoped import scoped
from harness.upstream import import_from_tree, load_kernel, load_module, top_level_defs

INDEXER = "sglang/srt/layers/attention/dsv4/indexer.py"
TRITON_INDEXER = "sglang/srt/layers/attention/dsv4/paged_mqa_logits_triton.py"
MODEL = "sglang/srt/models/deepseek_v4.py"
MHC_PRE_TRITON = "sglang/srt/layers/mhc_pre_triton.py"            # 0.5.14 (beside its srt/layers/mhc.py)
MHC_PRE_TRITON_OPS = "sglang/kernels/ops/layernorm/mhc_pre_triton.py"   # 0.5.23 up to patch set 0.1.9 (P3 retired there since)
ENVIRON = "sglang.srt.environ"

PAGE, HEAD_DIM, N_HEADS = 64, 128, 64
PAGE_BYTES = PAGE * (HEAD_DIM + 4)
FP8_MAX = 448.0

# DSv4-Flash MHC shapes (configs/deepseek_v4.py): hidden 4096, hc_mult 4 -> mix_hc 24, K 16384.
HIDDEN, HC_MULT, RMS_EPS = 4096, 4, 1e-6
MIX_HC, HC_DIM = (2 + HC_MULT) * HC_MULT, HC_MULT * HIDDEN


# --------------------------------------------------------------------------- upstream functions

def _with_local_helpers(defs: dict[str, ast.stmt], name: str) -> list[ast.stmt]:
    """`name` plus the module-level functions of the same file it calls (transitively)."""
    picked, todo = {}, [name]
    while todo:
        n = todo.pop()
        if n in picked:
            continue
        if n not in defs:
            raise KeyError(f"definition not found: {n}")
        picked[n] = defs[n]
        used = {x.id for x in ast.walk(defs[n]) if isinstance(x, ast.Name)}
        todo += [u for u in used if u in defs and isinstance(defs[u], ast.FunctionDef)]
    return [node for node in defs.values() if node in picked.values()]


def tree_envs(root: Path):
    """The tree's own `sglang.srt.environ.envs` registry (the patches register their switches there)."""
    return import_from_tree(root, ENVIRON).envs


def indexer_function(root: Path, name: str = "fp8_paged_mqa_logits_torch_sm120"):
    """`name` from root's indexer.py, with its local helpers and, when the tree has it, the overlay kernel.

    Load under TRITON_INTERPRET=1 to run the Triton path on a CPU.
    """
    path = Path(root) / INDEXER
    namespace: dict[str, Any] = {
        "torch": torch, "F": F, "Any": Any, "os": __import__("os"), "FP8_DTYPE": torch.float8_e4m3fn,
        "_arange_cache": {}, "envs": tree_envs(root),
    }
    kernel_file = Path(root) / TRITON_INDEXER
    if kernel_file.is_file():
        namespace["fp8_paged_mqa_logits_triton"] = load_module(kernel_file).fp8_paged_mqa_logits_triton
    tree = ast.parse(path.read_text())
    module = ast.Module(body=_with_local_helpers(top_level_defs(tree), name), type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)
    return namespace[name]


def mhc_pre_file(root: Path) -> Path:
    """The tree's fused MHC-pre kernel file, where its line keeps it (the 0.5.14 path if the tree has none)."""
    ops = Path(root) / MHC_PRE_TRITON_OPS
    return ops if ops.is_file() else Path(root) / MHC_PRE_TRITON


def hc_pre_torch_impl(root: Path, rms_norm_eps: float = RMS_EPS, sm120: bool = True):
    """The nested `hc_pre_torch_impl` of DeepseekV4DecoderLayer.hc_pre, compiled on its own.

    Its decorator (`compile_in_capture_mode`) is a pass-through outside CUDA-graph capture, so it is
    dropped; the free variable `self` becomes a global holding the one attribute it reads. Module-level
    flags it reads are evaluated from the file; the fused kernel comes from the tree's overlay file.
    sm120: what the file's device probe (0.5.14 `is_sm120_supported()`, 0.5.23 `get_platform().is_sm120`)
    answers. True by default: the harness runs the sm_120 code the patches target on whatever machine runs
    it (the H200 benches and GPU tests stand in for sm_120, as the GPU box's emulation does); False: the
    code every other device runs.
    """
    path = Path(root) / MODEL
    tree = ast.parse(path.read_text())
    # 0.5.14 defines hc_pre on DeepseekV4DecoderLayer; 0.5.23 on its base, DeepseekV4DecoderLayerBase.
    method = next(m for n in tree.body if isinstance(n, ast.ClassDef)
                  and n.name in ("DeepseekV4DecoderLayer", "DeepseekV4DecoderLayerBase")
                  for m in n.body if isinstance(m, ast.FunctionDef) and m.name == "hc_pre")
    inner = next(n for n in method.body if isinstance(n, ast.FunctionDef) and n.name == "hc_pre_torch_impl")
    inner.decorator_list = []
    used = {x.id for x in ast.walk(inner) if isinstance(x, ast.Name)}
    defs = top_level_defs(tree)
    flags = [n for name, n in defs.items() if name in used and isinstance(n, ast.Assign)]
    # the module-level functions those flags call (0.5.14's device check), with their own helpers
    called = {x.id for f in flags for x in ast.walk(f) if isinstance(x, ast.Name)}
    helpers = [n for n in defs.values() if isinstance(n, ast.FunctionDef)
               and any(n is h for c in called if isinstance(defs.get(c), ast.FunctionDef)
                       for h in _with_local_helpers(defs, c))]
    probe = lambda: sm120  # noqa: E731
    namespace = {"torch": torch, "F": F, "os": __import__("os"), "envs": tree_envs(root),
                 "self": types.SimpleNamespace(rms_norm_eps=rms_norm_eps),
                 "is_sm120_supported": probe, "get_platform": lambda: types.SimpleNamespace(is_sm120=sm120)}
    kernel_file = mhc_pre_file(root)
    if kernel_file.is_file():
        namespace["mhc_pre_mixes"] = load_kernel(kernel_file).mhc_pre_mixes
    # A helper that imports the device check where it runs (`from sglang.srt.utils.common import
    # is_sm120_supported`) gets the same answer: that module alone, only while the flags are evaluated.
    common = types.ModuleType("sglang.srt.utils.common")
    common.is_sm120_supported = probe
    with scoped(sys.modules, {common.__name__: common}):
        exec(compile(ast.Module(body=helpers + flags + [inner], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["hc_pre_torch_impl"]


def mhc_pre_kernel(root: Path):
    """The fused MHC-pre custom op from the tree's overlay file."""
    return load_kernel(mhc_pre_file(root)).mhc_pre_mixes


# --------------------------------------------------------------------------- indexer inputs

def quantize_fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row absmax FP8 e4m3 quantisation, as the DSv4 writers do: (fp8 values, fp32 scale)."""
    scale = x.abs().amax(-1, keepdim=True).clamp(min=1e-4) / FP8_MAX
    return (x / scale).to(torch.float8_e4m3fn), scale.squeeze(-1).float()


def make_indexer_cache(num_pages: int, gen: torch.Generator, device="cpu") -> torch.Tensor:
    """A [num_pages, 64, 1, 132] uint8 cache: Hadamard-rotated keys (~N(0,1)) quantised per position."""
    keys = torch.randn(num_pages * PAGE, HEAD_DIM, generator=gen, device=device)
    values, scales = quantize_fp8_rows(keys)
    values = values.view(torch.uint8).view(num_pages, PAGE * HEAD_DIM)
    scales = scales.view(num_pages, PAGE).view(torch.uint8)
    return torch.cat([values, scales], dim=1).view(num_pages, PAGE, 1, HEAD_DIM + 4)


def make_indexer_query(batch: int, gen: torch.Generator, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """q_fp8 [B, 1, 64, 128] and head weights [B, 64] fp32 that fold in q's quant scale,
    head_dim^-0.5 and n_heads^-0.5 (as fused_q_indexer_rope_hadamard_quant's callers do)."""
    q = torch.randn(batch, N_HEADS, HEAD_DIM, generator=gen, device=device)
    q_fp8, q_scale = quantize_fp8_rows(q)
    w = torch.randn(batch, N_HEADS, generator=gen, device=device)
    weight = w * q_scale * HEAD_DIM ** -0.5 * N_HEADS ** -0.5
    return q_fp8.unsqueeze(1), weight.float()


def reference_scores(q_fp8, cache, weight, page_table, max_seq_len):
    """float64: per-head scores s [B, T, H] and logits [B, T] over the first max_seq_len positions."""
    q = q_fp8[:, 0].double()
    flat = cache.view(cache.shape[0], PAGE_BYTES)
    vals = flat[:, : PAGE * HEAD_DIM].contiguous().view(torch.float8_e4m3fn).double().view(-1, PAGE, HEAD_DIM)
    scales = flat[:, PAGE * HEAD_DIM :].contiguous().view(torch.float32).double()
    pages = page_table[:, : math.ceil(max_seq_len / PAGE)].long()
    k = vals[pages].flatten(1, 2)[:, :max_seq_len]                         # [B, T, D]
    kscale = scales[pages].flatten(1, 2)[:, :max_seq_len]                  # [B, T]
    s = torch.einsum("btd,bhd->bth", k, q)
    logits = (F.relu(s) * weight.double()[:, None, :]).sum(-1) * kscale
    return s, logits, kscale


def logit_bound(s, weight, kscale, rel: float) -> torch.Tensor:
    """rel * |scale_t| * sum_h |w_h * s_h|: the error a relative rounding `rel` of each head score allows."""
    return rel * kscale.abs() * (s.abs() * weight.double().abs()[:, None, :]).sum(-1)


# --------------------------------------------------------------------------- probes

MATMUL_OPS = {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "_scaled_mm"}


class MatmulDtypes(TorchDispatchMode):
    """Records (op, operand dtypes, operand shapes) of every matmul aten op that runs inside."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, tuple, tuple]] = []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in MATMUL_OPS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            self.calls.append((name, tuple(t.dtype for t in tensors), tuple(tuple(t.shape) for t in tensors)))
        return func(*args, **(kwargs or {}))


class InterpretedDots:
    """Under TRITON_INTERPRET=1: record the operand dtypes of every tl.dot, and compute bf16 dots right.

    Triton 3.6's interpreter keeps bf16 as raw uint16 bits and feeds them to np.matmul as integers.
    Widening the bits to fp32 first gives what the tensor cores do: exact bf16 products, fp32 sums.
    """

    def __init__(self):
        self.dtypes: list[tuple[str, str]] = []

    def __enter__(self):
        import numpy as np
        import triton.language as tl
        from triton.runtime import interpreter

        self._orig = interpreter.InterpreterBuilder.create_dot
        orig, probe = self._orig, self

        def widen(handle):
            if handle.dtype.scalar == tl.bfloat16:
                bits = handle.data.astype(np.uint32) << np.uint32(16)
                return interpreter.TensorHandle(bits.view(np.float32), tl.float32)
            return handle

        def dot(builder, a, b, d, *rest):
            probe.dtypes.append((str(a.dtype.scalar), str(b.dtype.scalar)))
            return orig(builder, widen(a), widen(b), d, *rest)

        interpreter.InterpreterBuilder.create_dot = dot
        return self

    def __exit__(self, *exc):
        from triton.runtime import interpreter

        interpreter.InterpreterBuilder.create_dot = self._orig


class KVBytesRead(TorchDispatchMode):
    """Bytes read out of one tensor's memory, by torch ops or by interpreted Triton kernels.

    torch: the output size of every non-view op that takes the tensor's storage (a gather of
    pages reads what it returns). Triton under TRITON_INTERPRET=1: every unmasked element a load
    takes from the tensor's address range; the interpreter's own host copies are not counted.
    """

    def __init__(self, tensor: torch.Tensor):
        super().__init__()
        storage = tensor.untyped_storage()
        self.lo, self.hi = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        self.torch_bytes = 0
        self.triton_bytes = 0

    @property
    def bytes(self) -> int:
        return self.torch_bytes + self.triton_bytes

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view and isinstance(out, torch.Tensor):
            flat = [a for a in args if isinstance(a, torch.Tensor)]
            flat += [t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
            if any(t.untyped_storage().data_ptr() == self.lo for t in flat):
                self.torch_bytes += out.numel() * out.element_size()
        return out

    def __enter__(self):
        import numpy as np
        from torch.utils._python_dispatch import _disable_current_modes
        from triton.runtime import interpreter

        probe = self
        self._patched = [
            (interpreter.InterpreterBuilder, "create_masked_load", interpreter.InterpreterBuilder.create_masked_load),
            (interpreter.GridExecutor, "__call__", interpreter.GridExecutor.__call__),
        ]
        load, launch = self._patched[0][2], self._patched[1][2]

        def counting_load(builder, ptrs, mask, other, *rest):
            addr = ptrs.data.astype(np.uint64)
            hit = mask.data.astype(bool) & (addr >= probe.lo) & (addr < probe.hi)
            size = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
            probe.triton_bytes += int(hit.sum()) * size
            return load(builder, ptrs, mask, other, *rest)

        def launch_outside_mode(executor, *args, **kwargs):
            with _disable_current_modes():
                return launch(executor, *args, **kwargs)

        interpreter.InterpreterBuilder.create_masked_load = counting_load
        interpreter.GridExecutor.__call__ = launch_outside_mode
        return super().__enter__()

    def __exit__(self, *exc):
        for owner, name, original in self._patched:
            setattr(owner, name, original)
        return super().__exit__(*exc)


# --------------------------------------------------------------------------- trees for the benches

def upstream_trees(pristine: str | None = None, patched: str | None = None, line: str | None = None
                   ) -> tuple[Path, Path]:
    """(pristine, patched) roots: the given directories, else built like tests/conftest.py does for `line` (None:
    the newest, or PATCHKIT_LINE; pinned wheels from the patchkit cache, PATCHKIT_CACHE honoured; series applied
    by the engine)."""
    if pristine and patched:
        return Path(pristine), Path(patched)
    import shutil
    import tempfile

    from serving import REPO as repo
    from patchkit.engine import Engine
    from patchkit.fetch import fetch
    from patchkit.lockfile import load_lock
    from patchkit.pristine import Pristine

    lock = load_lock(repo / "pin.lock", line)
    base = Path(tempfile.mkdtemp(prefix="dsv4-trees-"))
    pristine_root, patched_root = base / "pristine", base / "patched"
    pristine_root.mkdir()
    for name, up in lock.upstreams.items():
        Pristine(fetch(up, log=lambda *_: None)).unpack(pristine_root, root=up.root)
    shutil.copytree(pristine_root, patched_root)
    Engine.for_lock(repo, lock).apply(patched_root, log=lambda *_: None)
    return pristine_root, patched_root
