"""OVERLAY_TEST_SHADOW_DECODE=1 (TEST ONLY; serving/test_hooks/emulate_sm120.py installs it): check the sm_120 sparse-decode dispatcher against the tree's own
PyTorch reference on every call of a live server, CUDA-graph replays included.

Why: DeepSeek-V4 rounds the input of its FP8 linears to e4m3, so a correct kernel's last-bit differences flip
roundings downstream, and two correct kernels' next-token logprobs differ by ~0.5 nats (BENCHMARKS.md, "Live
logprob comparison", run 9; tests/serving/test_dummy_init.py reproduces it on the CPU). A subtly wrong kernel (sink
ignored) hides inside that. Here each call's output is compared with
the reference on the same inputs instead, so the check does not depend on how much the model amplifies rounding.

Each call also runs `_sm120_sparse_decode_fwd` (recompiled graph-safe, serving/emulate_sm120.graph_safe) on the
call's own arguments -- before any deliberate break of OVERLAY_TEST_BREAK_DECODE, which wraps inside this -- and
keeps, in device tensors that CUDA-graph capture records and every replay updates:

    error  max over calls and query rows of |out_row - ref_row| / RMS over the call's rows of |ref_row|
           (rows = (batch, query position), all heads; a row the reference leaves non-finite is skipped;
           a non-finite output where the reference is finite counts as an infinite error)
    calls  how many calls were checked

Outside capture (prefill, warm-up) each call reads them (a host sync: test only) and, when they changed and a
second has passed since the last line, logs `LINE_PREFIX error E over N calls`; bench/server/live_compare.py sends one
more request at the end so the last line covers every decode step. Calls inside torch.compile are not checked.
"""
from __future__ import annotations

import functools
import time

LINE_PREFIX = "shadow decode:"


def row_error(out, ref):
    """Largest row error of one call (a 0-dim float32 tensor; no host sync)."""
    import torch

    o = out.float().flatten(0, 1).flatten(1)        # [B * s_q, H * dv]
    r = ref.float().flatten(0, 1).flatten(1)
    ok = torch.isfinite(r).all(-1)
    r = torch.where(ok.unsqueeze(-1), r, torch.zeros_like(r))
    o = torch.where(ok.unsqueeze(-1), o, torch.zeros_like(o))
    diff = torch.nan_to_num((o - r).norm(dim=-1), nan=float("inf"))
    scale = (r.norm(dim=-1).square().sum() / ok.sum().clamp_min(1)).sqrt().clamp_min(1e-12)
    return (torch.where(ok, diff, torch.zeros_like(diff)) / scale).max()


def wrap(module, entry: str, reference, say, compiling) -> bool:
    """Replace module.entry by a wrapper that shadows each call with `reference` (the torch decode); calls for
    which compiling() is true (torch.compile tracing) pass unchecked."""
    inner = getattr(module, entry, None)
    if inner is None or getattr(inner, "overlay_shadowed", False):
        return False
    state = {"error": None, "calls": None, "logged": (None, None), "at": 0.0}

    @functools.wraps(inner)
    def shadowed(*args, **kwargs):
        import torch

        out, lse = inner(*args, **kwargs)
        if compiling() or out.shape[0] * out.shape[1] == 0:
            return out, lse
        q = kwargs["q"]
        scale = kwargs.get("softmax_scale")
        ref, _ = reference(q, kwargs["k_cache"], kwargs["indices"], kwargs.get("topk_length"),
                           kwargs.get("attn_sink"), kwargs["head_dim_v"],
                           q.shape[-1] ** -0.5 if scale is None else scale, kwargs.get("extra_k_cache"),
                           kwargs.get("extra_indices_in_kvcache"), kwargs.get("extra_topk_length"))
        if state["error"] is None:
            state["error"] = torch.zeros((), dtype=torch.float32, device=out.device)
            state["calls"] = torch.zeros((), dtype=torch.int64, device=out.device)
        torch.maximum(state["error"], row_error(out, ref), out=state["error"])
        state["calls"].add_(1)
        if not _capturing(out):
            _log(state, say)
        return out, lse

    shadowed.overlay_shadowed = True
    setattr(module, entry, shadowed)
    return True


_clock = time.monotonic     # what "a second has passed" is read from (the tests step it by hand)


def _log(state, say) -> None:
    now = _clock()
    seen = (float(state["error"]), int(state["calls"]))
    if seen != state["logged"] and now - state["at"] >= 1.0:
        state["logged"], state["at"] = seen, now
        say(f"{LINE_PREFIX} error {seen[0]:.3e} over {seen[1]} calls")


def _capturing(t) -> bool:
    import torch
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def last_reading(log_text: str) -> tuple[float, int] | None:
    """(error, calls) of the last shadow line in a server log, or None."""
    found = None
    for line in log_text.splitlines():
        at = line.find(LINE_PREFIX)
        if at < 0:
            continue
        words = line[at + len(LINE_PREFIX):].split()
        try:    # "error E over N calls"
            found = (float(words[1]), int(words[3]))
        except (IndexError, ValueError):
            continue
    return found
