"""The FlashInfer sm_120 sparse-MLA decode (0.7.2, or the release SRC was laid from), called the way SGLang
0.5.23 calls it, on an sm_90a GPU.

    peer = load_peer(build/peer-flashinfer)            # after flashinfer_sm120_sources and _build
    peer.set_sm_count(188)                             # the split heuristic as on an RTX PRO 6000
    out, _ = peer.decode(q=..., k_cache=..., indices=..., topk_length=..., attn_sink=..., head_dim_v=512,
                         softmax_scale=..., extra_k_cache=..., extra_indices_in_kvcache=..., extra_topk_length=...)

What runs is upstream code, unchanged: SGLang's `flash_mla_with_kvcache_sm120` with its FlashInfer
backend (`_flash_mla_flashinfer` for batches <= 64, `_flash_mla_sm120_prefill` above, the 256 -> 64
token page split), compiled out of its 0.5.23 file; FlashInfer's `_sparse_mla_sm120_paged_attention`
and the policy behind it (metadata validation, plan, the C++ split heuristic) from the 0.7.2 wheel;
the kernels from the library flashinfer_sm120_build made. What stands in for FlashInfer's and
SGLang's runtime around them (their package roots are never imported):
- the JIT loader: `flashinfer.jit.mla` hands back the prebuilt library (functions it lacks, the
  cache-quantise ops outside the attention path, raise when called);
- the sm_120-only gate `supported_compute_capability([120, 121])` passes (the library is built for
  this GPU); `register_custom_op` / `register_fake_op` leave the function as it is (what
  torch.library adds is dispatch, not arithmetic); `flashinfer_api` logs nothing;
- `AutoTuner` is never in tuning mode and the calibration store is an empty folder: the untuned
  decode-first plan a fresh deployment runs without FlashInfer's calibration pass;
- SGLang's per-device buffer registry (`sglang.srt.runtime_context.get_resources().buffers`).
The SM count and shared memory the plan reads (`_prepared.device_caps`) are set with `set_sm_count`
(the shared memory then sm_120's); plans made before are dropped then.
"""
from __future__ import annotations

import importlib
import json
import logging
import math
import os
import sys
import types
from functools import lru_cache
from pathlib import Path
from typing import FrozenSet, Optional, Tuple

import torch
import triton
import triton.language as tl

from harness.upstream import extract_functions

SGLANG_FILE = "sglang/kernels/ops/attention/flash_mla_sm120.py"
SGLANG_DEFS = [  # what flash_mla_with_kvcache_sm120's FlashInfer branch uses, from SGLang 0.5.23
    "_NOPE_DIM", "_ROPE_DIM", "_NOPE_ROPE_STRIDE", "_TILE_SIZE", "_NUM_TILES", "_SCALE_STRIDE", "_PBS_SRC",
    "_PBS_DST", "_BYTES_PER_DST_PAGE", "_BYTES_PER_DST_PAGE_PADDED", "SM120_DECODE_MAX_TOKENS", "_page_split_kernel", "_page_mark_kernel",
    "_split_kv_pages_to_64", "_flash_mla_flashinfer", "_flash_mla_sm120_prefill", "flash_mla_with_kvcache_sm120",
]

SM120_SHARED_OPTIN = 101376  # bytes per block an sm_120 kernel may opt into (99 KB; the H200 allows 227 KB)


class PeerUnavailable(RuntimeError):
    """Why the peer cannot run here (not built, no GPU, no tvm-ffi): one line for the bench to print."""


def _module(name: str, path: Path | None = None, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    if path is not None:
        mod.__path__ = [str(path)]
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


class _Library:
    """The built tvm-ffi module; a function it was not built with raises when called."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        try:
            return getattr(self._module, name)
        except AttributeError:
            def missing(*_args, **_kwargs):
                raise NotImplementedError(f"{name}: not in the peer library (only the attention units are built)")
            return missing


class _Tuner:
    is_tuning_mode = False

    @classmethod
    def get(cls):
        return cls()

    def _get_skip_ops_stack(self):
        return []


def _passthrough_decorator(*args, **_kwargs):
    """Both @deco and @deco(...): the function unchanged."""
    if len(args) == 1 and callable(args[0]) and not _kwargs:
        return args[0]
    return lambda fn: fn


def _install_flashinfer(src: Path, library) -> types.ModuleType:
    """flashinfer.mla._sparse_mla_sm120 from SRC's 0.7.2 files, on the stand-ins the module doc names."""
    if "flashinfer" in sys.modules and not getattr(sys.modules["flashinfer"], "_peer", False):
        raise PeerUnavailable("a real flashinfer package is imported in this process; the peer needs its own")
    root = src / "flashinfer"
    workspace = src / "workspace"      # inside the peer's own folder: nothing left behind in /tmp
    workspace.mkdir(exist_ok=True)
    _module("flashinfer", root, _peer=True)
    _module("flashinfer.mla", root / "mla")
    _module("flashinfer.jit", root / "jit")
    spec = types.SimpleNamespace(build_and_load=lambda: library)
    _module("flashinfer.jit.mla", gen_sparse_mla_sm120_module=lambda: spec,
            gen_sparse_mla_dsv4_nvfp4_cache_ops_module=lambda: spec)
    _module("flashinfer.jit.env", FLASHINFER_WORKSPACE_DIR=workspace)
    _module("flashinfer.autotuner", AutoTuner=_Tuner)
    _module("flashinfer.api_logging", flashinfer_api=_passthrough_decorator)
    _module("flashinfer.trace", root / "trace")
    _module("flashinfer.trace.templates", root / "trace" / "templates")  # folders not laid out: only the stand-in
    _module("flashinfer.trace.templates.quantize", **{
        f"dsv41_{fmt}_quantize_{op}_sparse_mla_cache_trace": None
        for fmt in ("fp4", "fp8") for op in ("pack", "append")})
    _module("flashinfer.utils", register_custom_op=_passthrough_decorator, register_fake_op=_passthrough_decorator,
            supported_compute_capability=lambda _ccs: (lambda fn: fn))

    return importlib.import_module("flashinfer.mla._sparse_mla_sm120")


def _install_sglang_buffers() -> None:
    if "sglang.srt.runtime_context" in sys.modules:
        return
    resources = types.SimpleNamespace(buffers={})
    for name in ("sglang", "sglang.srt"):
        if name not in sys.modules:
            _module(name)
    _module("sglang.srt.runtime_context", get_resources=lambda: resources)


class Peer:
    def __init__(self, src: Path, fi, sgl: dict, tvm_ffi):
        self.src, self.fi, self.sgl, self.tvm_ffi = src, fi, sgl, tvm_ffi
        self.flashinfer_version = flashinfer_release(src)
        self._prepared = importlib.import_module("flashinfer.mla._sparse_mla_sm120._prepared")  # imported lazily upstream
        self._real_caps = self._prepared.device_caps
        self.sm_count: int | None = None

    def set_sm_count(self, sm_count: int | None) -> None:
        """The SM count FlashInfer's plan and split heuristic see, with sm_120's opt-in shared memory per
        block (None: this GPU's own two)."""
        if sm_count is None:
            self._prepared.device_caps = self._real_caps
        else:
            self._prepared.device_caps = lambda _device: (int(sm_count), SM120_SHARED_OPTIN)
        self._prepared._functional_plans.clear()
        self.sm_count = sm_count

    def plan_facts(self) -> dict:
        """What FlashInfer's resolver planned for the shape called last since set_sm_count (route,
        implementation, cpb = candidate chunks per split, active_splits, shared_bytes, ...)."""
        plans = list(self._prepared._functional_plans.values())
        return dict(plans[-1].plan.inspect()) if plans else {}

    def decode(self, **kwargs):
        """SGLang 0.5.23's flash_mla_with_kvcache_sm120 (FlashInfer backend): (out [B,1,H,512] bf16, None).
        The library launches on torch's current stream (a graph being captured included) whether or not
        this torch hands tvm-ffi its stream with the tensors."""
        with self.tvm_ffi.use_torch_stream():
            return self.sgl["flash_mla_with_kvcache_sm120"](**kwargs)

    def pages_of_64(self, k_cache: torch.Tensor) -> torch.Tensor:
        """A [pages*P/64, 64, 1, 584] copy of a P-token-page cache, by SGLang's own page split: the layout
        SGLANG_OPT_SM120_DIRECT_SWA_KV=1 allocates, so decode() then copies nothing per call. It is SGLang's
        per-device split buffer, which a decode() of P-token pages rewrites (with the same bytes)."""
        kv_u8 = k_cache.view(torch.uint8)
        return self.sgl["_split_kv_pages_to_64"](kv_u8, k_cache.shape[1], touched_indices=None)


def flashinfer_release(src: Path) -> str:
    """The FlashInfer release SRC was laid from (its SOURCES.json)."""
    from bench.kernels.peers.flashinfer_sm120_sources import STAMP

    try:
        return json.loads((Path(src) / STAMP).read_text())["flashinfer"]
    except (OSError, ValueError, KeyError) as exc:
        raise PeerUnavailable(f"expected {Path(src) / STAMP} naming its FlashInfer release, found: {exc}") from None


def load_peer(src: Path) -> Peer:
    """The peer from SRC (flashinfer_sm120_sources + flashinfer_sm120_build); PeerUnavailable says why not."""
    from bench.kernels.peers.flashinfer_sm120_build import library_path

    src = Path(src)
    if not torch.cuda.is_available():
        raise PeerUnavailable("no CUDA GPU")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}a"
    lib = library_path(src, arch)
    if not lib.exists():
        raise PeerUnavailable(f"not built for {arch}: expected {lib} (python3 -m bench.kernels.peers.flashinfer_sm120_build)")
    site = src / "site"
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        # A torch without the native DLPack exchange API: tvm-ffi would JIT-compile an addon at import
        # (a minute, a compiler). Its __dlpack__ fallback does no stream sync (graph capture is safe) and
        # decode() hands it torch's stream; eager per-call cost only, which graph replay never sees.
        os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
    try:
        import tvm_ffi
    except ImportError as exc:
        raise PeerUnavailable(f"tvm_ffi does not import ({exc})") from exc
    try:
        library = _Library(tvm_ffi.load_module(str(lib)))
    except Exception as exc:  # a library built on another machine that does not load here, say
        raise PeerUnavailable(f"{lib.name} does not load ({type(exc).__name__}: {str(exc)[:200]})") from exc
    fi = _install_flashinfer(src, library)
    _install_sglang_buffers()
    namespace = {"torch": torch, "triton": triton, "tl": tl, "math": math, "Optional": Optional, "Tuple": Tuple,
                 "FrozenSet": FrozenSet, "lru_cache": lru_cache, "logger": logging.getLogger("peer.sglang"),
                 "_sm120_default_backend": "flashinfer"}
    sgl = extract_functions(src / SGLANG_FILE, SGLANG_DEFS, namespace)
    return Peer(src, fi, sgl, tvm_ffi)
