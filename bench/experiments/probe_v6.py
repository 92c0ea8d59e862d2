"""One-call H200 probe for the next MMA-decode step (experiment, not part of `make bench`).

    python3 bench/experiments/probe_v6.py            # timing grid (CUDA-graph replay, rotating inputs)
    python3 bench/experiments/probe_v6.py --ncu CASE # run one case eagerly, for `ncu -k regex:v6`

Questions it answers, each against the v5 loop (mma_decode_v6.py = v5 + knobs):
* occupancy: does a second CTA per SM (maxnreg=128, H200 only: sm_120's shared memory holds one
  67.5 KB CTA) or a 4-warp 16x16 tile (33 KB, two CTAs per SM on sm_120 too) pay?
* QK chains: four score accumulators instead of two.
* small batch: how much of B=1..4 is the split-combine launch (skip_combine) and do more splits help.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_mma_decode as bm  # noqa: E402
import mma_decode_v6 as v6  # noqa: E402

BASE = (32, 32, 8, 1, False, True, 2, 0)
VARIANTS = {  # label -> (config, num_splits or None for the v4 rule, skip_combine)
    "h32t32": (BASE, None, False),
    "h32t32_c4": ((32, 32, 8, 1, False, True, 4, 0), None, False),
    "h32t32_r128": ((32, 32, 8, 1, False, True, 2, 128), None, False),
    "h16t64": ((16, 64, 8, 1, False, True, 2, 0), None, False),
    "h16t16w4": ((16, 16, 4, 1, False, True, 2, 0), None, False),
    "h16t16w4_r128": ((16, 16, 4, 1, False, True, 2, 128), None, False),
}
SMALL_B = {  # extra variants for B <= 4: split count and the combine's share
    "h16t64_s10_nocomb": ((16, 64, 8, 1, False, True, 2, 0), 10, True),
    "h16t16w4_s20": ((16, 16, 4, 1, False, True, 2, 0), 20, False),
    "h16t16w4_s40": ((16, 16, 4, 1, False, True, 2, 0), 40, False),
    "h16t16w4_s40_nocomb": ((16, 16, 4, 1, False, True, 2, 0), 40, True),
    "h32t32_s20": (BASE, 20, False),
}
SHAPES = [bm.Shape(B, 64, 128, 512) for B in (1, 4, 16, 64, 128)] + [bm.Shape(64, 64, 2048, 0)]
NCU_CASES = {"b128_h32t32": (bm.Shape(128, 64, 128, 512), BASE), "b1_h16t64": (bm.Shape(1, 64, 128, 512), (16, 64, 8, 1, False, True, 2, 0))}


def call(inp, i, cfg, splits, skip):
    a = inp.args(i)
    return v6.mma_sparse_decode(*a[:5], bm.SCALE, *a[7:], config=cfg, num_splits=splits, skip_combine=skip)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ncu", choices=sorted(NCU_CASES))
    ap.add_argument("--splits", action="store_true", help="config x split-count grid with the wide combine")
    ap.add_argument("--combine", action="store_true", help="v4's combine vs the wide one vs none")
    args = ap.parse_args()
    print("command:", " ".join(["python3"] + sys.argv))
    print(f"gpu: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    pools = {256: bm.make_pool(16384, 256, gen), 64: bm.make_pool(32768, 64, gen)}
    if args.ncu:
        s, cfg = NCU_CASES[args.ncu]
        inp = bm.Inputs(s, (pools[s.page], pools[s.extra_page]), gen)
        for i in range(4):
            call(inp, i, cfg, None, False)
        torch.cuda.synchronize()
        return
    if args.splits:
        return split_grid(pools, gen)
    if args.combine:
        return combine_costs(pools, gen)
    names = list(VARIANTS) + list(SMALL_B)
    print("| shape | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for s in SHAPES:
        inp = bm.Inputs(s, (pools[s.page], pools[s.extra_page]), gen)
        ref = call(inp, 0, BASE, None, False)[0].float()
        cells = []
        for n in names:
            if n in SMALL_B and s.B > 4:
                cells.append("-")
                continue
            cfg, splits, skip = {**VARIANTS, **SMALL_B}[n]
            if not skip:
                out = call(inp, 0, cfg, splits, skip)[0].float()
                err = ((out - ref).abs().max() / ref.abs().max()).item()
                assert err < 2e-2, f"{n} on {s.name}: rel diff {err:.2e} from h32t32"
            t = bm.graph_time_us([lambda i=i: call(inp, i, cfg, splits, skip) for i in range(bm.ROTATE)])
            cells.append(f"{t:.1f}")
        print(f"| {s.name} | " + " | ".join(cells) + " |", flush=True)


GRID_CONFIGS = {
    "h32t32": BASE,
    "h16t64": (16, 64, 8, 1, False, True, 2, 0),
    "h16t32": (16, 32, 8, 1, False, True, 2, 0),
    "h16t16w4": (16, 16, 4, 1, False, True, 2, 0),
}
GRID_SHAPES = [bm.Shape(B, 64, 128, 512) for B in (1, 2, 4, 8, 16, 32, 64, 128)]
GRID_SHAPES += [bm.Shape(B, H, 128, 512) for H in (16, 128) for B in (1, 4, 16, 64)]
GRID_SHAPES += [bm.Shape(B, 64, 2048, 0) for B in (1, 16, 64)]


def split_grid(pools, gen):
    """Per shape and config: time at split multipliers of the one-wave rule (x1, x2, x4) and at
    1 split, with the wide combine; prints the best per config and overall."""
    print("| shape | " + " | ".join(GRID_CONFIGS) + " | best |")
    print("|---|" + "---|" * (len(GRID_CONFIGS) + 1))
    for s in GRID_SHAPES:
        inp = bm.Inputs(s, (pools[s.page], pools[s.extra_page]), gen)
        width = s.topk + s.extra_topk
        cells, best = [], (1e9, "")
        for name, cfg in GRID_CONFIGS.items():
            hg = triton.cdiv(s.H, cfg[0])
            rule = v6.pick_num_splits(s.B, hg, width, 132)
            tiles = triton.cdiv(width, cfg[1])
            opts = sorted({1, rule, min(tiles, 2 * rule), min(tiles, 4 * rule)})
            res = []
            for n in opts:
                t = bm.graph_time_us([lambda i=i: call(inp, i, cfg, n, False) for i in range(bm.ROTATE)], replays=10)
                res.append((t, n))
                best = min(best, (t, f"{name}@{n}"))
            cells.append(" ".join(f"{t:.1f}@{n}" for t, n in res))
        print(f"| {s.name} | " + " | ".join(cells) + f" | {best[0]:.1f} {best[1]} |", flush=True)


def combine_costs(pools, gen):
    """Decode + v4's combine, decode + wide combine, decode alone, at the v4 split rule."""
    print("| shape | config@splits | v4 combine | wide combine | no combine |")
    print("|---|---|---:|---:|---:|")
    for s in [bm.Shape(B, 64, 128, 512) for B in (1, 4, 16, 32)] + [bm.Shape(16, 64, 2048, 0)]:
        inp = bm.Inputs(s, (pools[s.page], pools[s.extra_page]), gen)
        for name in ("h32t32", "h16t64"):
            cfg = GRID_CONFIGS[name]
            n = v6.pick_num_splits(s.B, triton.cdiv(s.H, cfg[0]), s.topk + s.extra_topk, 132)
            t = []
            for wide, skip in ((False, False), (True, False), (True, True)):
                def c(i, wide=wide, skip=skip):
                    a = inp.args(i)
                    return v6.mma_sparse_decode(*a[:5], bm.SCALE, *a[7:], config=cfg, num_splits=n,
                                                skip_combine=skip, wide_combine=wide)
                t.append(bm.graph_time_us([lambda i=i: c(i) for i in range(bm.ROTATE)]))
            print(f"| {s.name} | {name}@{n} | " + " | ".join(f"{x:.1f}" for x in t) + " |", flush=True)


if __name__ == "__main__":
    main()
