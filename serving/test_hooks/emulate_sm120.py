"""Post-import hooks of the GPU-box harness: OVERLAY_EMULATE_SM120=1 (TEST ONLY) and hc_split_sinkhorn.

serving/test_hooks/boxhooks/sitecustomize.py loads this file in every Python process started with
serving/test_hooks/boxhooks first on PYTHONPATH (the server, and the scheduler and detokenizer processes
SGLang spawns: `mp.set_start_method("spawn")`, so each one is a fresh interpreter that runs
sitecustomize again). It installs a meta-path finder that runs a patch function right after
chosen sglang modules finish loading:

* OVERLAY_EMULATE_SM120=narrow -- the fallback: only the three bindings of the first trial on the
  box (NARROW: server_args, deepseek_v4_backend, the indexer) are rebound, after their modules load;
  common.py keeps the real check, so e.g. the FP8 GEMMs stay on CUTLASS sm90.

* OVERLAY_EMULATE_SM120=1 -- make SGLang take its sm_120 (RTX PRO 6000 / RTX 50xx) branches on
  another GPU (an H200, sm_90), to run the code the patches change. The one source of truth
  upstream is `sglang.srt.utils.common.is_sm120_supported` (an lru_cache'd capability check);
  every user imports that name, some evaluate it at import (`_is_sm120 = is_sm120_supported()`).
  It is replaced as soon as common.py has run, before anything can import it, so every importer
  and every import-time flag sees True. The modules in SM120_USERS (all modules of the pinned and
  the patched tree that bind the name or a flag computed from it; tests/serving/test_emulate_sm120.py
  keeps the list complete) are checked again when they load: any binding still holding the real
  answer is rebound, and one line per module says what it holds.
  Not changed: torch.cuda.get_device_capability(), is_blackwell_supported(), the JIT/Triton
  target (kernels are built for the GPU that runs them) -- docs/serving.md lists what differs.

* tilelang not importable -- `sglang.srt.layers.mhc.hc_split_sinkhorn` (TileLang only, called by
  every DeepSeek-V4 hc_pre) is replaced by serving/test_hooks/hc_sinkhorn.py.

* OVERLAY_DUMMY_INIT=scaled (TEST ONLY) -- `--load-format dummy` fills the weights with
  serving/test_hooks/dummy_init.py's deterministic by-role values instead of sglang's U(-1e-3, 1e-3), so the
  next-token distribution depends on attention (the loader's `initialize_dummy_weights` is rebound).

* OVERLAY_TEST_BREAK_DECODE=zero-attn|no-sink|drop-split|skip-attn (TEST ONLY, the red runs of the
  live comparison and the attention ablation of bench/server/decode_share.py) -- the sm_120 sparse-decode
  dispatcher is wrapped so that its output is zeroed, the per-head sink is not passed (as a kernel
  that ignored it), the last of DROP_SPLITS equal splits of each row's valid top-k positions is
  masked (-1, as a kernel that dropped one split's partial result), or no kernel runs at all (zeros
  of the output's shape: the decode step without attention). Never set by any shipped code path;
  each server that has it says so in its log.

* OVERLAY_TEST_SHADOW_DECODE=1 (TEST ONLY, the kernel check of the live comparison) -- the dispatcher is
  wrapped (outside any deliberate break) so that every call, CUDA-graph replays included, is compared with
  the tree's own PyTorch reference on the same inputs; serving/test_hooks/shadow_decode.py says how, and logs the
  largest row error so far.

* OVERLAY_GRAPH_SAFE_TORCH_DECODE=1 (TEST ONLY, the live comparison's `torch` reference under CUDA
  graphs) -- the tree's own PyTorch fallback `_sm120_sparse_decode_fwd` is recompiled from its source
  with each boolean-mask assignment `x[mask] = v` done as `x.masked_fill_(mask, v)`: the same values
  (tests/line_0_5_14/test_break_decode.py checks bit equality), without index_put's nonzero(), a host sync that
  CUDA-graph capture forbids.

Everything it does is printed to stderr (the server log), prefixed with [overlay-boxhooks].
"""
from __future__ import annotations

import ast
import functools
import importlib.abc
import importlib.util
import os
import sys

EMULATE_ENV = "OVERLAY_EMULATE_SM120"
DUMMY_INIT_ENV = "OVERLAY_DUMMY_INIT"      # scaled: serving/test_hooks/dummy_init.py (TEST ONLY)
BREAK_ENV = "OVERLAY_TEST_BREAK_DECODE"    # zero-attn | no-sink | drop-split | skip-attn (TEST ONLY)
BREAK_MODES = ("zero-attn", "no-sink", "drop-split", "skip-attn")
GRAPH_SAFE_ENV = "OVERLAY_GRAPH_SAFE_TORCH_DECODE"   # 1: the torch reference decode capturable (TEST ONLY)
SHADOW_ENV = "OVERLAY_TEST_SHADOW_DECODE"  # 1: every dispatcher call checked against the torch reference (TEST ONLY)
TORCH_DECODE = "_sm120_sparse_decode_fwd"
DROP_SPLITS = 4
LOADER = "sglang.srt.model_loader.loader"
DECODE = "sglang.srt.layers.attention.flash_mla_sm120"
SINKHORN_ENV = "OVERLAY_HC_SINKHORN"       # triton (default on CUDA) | torch | off
TAG = "[overlay-boxhooks]"

COMMON = "sglang.srt.utils.common"
MHC = "sglang.srt.layers.mhc"
# Every module that binds is_sm120_supported at module level, and the import-time flags computed
# from it (module -> flag names). From grepping the pinned 0.5.14 tree (and the patched one).
SM120_USERS = {
    "sglang.srt.server_args": (),
    "sglang.srt.layers.attention.deepseek_v4_backend": ("_is_sm120",),
    "sglang.srt.layers.attention.dsv4.indexer": (),
    "sglang.srt.layers.attention.trtllm_mha_backend": (),
    "sglang.srt.layers.quantization.fp8_utils": ("_is_sm120_supported",),
    "sglang.srt.layers.quantization.fp8_kernel": ("_is_sm120_supported",),
    "sglang.srt.layers.quantization.fp8": (),
    "sglang.srt.layers.quantization.mxfp4": (),
    "sglang.srt.layers.quantization.mxfp4_marlin_moe": (),
    "sglang.srt.layers.quantization.modelopt_quant": (),
}


# OVERLAY_EMULATE_SM120=narrow: only these (the rebinding first tried on the box).
NARROW = ("sglang.srt.server_args", "sglang.srt.layers.attention.deepseek_v4_backend",
          "sglang.srt.layers.attention.dsv4.indexer")


def say(msg: str) -> None:
    print(f"{TAG} {msg} (pid {os.getpid()})", file=sys.stderr, flush=True)


def emulation_requested(environ=os.environ) -> bool:
    return environ.get(EMULATE_ENV, "") in ("1", "narrow")


def sinkhorn_wanted(environ=os.environ) -> bool:
    if environ.get(SINKHORN_ENV, "") == "off":
        return False
    return importlib.util.find_spec("tilelang") is None


# -- the emulated capability check -----------------------------------------------------------

def _device_words() -> str:
    """'NVIDIA H200 sm_90, CUDA 13.0' -- called where sglang itself queries the device."""
    try:
        import torch
        if not torch.cuda.is_available():
            return "no CUDA device"
        major, minor = torch.cuda.get_device_capability()
        return f"{torch.cuda.get_device_name()} sm_{major}{minor}, torch CUDA {torch.version.cuda}"
    except Exception as exc:   # the warning must come out even if the query fails
        return f"device query failed: {type(exc).__name__}"


_warned = False


@functools.lru_cache(maxsize=1)
def emulated_is_sm120_supported(*_args, **_kwargs) -> bool:
    # lru_cache keeps the original's cache_clear(); the flag keeps the warning to one per process
    # even where torch.compile traces through the cache (the first call is at import time).
    global _warned
    if _warned:
        return True
    _warned = True
    where = ("in server_args, deepseek_v4_backend and the indexer only (narrow)"
             if os.environ.get(EMULATE_ENV) == "narrow" else "in every sglang module")
    say(f"WARNING {EMULATE_ENV}=1: TEST ONLY -- sm_120 branches forced on {_device_words()}: "
        f"is_sm120_supported() returns True {where} (Marlin MXFP4 MoE, the sm_120 sparse-decode "
        "dispatcher, the sm_120 indexer, Triton FP8 GEMMs); this is not a Blackwell run")
    return True


emulated_is_sm120_supported.overlay_emulated = True


def _patch_common(module) -> None:
    module.is_sm120_supported = emulated_is_sm120_supported
    say(f"{EMULATE_ENV}=1: {COMMON}.is_sm120_supported rebound to the emulated check (TEST ONLY)")


def _check_user(module) -> None:
    """After a user module loads: rebind what still holds the real answer, say what it holds."""
    held, rebound = [], []
    if hasattr(module, "is_sm120_supported"):
        if not getattr(module.is_sm120_supported, "overlay_emulated", False):
            module.is_sm120_supported = emulated_is_sm120_supported
            rebound.append("is_sm120_supported")
        held.append("is_sm120_supported")
    for flag in SM120_USERS.get(module.__name__, ()):
        if hasattr(module, flag):
            if getattr(module, flag) is not True:
                setattr(module, flag, True)
                rebound.append(flag)
            held.append(f"{flag}=True")
    if held:
        late = f" (rebound late: {', '.join(rebound)})" if rebound else ""
        say(f"{EMULATE_ENV}=1: {module.__name__}: {', '.join(held)} emulated{late}")


# Functions whose first call proves the sm_120 branch ran (both trees define them): each logs
# once per process, e.g. "sm_120 sparse-decode dispatcher entered ... backend mma".
SM120_ENTRY_POINTS = {
    "sglang.srt.layers.attention.flash_mla_sm120": ("flash_mla_with_kvcache_sm120", "sm_120 sparse-decode dispatcher"),
    "sglang.srt.layers.attention.dsv4.indexer": ("fp8_paged_mqa_logits_torch_sm120", "sm_120 indexer"),
}
ENTERED = "entered"   # tests/gpu/test_server_live.py looks for "<what> entered"


def _trace_entry(module) -> None:
    name, what = SM120_ENTRY_POINTS[module.__name__]
    inner = getattr(module, name, None)
    if inner is None or getattr(inner, "overlay_traced", False):
        return
    state = {"done": False}

    @functools.wraps(inner)
    def traced(*args, **kwargs):
        if not state["done"] and not _compiling():
            state["done"] = True
            backend = getattr(module, "_sm120_default_backend", None)
            say(f"{EMULATE_ENV}=1: {what} {ENTERED}: {module.__name__}.{name}"
                + (f" (backend {backend})" if backend else ""))
        return inner(*args, **kwargs)

    traced.overlay_traced = True
    setattr(module, name, traced)


def _compiling() -> bool:
    try:
        import torch
        return torch.compiler.is_compiling()
    except Exception:
        return False


def _patch_mhc(module) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("overlay_hc_sinkhorn", os.path.join(here, "hc_sinkhorn.py"))
    impl = importlib.util.module_from_spec(spec)
    sys.modules["overlay_hc_sinkhorn"] = impl
    spec.loader.exec_module(impl)
    module.hc_split_sinkhorn = impl.hc_split_sinkhorn
    route = "torch ops" if os.environ.get(SINKHORN_ENV) == "torch" else "one Triton kernel on CUDA"
    say(f"WARNING tilelang is not importable: {MHC}.hc_split_sinkhorn replaced by the harness's "
        f"serving/test_hooks/hc_sinkhorn.py ({route}; same arithmetic as the TileLang kernel)")


def _load_sibling(name: str, filename: str):
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(name, os.path.join(here, filename))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _patch_loader(module) -> None:
    impl = _load_sibling("overlay_dummy_init", "dummy_init.py")

    def initialize_dummy_weights(model, *args, **kwargs):
        counts = impl.initialize_model(model, *args, **kwargs)
        say(f"{DUMMY_INIT_ENV}=scaled: TEST ONLY dummy weights by role: {impl.summary(counts)}")
        return counts

    module.initialize_dummy_weights = initialize_dummy_weights
    say(f"{DUMMY_INIT_ENV}=scaled: {LOADER}.initialize_dummy_weights rebound to serving/test_hooks/dummy_init.py (TEST ONLY)")


def drop_last_split(indices, topk_length=None, splits: int = DROP_SPLITS):
    """indices with the last of `splits` equal parts of each row's valid positions set to -1.

    A row's valid length is topk_length where given, else its count of indices >= 0 (valid entries
    first, as the top-k lists are). Graph-safe: torch ops only, no host sync."""
    import torch

    n = indices.shape[-1]
    if topk_length is not None:
        length = topk_length.to(torch.int64).reshape(*topk_length.shape, *([1] * (indices.dim() - topk_length.dim())))
    else:
        length = (indices >= 0).sum(-1, keepdim=True)
    pos = torch.arange(n, device=indices.device)
    dropped = (pos >= length - length // splits) & (pos < length)
    return torch.where(dropped, torch.full_like(indices, -1), indices)


def _break_decode(module) -> None:
    mode = os.environ.get(BREAK_ENV, "")
    name = SM120_ENTRY_POINTS[DECODE][0]
    inner = getattr(module, name, None)
    if inner is None or getattr(inner, "overlay_broken", False):
        return

    @functools.wraps(inner)
    def broken(*args, **kwargs):
        if mode == "skip-attn":
            return skipped_outputs(kwargs["q"], kwargs["head_dim_v"])
        if mode == "no-sink":
            kwargs["attn_sink"] = None
        elif mode == "drop-split":
            kwargs["indices"] = drop_last_split(kwargs["indices"], kwargs.get("topk_length"))
        out, lse = inner(*args, **kwargs)
        if mode == "zero-attn":
            out = out.new_zeros(out.shape)
        return out, lse

    broken.overlay_broken = True
    setattr(module, name, broken)
    say(f"WARNING {BREAK_ENV}={mode}: TEST ONLY -- {DECODE}.{name} deliberately broken "
        f"({BREAK_WORDS[mode]})")


BREAK_WORDS = {"zero-attn": "output zeroed", "no-sink": "sink not passed",
               "drop-split": f"last of {DROP_SPLITS} splits masked", "skip-attn": "no kernel run, zeros returned"}


def skipped_outputs(q, head_dim_v: int):
    """(out, lse) of the dispatcher's shapes -- out [B, s_q, H, head_dim_v] in q's dtype, lse [B, H, s_q] fp32
    (flash_mla_sm120's torch path) -- without running any attention."""
    import torch

    b, s_q, h, _ = q.shape
    return q.new_zeros(b, s_q, h, head_dim_v), torch.zeros(b, h, s_q, dtype=torch.float32, device=q.device)


class _MaskedAssignments(ast.NodeTransformer):
    """`x[m] = v` (one index expression, no slice) -> `_overlay_masked_set(x, m, v)`."""

    def visit_Assign(self, node):
        target = node.targets[0] if len(node.targets) == 1 else None
        if isinstance(target, ast.Subscript) and not isinstance(target.slice, (ast.Slice, ast.Tuple)):
            call = ast.Call(func=ast.Name("_overlay_masked_set", ast.Load()),
                            args=[target.value, target.slice, node.value], keywords=[])
            return ast.copy_location(ast.Expr(call), node)
        return node


def _overlay_masked_set(t, mask, value):
    """t[mask] = value, by masked_fill_ where mask is boolean (broadcast over t's trailing dims)."""
    import torch

    if mask.dtype != torch.bool:
        t[mask] = value
        return
    t.masked_fill_(mask.reshape(*mask.shape, *([1] * (t.dim() - mask.dim()))), value)


def graph_safe(module, name: str = TORCH_DECODE):
    """`module.name` recompiled from its source file with boolean-mask assignments as masked_fill_."""
    with open(module.__file__) as fh:
        tree = ast.parse(fh.read())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    func = ast.fix_missing_locations(_MaskedAssignments().visit(func))
    namespace = dict(vars(module))
    namespace["_overlay_masked_set"] = _overlay_masked_set
    exec(compile(ast.Module(body=[func], type_ignores=[]), module.__file__, "exec"), namespace)
    return namespace[name]


def _patch_torch_decode(module) -> None:
    if getattr(getattr(module, TORCH_DECODE, None), "overlay_graph_safe", False):
        return
    fn = graph_safe(module)
    fn.overlay_graph_safe = True
    setattr(module, TORCH_DECODE, fn)
    say(f"{GRAPH_SAFE_ENV}=1: TEST ONLY {DECODE}.{TORCH_DECODE} recompiled with masked_fill_ for its "
        "boolean-mask assignments (same values, capturable in a CUDA graph)")


def _shadow_decode(module) -> None:
    impl = _load_sibling("overlay_shadow_decode", "shadow_decode.py")
    name = SM120_ENTRY_POINTS[DECODE][0]
    if impl.wrap(module, name, graph_safe(module), say, _compiling):
        say(f"WARNING {SHADOW_ENV}=1: TEST ONLY -- {DECODE}.{name} checked against the torch reference on "
            "every call (slower; the output served is the kernel's)")


def break_mode(environ=os.environ) -> str:
    mode = environ.get(BREAK_ENV, "")
    if mode and mode not in BREAK_MODES:
        raise ValueError(f"{BREAK_ENV}: expected one of {', '.join(BREAK_MODES)}, found {mode!r}")
    return mode


# -- the post-import machinery ---------------------------------------------------------------

class _PatchingLoader(importlib.abc.Loader):
    """Wraps a module's loader: exec the module, then run the patch functions on it."""

    def __init__(self, inner, patches):
        self._inner = inner
        self._patches = patches

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        for patch in self._patches:
            patch(module)

    def __getattr__(self, name):   # get_source, get_filename, ... (inspect, linecache, dynamo)
        return getattr(self._inner, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self, patches: dict):
        self.patches = patches   # module name -> [callable(module), ...]

    def find_spec(self, fullname, path, target=None):
        patch = self.patches.get(fullname)
        if not patch:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def patches_for(environ=os.environ) -> dict:
    patches = {}
    if emulation_requested(environ):
        narrow = environ.get(EMULATE_ENV) == "narrow"
        if not narrow:
            patches[COMMON] = [_patch_common]
        for name in (NARROW if narrow else SM120_USERS):
            patches.setdefault(name, []).append(_check_user)
        for name in SM120_ENTRY_POINTS:
            patches.setdefault(name, []).append(_trace_entry)
    if sinkhorn_wanted(environ):
        patches.setdefault(MHC, []).append(_patch_mhc)
    if environ.get(DUMMY_INIT_ENV, "") not in ("", "scaled"):
        raise ValueError(f"{DUMMY_INIT_ENV}: expected scaled, found {environ[DUMMY_INIT_ENV]!r}")
    if environ.get(DUMMY_INIT_ENV) == "scaled":
        patches.setdefault(LOADER, []).append(_patch_loader)
    if break_mode(environ):
        patches.setdefault(DECODE, []).append(_break_decode)   # after _trace_entry: wraps the traced entry
    if environ.get(GRAPH_SAFE_ENV) == "1":
        patches.setdefault(DECODE, []).append(_patch_torch_decode)
    if environ.get(SHADOW_ENV, "") not in ("", "0", "1"):
        raise ValueError(f"{SHADOW_ENV}: expected 1 or 0, found {environ[SHADOW_ENV]!r}")
    if environ.get(SHADOW_ENV) == "1":
        patches.setdefault(DECODE, []).append(_shadow_decode)   # last: outside the break, sees its output
    return patches


def install(environ=os.environ) -> PostImportFinder | None:
    """Put the finder first on sys.meta_path; patch modules that are already loaded."""
    patches = patches_for(environ)
    if not patches:
        return None
    for finder in sys.meta_path:
        if isinstance(finder, PostImportFinder) or type(finder).__name__ == "PostImportFinder":
            return finder   # installed already in this process
    finder = PostImportFinder(patches)
    sys.meta_path.insert(0, finder)
    # A module loaded before the hook (a test importing sglang first) is patched now.
    for name, funcs in patches.items():
        if name in sys.modules:
            for patch in funcs:
                patch(sys.modules[name])
    if emulation_requested(environ):
        say(f"{EMULATE_ENV}=1: TEST ONLY hook installed; sm_120 checks in sglang will be forced True")
    return finder
