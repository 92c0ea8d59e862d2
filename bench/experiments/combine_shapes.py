"""H200 check of the split-combine launch shapes (decision evidence for `combine_launch`).

    [PATCHKIT_LINE=NAME] PATCHKIT_CACHE=$PWD/.carry python3 -m bench.experiments.combine_shapes

The kernel is the line's (PATCHKIT_LINE, else the newest), loaded as bench_mma_decode loads it.

Times the shipped decode at its default config and split count with the combine launched as
each shape in LAUNCHES and what `combine_launch` picks now, and with no combine (the decode alone), in the same CUDA-graph method as bench_mma_decode.py.
"""
from __future__ import annotations

import torch
import triton

from bench.kernels import bench_mma_decode as bm
from bench.command import command_line
from patchkit.lockfile import load_lock
from serving import REPO

mma = bm.load_ours(load_lock(REPO / "pin.lock"))
SHAPES = [bm.Shape(B, 64, 128, 512) for B in (1, 4, 8, 16, 32)] + [bm.Shape(B, 128, 128, 512) for B in (4, 16)]
SHAPES += [bm.Shape(B, 64, 2048, 0) for B in (1, 16)]


def fixed_shape(block_h, block_d, most_at_once):
    """A combine_launch stand-in with a fixed program shape."""

    def launch(batch, num_heads, num_splits):
        at_once = min(most_at_once, max(2, triton.next_power_of_2(num_splits))) if most_at_once > 1 else 1
        return (batch, triton.cdiv(num_heads, block_h), 512 // block_d), block_h, block_d, at_once, 4

    return launch


LAUNCHES = {  # label -> combine_launch stand-in; "now" is the shipped rule
    "16x512 1/step": fixed_shape(16, 512, 1),
    "16x128 2/load": fixed_shape(16, 128, 2),
    "16x128 4/load": fixed_shape(16, 128, 4),
    "1x128 all": fixed_shape(1, 128, 64),
}


class _SkipLaunch:
    """Stands in for the combine kernel: `kernel[grid](...)` does nothing (decode-only timing)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def main():
    print("command:", command_line())
    print(f"gpu: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    pools = {256: bm.make_pool(16384, 256, gen), 64: bm.make_pool(32768, 64, gen)}
    shipped = mma.combine_launch
    cols = list(LAUNCHES) + ["now", "no combine"]
    print("| shape | config @ splits | combine now picks | " + " | ".join(f"{c} (us)" for c in cols) + " |")
    print("|---|---|---|" + "---:|" * len(cols))
    for s in SHAPES:
        inp = bm.Inputs(s, (pools[s.page], pools[s.extra_page]), gen)
        cfg = mma.pick_config(s.H, s.B)
        n = mma.pick_num_splits(s.B, triton.cdiv(s.H, mma.MMA_CONFIGS[cfg]["launch"][0]), s.topk + s.extra_topk, mma._num_sms(0), cfg)
        if n == 1:
            continue
        call = lambda i: mma.mma_sparse_decode(*inp.args(i)[:5], bm.SCALE, *inp.args(i)[7:])  # noqa: E731
        times, outs = [], []
        for launch in list(LAUNCHES.values()) + [shipped]:
            mma.combine_launch = launch
            outs.append(call(0)[0].float())
            times.append(bm.graph_time_us([lambda i=i: call(i) for i in range(bm.ROTATE)]))
        mma.combine_launch = shipped
        for o in outs[1:]:
            assert (o - outs[0]).abs().max() <= 1e-2 * outs[0].abs().max(), f"{s.name}: combines disagree"
        real_kernel = mma._combine_splits_kernel
        mma._combine_splits_kernel = _SkipLaunch()
        times.append(bm.graph_time_us([lambda i=i: call(i) for i in range(bm.ROTATE)]))
        mma._combine_splits_kernel = real_kernel
        _, bh, bd, at_once, _ = shipped(s.B, s.H, n)
        print(f"| {s.name} | {cfg} @ {n} | {bh} x {bd}, {at_once}/load | " + " | ".join(f"{t:.1f}" for t in times) + " |", flush=True)


if __name__ == "__main__":
    main()
