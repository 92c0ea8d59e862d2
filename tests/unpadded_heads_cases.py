"""P7 helpers: the real `MQALayer.forward` of a tree at TP > 1 around a recording attention backend,
and padded-vs-real-heads inputs for the MMA decode kernel.

Shared by tests/line_0_5_14/test_unpadded_heads.py and tests/gpu/test_unpadded_heads_gpu.py.

`deepseek_v4.py` imports the whole serving runtime, so the class `MQALayer` is compiled out of the
tree's file on its own (as harness/dsv4_indexer_cases.py does for functions). What runs is the tree's
code: `forward` (the head padding, the sink, the backend call, the output slice, wo_a / wo_b),
`_compute_q_b` (q written into the caller's buffer) and, on a patched tree, the module-level
decision and `_kernel_num_heads`, which import the tree's real sm_120 dispatcher. Stand-ins take the
place of what needs a GPU or a running server: the projections are plain matmuls, the fused
norm/rope kernels copy, `is_sm120_supported` answers what the test simulates, and the backend is
`Backend` below, which calls the dispatcher's `flash_mla_with_kvcache_sm120` as
DeepseekV4AttnBackend.forward does on sm_120 (deepseek_v4_backend.py:1416-1432, then `squeeze(1)`).
"""
from __future__ import annotations

import ast
import os
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum, auto
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn as nn

from harness.upstream import extract_functions, load_kernel, load_module, top_level_defs
from serving.mma_decode_cases import Case, make_case

MODEL = "sglang/srt/models/deepseek_v4.py"
DISPATCHER = "sglang/srt/layers/attention/flash_mla_sm120.py"
MMA = "sglang/srt/layers/attention/flash_mla_sm120_mma.py"
FORWARD_MODE = "sglang/srt/model_executor/forward_batch_info.py"
COMMON = "sglang/srt/utils/common.py"

# DeepSeek-V4-Flash attention (configs/deepseek_v4.py): 64 heads of 512 (448 nope + 64 rope), 8 output
# groups. Hidden and o_lora_rank are small here: they only feed stand-in projections.
N_HEADS, HEAD_DIM, ROPE_DIM, N_GROUPS = 64, 512, 64, 8
HIDDEN, O_LORA_RANK = 64, 16
PADDED_HEADS = 64  # what the pinned forward pads each rank to when its heads fit


# --------------------------------------------------------------------------- padded kernel inputs

def pad_heads(q: torch.Tensor, sink: Optional[torch.Tensor], width: int, gen: torch.Generator):
    """q [B,1,H,512] and sink [H] padded to `width` heads as the pinned forward does: the padding
    heads of q are whatever the buffer held (here large random values, so a leak would show), the
    sink's are zeros."""
    B, _, H, D = q.shape
    junk = (torch.randn(B, 1, width - H, D, generator=gen) * 50).to(q.dtype).to(q.device)
    q_pad = torch.cat([q, junk], dim=2)
    sink_pad = None
    if sink is not None:
        sink_pad = torch.zeros(width, dtype=sink.dtype, device=sink.device)
        sink_pad[:H] = sink
    return q_pad, sink_pad


# --------------------------------------------------------------------------- the model's forward

def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def forward_mode_enum(root: Path):
    """The tree's real ForwardMode (an IntEnum with predicates such as is_decode / is_extend)."""
    ns = extract_functions(Path(root) / FORWARD_MODE, ["ForwardMode"], {"IntEnum": IntEnum, "auto": auto})
    return ns["ForwardMode"]


@dataclass
class Call:
    heads: int            # q's head dimension as the backend received it
    sink_heads: int
    sink: torch.Tensor
    out: Optional[torch.Tensor] = None  # what the backend returned [T, heads, 512]


@dataclass
class Backend:
    """DeepseekV4AttnBackend.forward's sm_120 sparse path over fixed KV caches; records each call."""
    dispatcher: types.ModuleType
    kv: Case
    compute: bool = True  # False: record only (the per-head Triton kernel autotunes with CUDA timing)
    calls: list[Call] = field(default_factory=list)

    def forward(self, q, k, v, layer, forward_batch, compress_ratio, save_kv_cache=True, attn_sink=None, **_):
        self.calls.append(Call(q.shape[1], attn_sink.shape[0], attn_sink.detach().clone()))
        if not self.compute:
            return q.new_zeros(q.shape[0], q.shape[1], layer.v_head_dim)
        kw = self.kv.kwargs()
        o = self.dispatcher.flash_mla_with_kvcache_sm120(
            q=q.unsqueeze(1), k_cache=kw["k_cache"], head_dim_v=layer.v_head_dim,
            softmax_scale=kw["softmax_scale"], indices=kw["indices"], topk_length=kw["topk_length"],
            attn_sink=attn_sink, extra_k_cache=kw["extra_k_cache"],
            extra_indices_in_kvcache=kw["extra_indices"], extra_topk_length=kw["extra_topk_length"],
        )[0]
        self.calls[-1].out = o.squeeze(1).clone()
        return o.squeeze(1)


def _package(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []
    return mod


@contextmanager
def sglang_modules(kernel_root: Path, sm120: bool, backend: str):
    """sys.modules entries the forward's function-level imports resolve to, removed afterwards: the
    kernel tree's real dispatcher (and MMA kernel, under TRITON_INTERPRET=1 off a GPU) loaded with
    SGLANG_SM120_SPARSE_DECODE=backend, its real environ.py, and stand-ins for the two runtime probes."""
    saved_modules = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    saved_env = {k: os.environ.get(k) for k in ("SGLANG_SM120_SPARSE_DECODE", "TRITON_INTERPRET")}
    try:
        for k in saved_modules:
            del sys.modules[k]
        for pkg in ("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.layers", "sglang.srt.layers.attention",
                    "sglang.srt.layers.attention.dsv4", "sglang.srt.layers.attention.dsv4.unified_kv_kernels"):
            sys.modules[pkg] = _package(pkg)
        # The tree's real sglang.srt.environ (the switches' registry) and what it imports resolve from disk.
        sys.modules["sglang.srt"].__path__ = [str(Path(kernel_root) / "sglang" / "srt")]
        common = types.ModuleType("sglang.srt.utils.common")
        common.is_sm120_supported = lambda: sm120
        sys.modules[common.__name__] = common
        gate = types.ModuleType("sglang.srt.layers.attention.dsv4.unified_kv_kernels.env_gate")
        gate.is_unified_kv_triton = lambda: False  # HIP only (env_gate.py)
        sys.modules[gate.__name__] = gate
        os.environ["SGLANG_SM120_SPARSE_DECODE"] = backend
        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
        if (Path(kernel_root) / MMA).is_file():
            load_kernel(Path(kernel_root) / MMA, "sglang.srt.layers.attention.flash_mla_sm120_mma")
        yield load_module(Path(kernel_root) / DISPATCHER, "sglang.srt.layers.attention.flash_mla_sm120")
    finally:
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        sys.modules.update(saved_modules)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def mqa_layer_class(root: Path, namespace: dict) -> type:
    """`MQALayer` compiled out of root's deepseek_v4.py, plus the module-level definitions its
    forward path uses that `namespace` does not supply (on a patched tree: the decode decision)."""
    path = Path(root) / MODEL
    tree = ast.parse(path.read_text())
    defs = top_level_defs(tree)
    cls = defs["MQALayer"]
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    todo = set()
    for name in ("forward", "_compute_q_b", "_kernel_num_heads"):
        if name in methods:
            todo |= _names(methods[name])
    picked = {}
    while todo:
        name = todo.pop()
        if name in picked or name in namespace or name not in defs or name == "MQALayer":
            continue
        picked[name] = defs[name]
        todo |= _names(defs[name])
    body = [n for n in tree.body if n in picked.values()] + [cls]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["MQALayer"]


def _unreached(what: str):
    def fail(*args, **kwargs):
        raise AssertionError(f"{what} path reached: not simulated")
    return fail


def _namespace(root: Path, backend: Backend, world: int) -> dict:
    lazy = extract_functions(Path(root) / COMMON, ["LazyValue"], {"Callable": object})["LazyValue"]

    def linear(weight):
        return lambda t: (t @ weight, None)

    return {
        "torch": torch, "nn": nn, "Optional": Optional, "TYPE_CHECKING": TYPE_CHECKING, "LazyValue": lazy,
        "_is_hip": False, "_is_npu": False, "_FP8_WO_A_GEMM": False,
        "get_attn_tp_context": lambda: types.SimpleNamespace(input_scattered=False),
        "get_attn_backend": lambda: backend,
        "envs": types.SimpleNamespace(SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=types.SimpleNamespace(get=lambda: False)),
        "get_is_capture_mode": lambda: False,
        "is_in_breakable_cuda_graph": lambda: False,
        "bcg_deepseek_v4_attention_with_output": _unreached("breakable-CUDA-graph extend"),
        "get_tensor_model_parallel_world_size": lambda: world,
        # fused kernels: q norm + rope written into the caller's buffer; inverse rope on o
        "fused_q_norm_rope": lambda q, q_out, eps, freqs_cis, positions: q_out.copy_(q),
        "fused_rope_inplace": lambda *a, **k: None,
        "_linear": linear,
    }


@dataclass
class Weights:
    """One full-model set (all 64 heads); rank r owns heads [r*H/tp, (r+1)*H/tp) and their group."""
    wq: torch.Tensor      # [HIDDEN, N_HEADS*HEAD_DIM]
    sink: torch.Tensor    # [N_HEADS]
    wo_a: torch.Tensor    # [N_GROUPS*O_LORA_RANK, N_HEADS/N_GROUPS*HEAD_DIM]
    wo_b: torch.Tensor    # [N_GROUPS*O_LORA_RANK, HIDDEN]

    @classmethod
    def random(cls, seed: int = 0, device="cpu") -> "Weights":
        gen = torch.Generator().manual_seed(seed)
        r = lambda *s, scale: (torch.randn(*s, generator=gen) * scale).to(torch.bfloat16).to(device)  # noqa: E731
        return cls(
            wq=r(HIDDEN, N_HEADS * HEAD_DIM, scale=2 * HIDDEN ** -0.5),
            sink=(torch.randn(N_HEADS, generator=gen) * 2).to(device),
            wo_a=r(N_GROUPS * O_LORA_RANK, N_HEADS // N_GROUPS * HEAD_DIM, scale=(N_HEADS // N_GROUPS * HEAD_DIM) ** -0.5),
            wo_b=r(N_GROUPS * O_LORA_RANK, HIDDEN, scale=(N_GROUPS * O_LORA_RANK) ** -0.5),
        )


def make_layer(cls: type, namespace: dict, w: Weights, tp_size: int, tp_rank: int, backend_layer_id: int = 0):
    """An MQALayer of rank tp_rank, built without __init__ (which creates the parallel linears):
    only the attributes the forward path reads, sliced from `w` as the weight loader would."""

    class Layer(cls):
        def _forward_prepare(self, x, positions, forward_batch, attn_backend, q_out=None, x_quant=None):
            # the real q path ends in _compute_q_b (wq_b, then q norm + rope into q_out)
            return self._compute_q_b(x, positions, q_out), None

    layer = Layer.__new__(Layer)
    nn.Module.__init__(layer)
    local, groups = N_HEADS // tp_size, N_GROUPS // tp_size
    heads = slice(tp_rank * local * HEAD_DIM, (tp_rank + 1) * local * HEAD_DIM)
    rows = slice(tp_rank * groups * O_LORA_RANK, (tp_rank + 1) * groups * O_LORA_RANK)
    layer.tp_size, layer.tp_rank = tp_size, tp_rank
    layer.n_heads, layer.n_local_heads, layer.head_dim = N_HEADS, local, HEAD_DIM
    layer.n_local_groups, layer.o_lora_rank, layer.qk_rope_head_dim = groups, O_LORA_RANK, ROPE_DIM
    layer.attn_sink = nn.Parameter(w.sink.clone(), requires_grad=False)
    layer._attn_sink_local = layer.attn_sink if tp_size == 1 else None
    layer.dsa_enable_prefill_cp, layer.alt_streams, layer._multi_stream_bs_limit = False, None, 128
    layer.compress_ratio, layer.eps, layer.freqs_cis, layer.layer_id = 4, 1e-6, None, backend_layer_id
    layer.attn_mqa = types.SimpleNamespace(layer_id=backend_layer_id, v_head_dim=HEAD_DIM)
    layer.wq_b = namespace["_linear"](w.wq[:, heads])
    layer.wo_a = types.SimpleNamespace(weight=w.wo_a[rows])
    layer.wo_b = namespace["_linear"](w.wo_b[rows])
    return layer


@dataclass
class Run:
    out: torch.Tensor     # the layer's output [T, HIDDEN]
    calls: list[Call]


def run_forward(model_root: Path, kernel_root: Path, *, tp_size: int, mode: str, sm120: bool = True,
                backend: str = "mma", tokens: int = 3, tp_rank: int = 1, seed: int = 0, steps: int = 1,
                device="cpu") -> Run:
    """`steps` forwards of rank tp_rank's MQALayer from model_root's deepseek_v4.py on one decode (or
    extend) batch of `tokens` rows, the attention computed by kernel_root's sm_120 dispatcher."""
    kv = make_case(tokens, 1, 64, extra_topk=64, seed=seed + 1, device=device)
    with sglang_modules(kernel_root, sm120, backend) as dispatcher:
        be = Backend(dispatcher, kv, compute=backend != "triton")
        ns = _namespace(model_root, be, tp_size)
        cls = mqa_layer_class(model_root, ns)
        layer = make_layer(cls, ns, Weights.random(seed, device), tp_size, tp_rank)
        fb = types.SimpleNamespace(forward_mode=getattr(forward_mode_enum(model_root), mode.upper()))
        gen = torch.Generator().manual_seed(seed + 2)
        x = torch.randn(tokens, HIDDEN, generator=gen).to(torch.bfloat16).to(device)
        positions = torch.arange(tokens, device=device)
        with torch.no_grad():
            outs = [layer.forward(x, positions, fb) for _ in range(steps)]
    assert all(torch.equal(o, outs[0]) for o in outs)
    return Run(outs[0], be.calls)
