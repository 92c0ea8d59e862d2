"""DeepSeek-V4 MHC-pre mixes in one bf16 tensor-core pass: mixes = (x @ hc_fn^T) * rsqrt(mean(x^2) + eps).

Drop-in for the math of `hc_pre_torch_impl` (models/deepseek_v4.py), for each hc_pre call that sm_120
does not fuse: x [T, 16384] bf16 (the flattened 4 x 4096 hyper-connection residual), hc_fn [24, 16384] fp32.
Upstream widens x to fp32 and runs an fp32 GEMM plus five elementwise/reduction kernels; at decode
sizes that is launch- and CUDA-core-bound. Here a (token tile, K split) grid multiplies each K slice
on tensor cores (bf16 operands: x as stored, hc_fn rounded to bf16 in registers; fp32 accumulation)
and sums x^2 in fp32 over the same slice; the splits are then added in a fixed order (deterministic)
and scaled by rsqrt(sum_sq / K + eps). Two routes, chosen per call by whether the stream is being
captured (a host-side query, no sync):
  graph       `_mhc_pre_partials` + `_mhc_pre_finish`: two launches, the least GPU time; a replay
              pays no host time. On sm_90+ the second is a programmatic dependent launch (placed
              while the first runs, it waits on the GPU for the partials): H200 replays at T <= 16
              then take 4.9-5.2 us, where a graph of one empty kernel takes 4.6-4.9 us.
  one-launch  `_mhc_pre_fused`: eager calls at decode sizes are bound by host time, about one Triton
              launch each, so the last program of a tile to finish (per-tile arrival counters that
              reset themselves) adds the splits in the same launch.
Numerics: x is exact in bf16, products of bf16 values are exact in fp32, so the only rounding that the
fp32 path lacks is hc_fn's (2^-9 relative). The RMS statistic stays fp32 end to end: a bf16 sum of
16384 squares would round the factor that scales every mix.
`mhc_pre_mixes` is the op `torch.ops.sglang.mhc_pre_mixes`, registered with `register_custom_op`,
which calls the function itself in eager (no dispatcher: an eager call is bound by host time), while
torch.compile (which wraps the caller during CUDA-graph capture) sees one opaque node. Launch shapes
depend on shapes only (capturable).
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from sglang.srt.utils.custom_op import register_custom_op

BLOCK_K = 128
BLOCK_N = 32  # 24 mixes padded to the MMA's N granularity
# K splits: about this many programs per SM over all token tiles. Graph route: 2. One-launch route:
# the last program of a tile adds every split's partials, so fewer, longer splits below EAGER_LARGE_T
# tokens (measured: 0.5 -> 14.8 us, 2 -> 22.5 us at T = 1).
GRAPH_PROGRAMS_PER_SM = 2
EAGER_PROGRAMS_PER_SM = 0.5
GRAPH_PDL = (
    True  # graph route: launch the finish kernel with programmatic dependent launch
)
EAGER_LARGE_T = 1024
# Warps of the graph route's partials kernel, by Triton release. From 3.8 on Triton assembles with ptxas
# --regAllocOptLevel=2, under which the 4-warp 16- and 32-token tiles keep 4-12 bytes of spill stores
# (sm_120; sm_90 too under 3.9); 8 warps build every tile without spills. 3.6's 4-warp build has none.
PARTIALS_NUM_WARPS = (
    4 if tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 8) else 8
)
_REDUCE_ELEMS = 4096  # partials the last program of a tile loads at once (registers)
_MIN_COUNTERS = (
    4096  # arrival counters kept per device (tiles of 64 tokens: 256K tokens)
)

_sm_counts: dict[int, int] = {}
_counters: dict[int, torch.Tensor] = {}
_pdl_ok: dict[int, bool] = {}
_graph_route_loaded: set = set()


@triton.jit
def _store_split_partials(
    x_ptr,
    w_ptr,
    part_ptr,
    sq_ptr,
    tile,
    split,
    T,
    K,
    N,
    stride_x,
    stride_w,
    k_per_split,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """One (token tile, K split) program's share: x @ hc_fn^T over its K slice on tensor cores (bf16
    operands, fp32 accumulation) and the fp32 sum of x^2 over the same slice, stored at row
    split * T + token of the partial products and of the sums of squares."""
    offs_t = tile * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_T, BLOCK_N], dtype=tl.float32)
    sq = tl.zeros([BLOCK_T], dtype=tl.float32)
    k_start = split * k_per_split
    for k in range(k_start, k_start + k_per_split, BLOCK_K):
        x = tl.load(
            x_ptr + offs_t[:, None] * stride_x + (k + offs_k)[None, :],
            mask=(offs_t[:, None] < T) & ((k + offs_k)[None, :] < K),
            other=0.0,
        )
        w = tl.load(
            w_ptr + offs_n[None, :] * stride_w + (k + offs_k)[:, None],
            mask=(offs_n[None, :] < N) & ((k + offs_k)[:, None] < K),
            other=0.0,
        )
        acc = tl.dot(x.to(tl.bfloat16), w.to(tl.bfloat16), acc)
        xf = x.to(tl.float32)
        sq += tl.sum(xf * xf, axis=1)
    row = split * T + offs_t
    tl.store(
        part_ptr + row[:, None] * BLOCK_N + offs_n[None, :],
        acc,
        mask=offs_t[:, None] < T,
    )
    tl.store(sq_ptr + row, sq, mask=offs_t < T)


@triton.jit
def _mhc_pre_partials(
    x_ptr,
    w_ptr,
    part_ptr,
    sq_ptr,
    T,
    K,
    N,
    stride_x,
    stride_w,
    k_per_split,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    if (
        PDL
    ):  # let the finish kernel's programs start now; they wait for this grid's stores
        tl.extra.cuda.gdc_launch_dependents()
    tile = tl.program_id(0)
    split = tl.program_id(1)
    _store_split_partials(
        x_ptr,
        w_ptr,
        part_ptr,
        sq_ptr,
        tile,
        split,
        T,
        K,
        N,
        stride_x,
        stride_w,
        k_per_split,
        BLOCK_T=BLOCK_T,
        BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K,
    )


@triton.jit
def _mhc_pre_finish(
    part_ptr,
    sq_ptr,
    out_ptr,
    T,
    N,
    num_splits,
    inv_k,
    eps,
    SPLITS_POW2: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PDL: tl.constexpr,
):
    t = tl.program_id(0)
    offs_s = tl.arange(0, SPLITS_POW2)
    offs_n = tl.arange(0, BLOCK_N)
    valid = offs_s < num_splits
    # launched early (programmatic dependent launch): wait until the partials are stored
    if PDL:
        tl.extra.cuda.gdc_wait()
    part = tl.load(
        part_ptr + (offs_s[:, None] * T + t) * BLOCK_N + offs_n[None, :],
        mask=valid[:, None],
        other=0.0,
    )
    sq = tl.load(sq_ptr + offs_s * T + t, mask=valid, other=0.0)
    rsqrt = 1.0 / tl.sqrt_rn(tl.sum(sq, axis=0) * inv_k + eps)
    tl.store(out_ptr + t * N + offs_n, tl.sum(part, axis=0) * rsqrt, mask=offs_n < N)


@triton.jit
def _mhc_pre_fused(
    x_ptr,
    w_ptr,
    part_ptr,
    count_ptr,
    out_ptr,
    T,
    K,
    N,
    stride_x,
    stride_w,
    k_per_split,
    num_splits,
    inv_k,
    eps,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_CHUNK: tl.constexpr,
):
    """One launch: each (token tile, K split) program stores its partial products and sums of squares;
    the last program of a tile to finish (an arrival counter) adds the splits in a fixed order and
    scales. Deterministic: the sum order does not depend on which program arrives last.
    """
    tile = tl.program_id(0)
    split = tl.program_id(1)
    sq_ptr = (
        part_ptr + num_splits * T * BLOCK_N
    )  # sums of squares follow the partial products
    _store_split_partials(
        x_ptr,
        w_ptr,
        part_ptr,
        sq_ptr,
        tile,
        split,
        T,
        K,
        N,
        stride_x,
        stride_w,
        k_per_split,
        BLOCK_T=BLOCK_T,
        BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K,
    )
    offs_t = tile * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_n = tl.arange(0, BLOCK_N)
    # Every thread's partials are stored before one thread publishes the arrival (release, GPU scope).
    tl.debug_barrier()
    arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    if arrived == num_splits - 1:
        tl.debug_barrier()
        offs_s = tl.arange(0, SPLIT_CHUNK)
        total = tl.zeros([BLOCK_T, BLOCK_N], dtype=tl.float32)
        total_sq = tl.zeros([BLOCK_T], dtype=tl.float32)
        for s0 in range(0, num_splits, SPLIT_CHUNK):
            srow = (s0 + offs_s)[:, None] * T + offs_t[None, :]  # [CHUNK, BLOCK_T]
            live = ((s0 + offs_s)[:, None] < num_splits) & (offs_t[None, :] < T)
            part = tl.load(
                part_ptr + srow[:, :, None] * BLOCK_N + offs_n[None, None, :],
                mask=live[:, :, None],
                other=0.0,
                cache_modifier=".cg",
            )
            total += tl.sum(part, axis=0)
            total_sq += tl.sum(
                tl.load(sq_ptr + srow, mask=live, other=0.0, cache_modifier=".cg"),
                axis=0,
            )
        rsqrt = 1.0 / tl.sqrt_rn(total_sq * inv_k + eps)
        tl.store(
            out_ptr + offs_t[:, None] * N + offs_n[None, :],
            total * rsqrt[:, None],
            mask=(offs_t[:, None] < T) & (offs_n[None, :] < N),
        )
        tl.atomic_xchg(
            count_ptr + tile, 0
        )  # ready for the next launch (and graph replay)


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1  # TRITON_INTERPRET=1 on CPU
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_counts:
        _sm_counts[index] = torch.cuda.get_device_properties(
            index
        ).multi_processor_count
    return _sm_counts[index]


def _arrival_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Per-tile arrival counters, zero between launches (the last program of a tile resets its own).

    One buffer per device, made outside any capture. Inside a capture with no buffer yet, a zeroed
    one is made for that graph alone (its memset is captured and runs on every replay).
    """
    key = device.index if device.type == "cuda" else -1
    buf = _counters.get(key)
    if buf is None or buf.numel() < tiles:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return torch.zeros(tiles, dtype=torch.int32, device=device)
        buf = torch.zeros(max(tiles, _MIN_COUNTERS), dtype=torch.int32, device=device)
        _counters[key] = buf
    return buf


# Host-side integer helpers. triton.cdiv / triton.next_power_of_2 are constexpr functions in Triton 3.6,
# ~17x slower than plain Python when called from the host, and an eager call is bound by host time.
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


@functools.lru_cache(maxsize=4096)
def launch_config(
    T: int,
    K: int,
    sms: int,
    programs_per_sm: float,
    max_block_t: int = 64,
    block_k: int = BLOCK_K,
) -> tuple[int, int, int, int]:
    """(block_t, tiles, splits, k_per_split) for T tokens: a function of shapes only (graph-safe)."""
    block_t = max(16, min(max_block_t, _pow2_at_least(T)))
    tiles = _cdiv(T, block_t)
    k_blocks = _cdiv(K, block_k)
    # Each split takes a whole number of block_k slices; about programs_per_sm programs per SM.
    splits = max(1, min(k_blocks, _cdiv(int(programs_per_sm * sms), tiles)))
    k_per_split = _cdiv(k_blocks, splits) * block_k
    splits = _cdiv(K, k_per_split)
    return block_t, tiles, splits, k_per_split


def _pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch: sm_90 and newer (sm_120 included), compiled kernels only."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _pdl_ok:
        _pdl_ok[index] = torch.cuda.get_device_capability(index)[0] >= 9
    return _pdl_ok[index]


def _graph_route(
    x_flat,
    hc_fn,
    eps,
    mixes,
    T,
    K,
    N,
    block_t,
    tiles,
    splits,
    k_per_split,
    pdl=None,
    block_k=BLOCK_K,
):
    """Two launches. With programmatic dependent launch the finish kernel's programs are placed while
    the partials kernel runs and wait on the GPU (griddepcontrol) for its stores: the second launch's
    latency overlaps the first instead of following it (a CUDA graph keeps the programmatic edge).
    """
    if pdl is None:
        pdl = GRAPH_PDL and _pdl_supported(x_flat.device)
    partials = torch.empty(
        (splits * T * (BLOCK_N + 1),), dtype=torch.float32, device=x_flat.device
    )
    sums_sq = partials[splits * T * BLOCK_N :]
    _mhc_pre_partials[(tiles, splits)](
        x_flat,
        hc_fn,
        partials,
        sums_sq,
        T,
        K,
        N,
        x_flat.stride(0),
        hc_fn.stride(0),
        k_per_split,
        BLOCK_T=block_t,
        BLOCK_N=BLOCK_N,
        BLOCK_K=block_k,
        PDL=pdl,
        num_warps=PARTIALS_NUM_WARPS,
    )
    _mhc_pre_finish[(T,)](
        partials,
        sums_sq,
        mixes,
        T,
        N,
        splits,
        1.0 / K,
        eps,
        SPLITS_POW2=_pow2_at_least(splits),
        BLOCK_N=BLOCK_N,
        PDL=pdl,
        num_warps=4,
        **({"launch_pdl": True} if pdl else {}),
    )


def _graph_route_key(x_flat, hc_fn, T, device):
    """What Triton specialises the graph route's kernels on (besides constant shapes): the launch
    shape, T == 1 / T % 16, 16-byte alignment of the pointers."""
    block_t, _, splits, _ = launch_config(
        T, x_flat.shape[1], _num_sms(device), GRAPH_PROGRAMS_PER_SM
    )
    return (
        device,
        block_t,
        splits,
        T == 1,
        T % 16 == 0,
        x_flat.data_ptr() % 16 == 0,
        hc_fn.data_ptr() % 16 == 0,
    )


def mhc_pre_mixes_triton(
    x_flat: torch.Tensor,
    hc_fn: torch.Tensor,
    eps: float,
    route: str | None = None,
    programs_per_sm: float | None = None,
) -> torch.Tensor:
    """x_flat [T, K] bf16, hc_fn [N, K] (fp32 or bf16) -> mixes [T, 1, N] fp32.

    route "graph" (the default while the stream is being captured): two launches, the GPU-cheapest
    at decode sizes (replays pay no host time). route "one-launch" (the default otherwise): one
    launch, because an eager call at decode sizes is bound by host time, about one Triton launch's
    worth per launch. Both stay within the same bound; they add the K splits in different orders.
    A Triton kernel cannot be loaded while a stream is being captured, so the first eager call of a
    shape also runs the graph route once (SGLang runs each captured shape eagerly before capture).
    """
    assert x_flat.dim() == 2 and hc_fn.dim() == 2 and hc_fn.shape[1] == x_flat.shape[1]
    assert x_flat.dtype == torch.bfloat16 and hc_fn.shape[0] <= BLOCK_N
    x_flat = x_flat.contiguous()
    hc_fn = hc_fn.contiguous()
    (T, K), N = x_flat.shape, hc_fn.shape[0]
    device = x_flat.device
    mixes = torch.empty((T, 1, N), dtype=torch.float32, device=device)
    if T == 0:
        return mixes
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    if route is None:
        route = "graph" if capturing else "one-launch"
        if not capturing:
            key = _graph_route_key(x_flat, hc_fn, T, device)
            if key not in _graph_route_loaded:
                config = launch_config(T, K, _num_sms(device), GRAPH_PROGRAMS_PER_SM)
                _graph_route(
                    x_flat, hc_fn, eps, torch.empty_like(mixes), T, K, N, *config
                )
                _graph_route_loaded.add(key)
    if programs_per_sm is None:
        programs_per_sm = (
            GRAPH_PROGRAMS_PER_SM
            if route == "graph"
            else (EAGER_PROGRAMS_PER_SM if T < EAGER_LARGE_T else GRAPH_PROGRAMS_PER_SM)
        )
    block_t, tiles, splits, k_per_split = launch_config(
        T, K, _num_sms(device), programs_per_sm
    )
    if route == "graph":
        _graph_route(
            x_flat, hc_fn, eps, mixes, T, K, N, block_t, tiles, splits, k_per_split
        )
        return mixes
    partials = torch.empty(
        (splits * T * (BLOCK_N + 1),), dtype=torch.float32, device=device
    )
    chunk = max(1, min(_pow2_at_least(splits), _REDUCE_ELEMS // (block_t * BLOCK_N)))
    _mhc_pre_fused[(tiles, splits)](
        x_flat,
        hc_fn,
        partials,
        _arrival_counters(device, tiles),
        mixes,
        T,
        K,
        N,
        x_flat.stride(0),
        hc_fn.stride(0),
        k_per_split,
        splits,
        1.0 / K,
        eps,
        BLOCK_T=block_t,
        BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K,
        SPLIT_CHUNK=chunk,
        num_warps=4,
    )
    return mixes


def _mhc_pre_mixes_fake(x_flat, hc_fn, eps):
    return x_flat.new_empty((x_flat.shape[0], 1, hc_fn.shape[0]), dtype=torch.float32)


@register_custom_op(
    op_name="mhc_pre_mixes",
    mutates_args=[],
    fake_impl=_mhc_pre_mixes_fake,
)
def mhc_pre_mixes(
    x_flat: torch.Tensor, hc_fn: torch.Tensor, eps: float
) -> torch.Tensor:
    """The fused MHC-pre mixes, as the op torch.ops.sglang.mhc_pre_mixes: eager calls run this function
    directly, torch.compile sees one opaque node."""
    return mhc_pre_mixes_triton(x_flat, hc_fn, eps)
