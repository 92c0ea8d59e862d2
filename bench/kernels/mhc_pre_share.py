"""P3's share of a decode forward on the 0.5.23 line, computed (nothing is measured here) from raw files that
BENCHMARKS.md cites: P3's per-call time against the release's fp32 `hc_pre_torch_impl` under CUDA graphs
(`bench/kernels/bench_mhc_pre.py`'s table, shapes T x 4 x 4096), the number of MHC-pre mixings per forward that reach
P3's code (the series' reach.toml figure: 1 of 86 for DeepSeek-V4-Flash; none for DeepSeek-V4.1-Flash, whose
mixing takes the release's own fused kernel), and the patched 0.5.14 server's decode step (`bench/server/bench_e2e.py
--compare`'s table, a model of `--layers` layers).

The server ran fewer layers than the real model, so one step brackets the real forward: an upper bound on the
share divides by the measured step (as if the other layers cost nothing), a lower bound by the step scaled to the
real depth (as if every microsecond of it were per-layer work). The estimate splits the step into a per-layer
part and a fixed part: from a second server of another depth (`--steps2`), or from a kernel profile of the same
4-layer model (`--kernels`, `bench/server/decode_share.py`'s kernels.json: a kernel launched n times a step counts
(n // layers) * layers / n of its time as per-layer; kernels outside the profile's top list count as fixed,
which makes the forward shorter and the share larger). Rule (issue text): keep P3
on the 0.5.23 line where it saves at least 0.5 % of a forward at some batch users run.

    python3 -m bench.kernels.mhc_pre_share --mhc bench/runs/2026-12-05-p3-triton38-gpu/mhc-bench-3.8.txt \
        --steps bench/runs/2026-12-01-e2e-run2/compare.txt \
        --kernels bench/runs/2026-12-03-p1-share-run3/kernels.json
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

RULE = 0.5            # percent of a forward
FULL_LAYERS = 43      # DeepSeek-V4-Flash (serving/dsv4_flash_config.json num_hidden_layers)
REACHED = 1           # MHC-pre mixings per forward that run P3's code (patches/0.5.23/sglang/reach.toml)


def _rows(text: str, head: str) -> list[dict[str, str]]:
    """The markdown table whose header row starts with `head`, as dicts."""
    lines = text.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.startswith(head))
    except StopIteration:
        raise ValueError(f"expected a table whose header starts with {head!r}, found none") from None
    names = [c.strip() for c in lines[start].strip("|").split("|")]
    out = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        out.append(dict(zip(names, (c.strip() for c in line.strip("|").split("|")))))
    return out


def saving_us(mhc_text: str) -> dict[int, float]:
    """T -> fp32 graph minus fused graph, us per call (P3's saving per mixing under CUDA graphs)."""
    return {int(r["T"]): float(r["fp32 graph"]) - float(r["fused graph"]) for r in _rows(mhc_text, "| T |")}


def step_ms(compare_text: str, prompt: int = 1024) -> dict[int, float]:
    """concurrency -> the patched server's decode step, ms (a --compare table, or one tree's own table)."""
    rows = _rows(compare_text, "| concurrency |")
    key = "patched step ms" if rows and "patched step ms" in rows[0] else "step ms"
    return {int(r["concurrency"]): float(r[key]) for r in rows if int(r["prompt"]) == prompt and r[key] != "-"}


def layers_of(compare_text: str) -> int | None:
    m = re.search(r"(\d+) layers", compare_text)
    return int(m.group(1)) if m else None


def per_layer_fraction(kernels: dict, concurrency: int, layers: int, ceiling: str = "1M") -> float | None:
    """The per-layer share of a decode step's kernel time, from a p1_share kernels.json (the `mma` server alone
    at that ceiling and concurrency): steps = the launches of the least-launched kernel of the list."""
    hits = [v for k, v in kernels.items() if f"mma-{ceiling}-c{concurrency}-" in k and k.startswith("alone/")]
    if not hits:
        return None
    top = hits[0]["top"]
    steps = min(t["launches"] for t in top)
    per_layer = sum(t["us"] * (t["launches"] // steps // layers * layers) / (t["launches"] / steps) for t in top)
    return per_layer / hits[0]["kernel_us"]


def share_rows(saving: dict[int, float], steps: dict[int, float], layers: int, steps2=None, layers2=None,
               kernels: dict | None = None):
    """Per concurrency: P3's saving per forward (us) and its share of the forward, %: upper, lower, estimate."""
    out = []
    for c, step in sorted(steps.items()):
        if c not in saving:
            continue
        s = saving[c] * REACHED
        upper = 100 * s / (step * 1000)
        lower = 100 * s / (step * 1000 * FULL_LAYERS / layers)
        est = None
        if steps2 and c in steps2:
            per_layer = (steps2[c] - step) / (layers2 - layers)
            est = 100 * s / ((step + per_layer * (FULL_LAYERS - layers)) * 1000)
        elif kernels is not None and (f := per_layer_fraction(kernels, c, layers)) is not None:
            est = 100 * s / (step * 1000 * ((1 - f) + f * FULL_LAYERS / layers))
        out.append((c, s, step, upper, lower, est))
    return out


def verdict(rows) -> str:
    if all(r[3] < RULE for r in rows):
        return "retire: below the rule even as an upper bound at every batch"
    if any((r[5] if r[5] is not None else r[4]) >= RULE for r in rows):
        return "keep: at least the rule at some batch"
    if all(r[5] is not None and r[5] < RULE for r in rows):
        return "retire: the estimate is below the rule at every batch (the upper bound is not)"
    return ("undecided: the bracket straddles the rule; a server of another depth (--steps2) gives the estimate")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mhc", type=Path, required=True)
    ap.add_argument("--steps", type=Path, required=True)
    ap.add_argument("--layers", type=int, help="the server's layers (default: read from --steps)")
    ap.add_argument("--steps2", type=Path)
    ap.add_argument("--layers2", type=int)
    ap.add_argument("--kernels", type=Path, help="a p1_share kernels.json of the same model (per-layer share)")
    args = ap.parse_args(argv)
    for p in (args.mhc, args.steps, args.steps2, args.kernels):
        if p is not None and not p.is_file():
            print(f"error: expected a raw file, found no file at {p}", file=sys.stderr)
            return 2
    try:
        steps_text = args.steps.read_text()
        layers = args.layers or layers_of(steps_text)
        steps2 = step_ms(args.steps2.read_text()) if args.steps2 else None
        layers2 = args.layers2 or (layers_of(args.steps2.read_text()) if args.steps2 else None)
        if layers is None or (steps2 is not None and (layers2 is None or layers2 == layers)):
            raise ValueError(f"expected two different layer counts, found {layers} and {layers2}")
        kernels = json.loads(args.kernels.read_text()) if args.kernels else None
        rows = share_rows(saving_us(args.mhc.read_text()), step_ms(steps_text), layers, steps2, layers2, kernels)
    except (ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"computed, not measured: P3's saving x {REACHED} reached mixing per DeepSeek-V4-Flash forward "
          f"(of 86; DeepSeek-V4.1-Flash: 0) over a decode forward of the patched 0.5.14 server ({layers} layers; "
          f"the real model has {FULL_LAYERS})")
    print(f"sources: {args.mhc}, {args.steps}" + "".join(f", {p}" for p in (args.steps2, args.kernels) if p))
    print("| concurrency (= T) | saving per forward us | step ms | share upper % | share lower % | share estimate % |")
    print("|---:|---:|---:|---:|---:|---:|")
    for c, s, step, up, lo, est in rows:
        print(f"| {c} | {s:.1f} | {step:.2f} | {up:.2f} | {lo:.3f} | {'-' if est is None else f'{est:.3f}'} |")
    print(f"rule: keep where >= {RULE} % at some batch. {verdict(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
