"""P1's decode under the box's Triton and a carried one (3.8: SGLang 0.5.23's), beside FlashInfer's sm_120
decode, in one call: the evidence for the 0.5.23 line's default.

    python3 -m bench.kernels.triton_lines --triton /tmp/triton-3.8.0 --peer /tmp/peer-0.7.2 --peer /tmp/peer-0.7.4 \\
        --out RESULTS/lines [--heads 8,16,32,64] [--batches 1,2,4,8,16,32,64,128] [--topk-heads 8,64] [--budget 540]
    python3 -m bench.kernels.triton_lines --triton /tmp/triton-3.9.0 --fp-fusion both --release-tree DIR --out DIR
    python3 -m bench.kernels.triton_lines ... --rows v41 --tree DIR --heads 8,16   # V4.1-Flash's rows (bench_mma_decode)
    python3 -m bench.kernels.triton_lines --report DIR      # the tables again from a saved run; writes nothing

Runs bench_mma_decode once per (Triton, FlashInfer peer): the box's Triton with the first peer, then the
carried Triton (`--triton`: a folder `python3 -m bench.airgapped.carry_triton install` made, put first on PYTHONPATH)
with every peer. Only one FlashInfer peer fits a process (it installs its own `flashinfer` package), so the
peers are separate runs; every run draws the same inputs (one seeded generator, the same shapes in the same
order), and "ours" is timed in every run, so two runs under one Triton show the run-to-run spread. Each
run's log (every row a JSON line as it finishes, then the tables) lands in OUT/<run>/; the merged table
joins the rows by shape. The rule the 0.5.23 default follows (README "Release lines"): per row of the
run under the carried Triton with the pinned FlashInfer (the first peer), ours is at least as accurate
(error vs float64) and not slower than the faster of FlashInfer's two plans (the 132- and 188-SM split
heuristics). The verdict prints the rows where it holds, and by how much it misses where it does not;
the routing lines then say, per head count and cache width, at which row counts FlashInfer was the faster
(what the 0.5.23 routing table is set from).
Without a peer, ours is timed under each Triton alone and no rule is judged. `--fp-fusion both`: every run also
times ours with the FP fusion setting the kernels do not state (bench_mma_decode's), and a table shows both per
Triton. `--release-tree`: bench_mma_decode's (the release's register_custom_op from a folder, not the wheel).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.command import command_line
from serving import REPO

LOG = "bench_mma_decode.txt"
PEER_SMS = (132, 188)


def triton_release(folder: Path | None) -> str:
    """The Triton release a run imports: the carried folder's, or this python3's own."""
    if folder is None:
        out = subprocess.run([sys.executable, "-c", "import triton; print(triton.__version__)"],
                             capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", (folder / "triton" / "__init__.py").read_text())
    return found.group(1) if found else "unknown"


def peer_release(folder: Path) -> str:
    return json.loads((folder / "SOURCES.json").read_text())["flashinfer"]


def plan_runs(triton: Path | None, peers: list[Path], box_peer: bool = True) -> list[dict]:
    """The box's Triton with the first peer (box_peer False: ours alone, the baseline), then the carried Triton
    with each peer."""
    runs = [{"triton": None, "peer": peers[0] if peers and box_peer else None}]
    if triton is not None:
        runs += [{"triton": triton, "peer": p} for p in peers] or [{"triton": triton, "peer": None}]
    for run in runs:
        run["triton_release"] = triton_release(run["triton"])
        run["flashinfer"] = peer_release(run["peer"]) if run["peer"] else None
        run["name"] = f"triton-{run['triton_release']}" + (f"_fi-{run['flashinfer']}" if run["flashinfer"] else "")
    return runs


def run_one(run: dict, out: Path, bench_args: list[str], timeout: float) -> int:
    folder = out / run["name"]
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if run["triton"] is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(run["triton"]), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, "-m", "bench.kernels.bench_mma_decode", "--no-upstream", *bench_args, "--out", str(folder)]
    cmd += ["--peer", str(run["peer"]), "--peer-sms", ",".join(map(str, PEER_SMS))] if run["peer"] else ["--peer", "none"]
    start = time.time()
    with open(folder / LOG, "w") as log:
        try:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    print(f"[lines] {run['name']}: rc={rc} in {time.time() - start:.0f} s ({folder / LOG})", flush=True)
    return rc


def load_rows(folder: Path) -> tuple[dict, list[dict]]:
    """A run's header facts and its rows, from the log (every row is a JSON line as soon as it is timed, so a
    run cut short still gives the rows it finished)."""
    head, rows = {}, []
    for line in (folder / LOG).read_text().splitlines():
        if line.startswith("{") and '"shape"' in line:
            rows.append(json.loads(line))
        elif line.startswith(("gpu:", "flashinfer sm_120 peer:", "command:")):
            head[line.split(":", 1)[0]] = line.split(":", 1)[1].strip()
    return head, rows


def best_peer(row: dict) -> tuple[float | None, float | None, int | None]:
    """FlashInfer's faster plan in a row: (time, its error, SM count)."""
    timed = [(row[f"fi{sm}_us"], row.get(f"fi{sm}_err"), sm) for sm in PEER_SMS
             if isinstance(row.get(f"fi{sm}_us"), (int, float))]
    return min(timed) if timed else (None, None, None)


def verdict(rows: list[dict]) -> tuple[list[str], list[str]]:
    """(shapes where the rule holds, one line per shape where it misses, saying by how much)."""
    held, missed = [], []
    for row in rows:
        us, err, sm = best_peer(row)
        if us is None or not isinstance(row.get("mma_us"), (int, float)):
            missed.append(f"{row['shape']}: not measured (ours or FlashInfer missing)")
            continue
        slower, less_accurate = row["mma_us"] > us, row["mma_err"] > err
        if not (slower or less_accurate):
            held.append(row["shape"])
            continue
        why = []
        if slower:
            why.append(f"{row['mma_us'] / us:.2f}x FlashInfer's time ({row['mma_us']:.1f} vs {us:.1f} us @{sm} SMs)")
        if less_accurate:
            why.append(f"error {row['mma_err']:.1e} vs {err:.1e}")
        missed.append(f"{row['shape']}: " + "; ".join(why))
    return held, missed


def fmt(x, spec=".1f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def fusion_table(runs: list[dict], by_shape: dict, shapes: list[str]) -> None:
    """Ours with FP fusion on and off under each Triton (runs that timed both: --fp-fusion both)."""
    timed = [r for r in runs if any("fusion_off_us" in row or "fusion_on_us" in row for row in by_shape[r["name"]].values())]
    seen, per_triton = set(), []
    for r in timed:   # one run per Triton release: the first
        if r["triton_release"] not in seen:
            seen.add(r["triton_release"])
            per_triton.append(r)
    if not per_triton:
        return
    cols = ["shape"] + [f"fusion {k} @triton {r['triton_release']} us" for r in per_triton for k in ("on", "off")]
    cols += ["err on / off: " + " / ".join(f"@{r['triton_release']}" for r in per_triton)]
    print("\nFP fusion (ours, same inputs; enable_fp_fusion on / off):")
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for shape in shapes:
        rows = [by_shape[r["name"]].get(shape, {}) for r in per_triton]
        cells = [shape] + [fmt(row.get(f"fusion_{k}_us")) for row in rows for k in ("on", "off")]
        errs = [f"{fmt(row.get('fusion_on_err'), '.2e')} / {fmt(row.get('fusion_off_err'), '.2e')}" for row in rows]
        print("| " + " | ".join(cells + [" ; ".join(errs)]) + " |")


def report(out: Path) -> int:
    runs = json.loads((out / "runs.json").read_text())
    loaded = {r["name"]: load_rows(out / r["name"]) for r in runs}
    for r in runs:
        head, rows = loaded[r["name"]]
        print(f"{r['name']}: {len(rows)} rows; {head.get('gpu', 'no gpu line')}; peer: {head.get('flashinfer sm_120 peer', '-')}")
    box = runs[0]
    carried = [r for r in runs if r["triton"] is not None]
    by_shape = {name: {row["shape"]: row for row in rows} for name, (_, rows) in loaded.items()}
    shapes = [row["shape"] for row in loaded[box["name"]][1]]
    for r in carried:
        shapes += [s for s in by_shape[r["name"]] if s not in shapes]
    ours = [box] + carried[:1]
    peers = [r for r in carried or [box] if r["flashinfer"]]
    cols = ["shape", "HBM floor us"] + [f"ours @triton {r['triton_release']} us [config]" for r in ours]
    cols += [f"FI {r['flashinfer']} @{sm} us" for r in peers for sm in PEER_SMS]
    cols += ["err: " + " / ".join([f"ours@{r['triton_release']}" for r in ours] + [f"FI {r['flashinfer']}" for r in peers])]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for shape in shapes:
        rows = {name: rows.get(shape, {}) for name, rows in by_shape.items()}
        any_row = next(r for r in rows.values() if r)
        cells = [shape, fmt(any_row.get("floor_us"), ".2f")]
        cells += [f"{fmt(rows[r['name']].get('mma_us'))} [{rows[r['name']].get('mma_config', '-')}]" for r in ours]
        cells += [fmt(rows[r["name"]].get(f"fi{sm}_us")) for r in peers for sm in PEER_SMS]
        errs = [fmt(rows[r["name"]].get("mma_err"), ".1e") for r in ours]
        errs += [fmt(min([e for sm in PEER_SMS if isinstance(e := rows[r["name"]].get(f"fi{sm}_err"), float)],
                         default=None), ".1e") for r in peers]
        print("| " + " | ".join(cells + [" / ".join(errs)]) + " |")
    same_triton = [r for r in carried if r["triton_release"] == carried[0]["triton_release"]] if carried else []
    if len(same_triton) > 1:
        a, b = by_shape[same_triton[0]["name"]], by_shape[same_triton[1]["name"]]
        spread = [abs(a[s]["mma_us"] / b[s]["mma_us"] - 1) for s in a if s in b
                  and isinstance(a[s].get("mma_us"), float) and isinstance(b[s].get("mma_us"), float)]
        if spread:
            print(f"\nrun to run (ours under triton {same_triton[0]['triton_release']}, two processes): "
                  f"median {sorted(spread)[len(spread) // 2] * 100:.1f} %, max {max(spread) * 100:.1f} % over {len(spread)} rows")
    fusion_table(runs, by_shape, shapes)
    judged = carried[0] if carried and carried[0]["flashinfer"] else None
    if judged is None:
        print("\nrule: not judged (no run under the carried Triton with a FlashInfer peer)")
        return 1 if any(r["flashinfer"] for r in runs) else 0
    held, missed = verdict(list(by_shape[judged["name"]].values()))
    print(f"\nrule (ours under triton {judged['triton_release']} at least as accurate as and not slower than "
          f"FlashInfer {judged['flashinfer']}'s faster plan, same run, same inputs): holds in {len(held)} of "
          f"{len(held) + len(missed)} rows")
    for line in missed:
        print("  misses", line)
    for line in routing(list(by_shape[judged["name"]].values())):
        print(line)
    return 0


def routing(rows: list[dict]) -> list[str]:
    """Per head count and cache width (the shape's first and last parts), the row counts (a row's B) where
    FlashInfer's faster plan took less time than ours, and where ours did: one line each, rows ascending."""
    groups: dict[tuple[str, str], dict[str, list[int]]] = {}
    for row in rows:
        us, _, _ = best_peer(row)
        if us is None or not isinstance(row.get("mma_us"), (int, float)) or "B" not in row:
            continue
        parts = row["shape"].split("/")
        heads, width = parts[0], parts[-1] if len(parts) > 2 else "-"
        side = "flashinfer" if us < row["mma_us"] else "ours"
        groups.setdefault((heads, width), {"flashinfer": [], "ours": []})[side].append(int(row["B"]))
    lines = []
    for (heads, width), sides in groups.items():
        fi, ours = sorted(sides["flashinfer"]), sorted(sides["ours"])
        lines.append(f"routing {heads} {width}: FlashInfer faster at rows {','.join(map(str, fi)) or 'none'}; "
                     f"ours at rows {','.join(map(str, ours)) or 'none'}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triton", type=Path, help="a carried Triton (bench.airgapped.carry_triton install's folder)")
    ap.add_argument("--peer", type=Path, action="append", default=[],
                    help="a built FlashInfer peer folder; the first is the line's pinned release (repeatable)")
    ap.add_argument("--out", type=Path, help="where each run's folder and runs.json go")
    ap.add_argument("--heads", default="8,16,32,64")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--topk-heads", default="8,64")
    ap.add_argument("--rows", default="flash", help="bench_mma_decode's row set: flash (the batch sweep) or v41")
    ap.add_argument("--extra-topks", default="512,1024", help="--rows v41: compressed top-k widths")
    ap.add_argument("--tree", type=Path, help="bench_mma_decode --tree: a slice of the line's patched tree")
    ap.add_argument("--line", help="bench_mma_decode --line: the release line (default: the newest, or PATCHKIT_LINE)")
    ap.add_argument("--box-without-peer", action="store_true",
                    help="time ours alone under the box's Triton (the baseline); FlashInfer only in the carried "
                         "Triton's runs, where the rule is judged (a shorter first run)")
    ap.add_argument("--budget", type=float, default=540, help="seconds for all runs together (default: %(default)s)")
    ap.add_argument("--fp-fusion", choices=("shipped", "both"), default="shipped",
                    help="both: every run also times ours with the other FP fusion setting (bench_mma_decode's)")
    ap.add_argument("--release-tree", type=Path, help="bench_mma_decode's --release-tree (bench/airgapped/release_slice.py)")
    ap.add_argument("--report", type=Path, metavar="DIR", help="print the tables of a saved run, time nothing")
    args = ap.parse_args(argv)
    if args.report:
        return report(args.report)
    if args.out is None:
        ap.error("--out is required unless --report")
    if args.tree and args.release_tree:
        ap.error("expected --tree or --release-tree (a tree slice holds its release's register_custom_op), found both")
    print("command:", command_line(), flush=True)
    runs = plan_runs(args.triton, args.peer, box_peer=not args.box_without_peer)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runs.json").write_text(json.dumps(
        [{k: (str(v) if isinstance(v, Path) else v) for k, v in r.items()} for r in runs], indent=1) + "\n")
    bench_args = ["--heads", args.heads, "--batches", args.batches, "--topk-heads", args.topk_heads,
                  "--rows", args.rows, "--extra-topks", args.extra_topks, "--fp-fusion", args.fp_fusion]
    bench_args += ["--line", args.line] if args.line else []
    bench_args += ["--tree", str(args.tree.resolve())] if args.tree else []
    bench_args += ["--release-tree", str(args.release_tree.resolve())] if args.release_tree else []
    deadline = time.time() + args.budget
    for i, run in enumerate(runs):
        left = deadline - time.time()
        run_one(run, args.out, bench_args, timeout=max(30.0, left / (len(runs) - i)))
    return report(args.out)


if __name__ == "__main__":
    sys.exit(main())
