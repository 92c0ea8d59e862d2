"""The plots in docs/, drawn from a benchmark's saved raw output (no GPU needed).

    python3 -m bench.plots                         # both, from the runs BENCHMARKS.md cites
    python3 -m bench.plots indexer [TXT] [--out PNG]       # P4: bench_indexer.py's output -> docs/indexer_bench.png
    python3 -m bench.plots mhc-pre [TXT] [--out PNG]       # P3: bench_mhc_pre.py's output -> docs/mhc_pre_bench.png
    python3 -m bench.kernels.bench_mma_decode --plot-from JSON [--plot PNG]   # P1 -> docs/mma_decode_bench.png (uses
                                                    # plot_mma_decode below and the overlay's own dispatch)

matplotlib is optional: without it a plot is refused with one line and nothing else changes. The indexer and
MHC-pre benches print markdown tables, and their saved output (the raw file in bench/runs) is what these
plots read; bench_mma_decode.py saves JSON and draws its plot at the end of a run.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from serving import REPO

RESULTS = REPO / "bench" / "runs"
# What BENCHMARKS.md shows: (raw output, picture).
DEFAULTS = {
    "indexer": (RESULTS / "2026-12-01-indexer-mhc" / "2026-12-01-bench_indexer.txt", REPO / "docs/indexer_bench.png"),
    "mhc-pre": (RESULTS / "2026-12-01-mhc-pdl-run2" / "2026-12-01-mhc-pdl-run2-bench_mhc_pre.txt", REPO / "docs/mhc_pre_bench.png"),
}


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def pyplot():
    """matplotlib.pyplot on the file-only backend, or PlotUnavailable with a one-line reason."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable("plots need matplotlib (pip install matplotlib); no plot drawn") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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


def shipped_times(rows: list[dict], pick_config) -> list[dict]:
    """Rows with `mma_us` replaced by the time of the config `pick_config(heads, batch)` picks now, where the
    run timed that config as a `--configs` column (a run made before a dispatch change); else as measured."""
    out = []
    for r in rows:
        col = f"cfg_{pick_config(r['H'], r['B'])}_us"
        out.append({**r, "mma_us": r[col]} if r.get(col) is not None else r)
    return out


def plot_mma_decode(rows: list[dict], out: Path) -> None:
    """Time per call and % of the HBM roofline against batch, window 128 + extra 512, per head count."""
    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    for H, style in ((64, "o-"), (16, "s-"), (8, "v-"), (128, "^-")):
        rs = [r for r in rows if r["H"] == H and r["extra_topk"]]
        if not rs:
            continue
        bs = [r["B"] for r in rs]
        ax[0].plot(bs, [r["mma_us"] for r in rs], style, label=f"ours H={H}")
        for key in sorted({k for r in rs for k in r if k.startswith("fi") and k.endswith("_us")}):  # bench/peers
            ax[0].plot(bs, [r.get(key) or float("nan") for r in rs], style[0] + ":", alpha=0.6,
                       label=f"FlashInfer 0.7.2 sm_120 @{key[2:-3]} SMs H={H}")
        if H == 64:
            ax[0].plot(bs, [r.get("upstream_us") or float("nan") for r in rs], "x--", label="upstream per-head H=64")
            ax[0].plot(bs, [r.get("flashmla_us") or float("nan") for r in rs], "d--", label="FlashMLA SM90 H=64")
            ax[0].plot(bs, [r["floor_us"] for r in rs], "k:", label="HBM floor")
        ax[1].plot(bs, [100 * r["floor_us"] / r["mma_us"] for r in rs], style, label=f"ours H={H}")
    ax[0].set(xscale="log", yscale="log", xlabel="batch (query rows)", ylabel="time per call (us)",
              title="window 128 + extra 512, CUDA-graph replay")
    ax[1].set(xscale="log", xlabel="batch (query rows)", ylabel="% of HBM roofline", title="ours: floor / time")
    for a in ax:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_indexer(path: Path, out: Path) -> None:
    plt = pyplot()
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
    plt.close(fig)


def plot_mhc(path: Path, out: Path) -> None:
    plt = pyplot()
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
    plt.close(fig)


def draw(kind: str, source: Path, out: Path) -> None:
    (plot_indexer if kind == "indexer" else plot_mhc)(source, out)
    print("plot:", out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", nargs="?", choices=[*DEFAULTS, "all"], default="all")
    ap.add_argument("source", nargs="?", type=Path, help="the raw output to draw (default: the one BENCHMARKS.md cites)")
    ap.add_argument("--out", type=Path, help="the picture to write (default: its docs/*.png)")
    args = ap.parse_args()
    if args.kind == "all" and (args.source or args.out):
        ap.error("a source or --out needs one kind")
    try:
        for kind in DEFAULTS if args.kind == "all" else [args.kind]:
            source, out = DEFAULTS[kind]
            draw(kind, args.source or source, args.out or out)
    except PlotUnavailable as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
