"""Plots of the issue-14 runs from their raw benchmark output (markdown tables), no GPU needed.

    python3 bench/plot_indexer_mhc.py [--indexer FILE] [--mhc FILE]   # writes docs/indexer_bench.png, docs/mhc_pre_bench.png
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def table(path: Path) -> list[dict]:
    """The first markdown table of a benchmark's output, as dicts keyed by header."""
    rows, head = [], None
    for line in path.read_text().splitlines():
        if not line.startswith("|"):
            if head and rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if head is None:
            head = cells
        elif not set(cells[0]) <= set("-:"):
            rows.append(dict(zip(head, cells)))
    return rows


def plot_indexer(path: Path, out: Path) -> None:
    rows = table(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for batch, color in (("1", "tab:blue"), ("16", "tab:orange"), ("64", "tab:green")):
        sel = [r for r in rows if r["batch"] == batch]
        x = [int(r["real length (tokens)"]) for r in sel]
        ax.plot(x, [float(r["before ms"]) for r in sel], "--", color=color, marker="o", label=f"before, batch {batch}")
        ax.plot(x, [float(r["ours (P4) ms"]) for r in sel], "-", color=color, marker="s", label=f"ours, batch {batch}")
        ax.plot(x, [float(r["fp32 fallback ms"]) for r in sel], ":", color=color, label=f"pinned fp32 fallback, batch {batch}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("real length per row (tokens), 1M-token context")
    ax.set_ylabel("step time, ms (CUDA-graph replay)")
    ax.set_title(f"DSv4 indexer (P4), H200 — {path.name}")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def plot_mhc(path: Path, out: Path) -> None:
    rows = table(path)
    t = [int(r["T"]) for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    for key, style in (("fp32 eager", "k:"), ("before eager", "--"), ("fused eager", "-")):
        ax1.plot(t, [float(r[key]) for r in rows], style, marker="o", label=key.replace("fp32", "pinned fp32"))
    for key, style in (("fp32 graph", "k:"), ("before graph", "--"), ("fused graph", "-")):
        ax2.plot(t, [float(r[key]) for r in rows], style, marker="o", label=key.replace("fp32", "pinned fp32"))
    ax2.plot(t, [float(r["fp32 graph"]) / 5 for r in rows], color="0.6", lw=1, label="issue-14 target: pinned / 5")
    for ax, title in ((ax1, "eager call (host-bound at small T)"), (ax2, "CUDA-graph replay")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens T")
        ax.set_ylabel("us per call")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"DSv4 MHC-pre (P3), H200 — {path.name}")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--indexer", default=str(REPO / "bench/results/2026-12-01-bench_indexer.txt"))
    ap.add_argument("--mhc", default=str(REPO / "bench/results/2026-12-01-mhc-pdl-run2-bench_mhc_pre.txt"))
    args = ap.parse_args()
    plot_indexer(Path(args.indexer), REPO / "docs/indexer_bench.png")
    plot_mhc(Path(args.mhc), REPO / "docs/mhc_pre_bench.png")


if __name__ == "__main__":
    main()
