"""GPU time per kernel name in torch-profiler chrome traces, as a few KB of JSON a results folder can keep.

    python3 -m bench.server.trace_summary DIR [--top 15] > kernels.json

Every *.trace.json(.gz) under DIR: for each trace, the total kernel time and the `--top` kernels by time
(name cut to 100 characters, microseconds, launches). The traces themselves are 0.1-0.5 MB each; what is copied
to the GPU machine (the tree and the offline bundle) stays within the bundle's budget, so committed results keep this
instead.

Reading a trace (load_trace, kernel_events) lives here; bench/server/decode_share.py counts its attention share with it.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path


def load_trace(path: Path) -> dict:
    """One chrome trace, gzipped or not (torch's profiler writes .trace.json.gz)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def kernel_events(trace: dict):
    """(name, us) of each GPU kernel in a trace: complete events of category kernel, not the runtime calls
    (cudaGraphLaunch and the like) that launched them."""
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "X" and str(ev.get("cat", "")).lower() == "kernel":
            yield str(ev.get("name", "")), float(ev.get("dur", 0.0))


def kernel_table(trace: dict, top: int) -> dict:
    us: collections.Counter = collections.Counter()
    launches: collections.Counter = collections.Counter()
    for name, dur in kernel_events(trace):
        us[name[:100]] += dur
        launches[name[:100]] += 1
    return {"kernel_us": round(sum(us.values()), 1),
            "top": [{"name": n, "us": round(t, 1), "launches": launches[n]} for n, t in us.most_common(top)]}


def summarize(folder: Path, top: int) -> dict:
    out = {}
    for f in sorted(folder.rglob("*.trace.json*")):
        out[str(f.relative_to(folder))] = kernel_table(load_trace(f), top)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.server.trace_summary", description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"trace_summary: expected a folder of *.trace.json(.gz), found {args.folder} (not a folder)", file=sys.stderr)
        return 2
    json.dump(summarize(args.folder, args.top), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
