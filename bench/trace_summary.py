"""GPU time per kernel name in torch-profiler chrome traces, as a few KB of JSON a results folder can keep.

    python3 -m bench.trace_summary DIR [--top 15] > kernels.json

Every *.trace.json(.gz) under DIR: for each trace, the total kernel time and the `--top` kernels by time
(name cut to 100 characters, microseconds, launches). The traces themselves are 0.1-0.5 MB each; a device call
carries the tree and the offline bundle together under 64 MiB, so committed results keep this instead.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path


def kernel_table(trace: dict, top: int) -> dict:
    us: collections.Counter = collections.Counter()
    launches: collections.Counter = collections.Counter()
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "X" and str(ev.get("cat", "")).lower() == "kernel":
            name = str(ev.get("name", ""))[:100]
            us[name] += float(ev.get("dur", 0.0))
            launches[name] += 1
    return {"kernel_us": round(sum(us.values()), 1),
            "top": [{"name": n, "us": round(t, 1), "launches": launches[n]} for n, t in us.most_common(top)]}


def summarize(folder: Path, top: int) -> dict:
    out = {}
    for f in sorted(folder.rglob("*.trace.json*")):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            out[str(f.relative_to(folder))] = kernel_table(json.load(fh), top)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.trace_summary", description=__doc__.split("\n")[0])
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
