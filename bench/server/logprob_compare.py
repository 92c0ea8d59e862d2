"""Compare two servers' greedy decodes step by step: max |logprob difference| over the top-k on the common
prefix, the first divergence step, and the tolerance logic of the live comparison (bench/server/live_compare.py).

A sequence is {"tokens": [id per step], "top": [[(logprob, id), ...] per step]} (sglang's
output_token_logprobs / output_top_logprobs, top_logprobs_num >= k). Step i of two sequences is
comparable while every token before it agrees, so steps 0..d are compared, d being the first step whose
greedy tokens differ (the divergence step itself included: its distributions have the same context).

At a step, the difference is the largest |lp_a(t) - lp_b(t)| over the tokens t in either top-k. A token
in one top-k that the other server did not return among its top_logprobs_num has a logprob there of at
most that server's smallest returned one, so the bound max(0, lp - smallest) is used (a lower bound of
the true difference: never an invented one).

Tolerances:
  kernel  calibrated on `triton` (the pinned per-head kernel) vs `torch` (the reference) of one build:
          SAFETY x their worst difference, at least FLOOR_NATS. A correct decode kernel (mma) must stay
          within it against torch; a broken one must not.
  tree    pinned vs patched: P2-P4 change numerics outside the decode kernel, so the budget is the kernel
          tolerance plus SAFETY x the worst difference of pinned vs patched-`triton` (same decode kernel,
          so that difference is P2-P4's alone). pinned vs patched-mma must stay within it.
A pair also fails where it diverges at a step at which the reference's top-1/top-2 margin exceeds the
tolerance: rounding cannot swap two tokens that far apart.
"""
from __future__ import annotations

import statistics

TOP_K = 5
SAFETY = 2.0
FLOOR_NATS = 1e-3


def _table(top: list, k: int) -> tuple[dict, float, dict]:
    """{token: logprob} of the best k, the smallest logprob returned, {token: logprob} of all returned."""
    ranked = sorted(((float(lp), int(t)) for lp, t in top), reverse=True)
    if not ranked:
        raise ValueError("expected a non-empty top-logprobs list at every step, found an empty one")
    return {t: lp for lp, t in ranked[:k]}, ranked[-1][0], {t: lp for lp, t in ranked}


def step_difference(top_a: list, top_b: list, k: int = TOP_K) -> float:
    best_a, floor_a, all_a = _table(top_a, k)
    best_b, floor_b, all_b = _table(top_b, k)
    worst = 0.0
    for t in set(best_a) | set(best_b):
        if t in all_a and t in all_b:
            d = abs(all_a[t] - all_b[t])
        elif t in all_a:
            d = max(0.0, all_a[t] - floor_b)
        else:
            d = max(0.0, all_b[t] - floor_a)
        worst = max(worst, d)
    return worst


def top2_margin(top: list) -> float:
    lps = sorted((float(lp) for lp, _ in top), reverse=True)
    return lps[0] - lps[1] if len(lps) > 1 else float("inf")


def compare_sequences(ref: dict, other: dict, k: int = TOP_K) -> dict:
    n = min(len(ref["tokens"]), len(other["tokens"]), len(ref["top"]), len(other["top"]))
    if n == 0:
        raise ValueError("expected decoded steps in both sequences, found none")
    diverge = next((i for i in range(n) if ref["tokens"][i] != other["tokens"][i]), None)
    upto = n if diverge is None else diverge + 1
    steps = [step_difference(ref["top"][i], other["top"][i], k) for i in range(upto)]
    return {"steps": n, "compared": upto, "first_divergence": diverge, "max_diff": max(steps),
            "per_step": steps,
            "margin_at_divergence": None if diverge is None else top2_margin(ref["top"][diverge])}


def compare_runs(ref: list[dict], other: list[dict], k: int = TOP_K) -> dict:
    """The same prompts decoded by two servers (lists in prompt order)."""
    if len(ref) != len(other):
        raise ValueError(f"expected the same number of sequences, found {len(ref)} and {len(other)}")
    seqs = [compare_sequences(a, b, k) for a, b in zip(ref, other)]
    divs = [s["first_divergence"] for s in seqs if s["first_divergence"] is not None]
    return {"sequences": len(seqs), "max_diff": max(s["max_diff"] for s in seqs),
            "median_step_diff": statistics.median(d for s in seqs for d in s["per_step"]),
            "diverged": len(divs), "first_divergence": min(divs) if divs else None,
            "worst_margin_at_divergence": max((s["margin_at_divergence"] for s in seqs
                                               if s["margin_at_divergence"] is not None), default=None),
            "per_sequence": seqs}


def kernel_tolerance(calibration: list[dict]) -> float:
    """From compare_runs results of triton vs torch (every batch size)."""
    return max(FLOOR_NATS, SAFETY * max(c["max_diff"] for c in calibration))


def tree_tolerance(kernel_tol: float, tree_calibration: list[dict]) -> float:
    """From compare_runs results of pinned vs patched-triton."""
    return kernel_tol + SAFETY * max(c["max_diff"] for c in tree_calibration)


def verdict(result: dict, tol: float) -> tuple[bool, str]:
    """(passes, why) for one compared pair against a tolerance."""
    if result["max_diff"] > tol:
        return False, f"max |logprob diff| {result['max_diff']:.3g} > {tol:.3g} nats"
    margin = result["worst_margin_at_divergence"]
    if margin is not None and margin > tol:
        return False, (f"diverges at step {result['first_divergence']} where the reference's top-2 margin is "
                       f"up to {margin:.3g} nats (> {tol:.3g})")
    return True, f"within {tol:.3g} nats" + ("" if result["diverged"] == 0 else
                                              f"; {result['diverged']} diverge, each at a near-tie")
