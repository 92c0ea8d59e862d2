"""P1 benchmark: MMA sparse-MLA decode vs the pinned upstream per-head Triton kernel vs FlashMLA's
SM90 sparse decode vs the HBM roofline, on one GPU.

    PATCHKIT_CACHE=$PWD/.carry python3 -m bench.kernels.bench_mma_decode [--sweep] [--configs NAMES] [--out DIR]
                                          [--experiments NAMES]   # --no-upstream: no per-head kernel
    python3 -m bench.kernels.bench_mma_decode --plot-from JSON [--plot PNG]   # redraw a saved run, no GPU needed

Every kernel is timed by replaying a CUDA graph that holds ROTATE calls, each on its own
inputs (q, indices) drawn over a multi-GB KV pool, so KV comes from HBM rather than L2. The
roofline is the KV bytes a call must read (584 per valid token) over the copy bandwidth
measured in the same run. The upstream kernel is loaded from the pinned sglang wheel, and so is the
release's register_custom_op, which the overlay module registers its op with (the wheel is read with
--no-upstream and --plot-from too);
FlashMLA from the `sgl-flash-mla` wheel if it imports (use_legacy=True: the SM90 kernels).
A candidate kernel variant is timed as a config of the overlay module (`--configs`), next to the
shipped dispatch and with its error against float64; so is an experiment kernel's config
(`--experiments`: the warp-specialised WS_CONFIGS of bench/experiments/gluon_ws_decode.py).
`--fp-fusion both` also times ours with the other FP fusion setting than the kernels state (ENABLE_FP_FUSION),
same inputs, with its error against float64 (columns `fusion_on_*` / `fusion_off_*`, and a table). `--release-tree
DIR`: the release's register_custom_op from a folder (bench/airgapped/release_slice.py) instead of the pinned wheel. FlashMLA
runs below 64 heads with q padded to 64 heads, as SGLang does at TP > 1. The FlashInfer 0.7.2 sm_120
decode SGLang 0.5.23 defaults to is a peer column per `--peer-sms` SM count (its split heuristic's
input) where bench/peers built it for this GPU (`--peer`, default build/peer-flashinfer), fed 64-token
pages (SGLANG_OPT_SM120_DIRECT_SWA_KV=1). With several columns the last table holds them all.
`--line NAME`: the release line whose kernel, per-head kernel and register_custom_op are read (default: the newest,
or PATCHKIT_LINE, as apply.py picks it; harness/line_files.py says where the line keeps each).
`--rows v41`: the rows DeepSeek-V4.1-Flash hands the sparse attention instead of the batch sweep
(bench/kernels/v41_rows.py: decode, DSPARK target-verify, chunked prefill; window 128 + each of `--extra-topks`);
above 64 rows the peer is FlashInfer's prefill path, as SGLang 0.5.23 routes it. `--tree DIR`: ours from a slice of the
line's patched tree (bench/airgapped/tree_slice.py), with that release's register_custom_op, no wheel read.
"""
from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

import torch

from bench.kernels.decode_timing import (ROTATE, SCALE, Inputs, Shape, copy_bandwidth, graph_time_us,
                                  make_pool, print_header, reference_f64, rel_err)
from bench.kernels import v41_rows as V41
from harness.line_files import command_lock, line_file, line_path, overlay_file
from harness.mma_backend import load_mma_backend
from serving.mma_decode_cases import kernel_view
from harness.upstream import load_module
from serving import REPO


KERNEL = "flash_mla_sm120_mma.py"             # ours (P1), the line's overlay file
UPSTREAM_KERNEL = "flash_mla_sm120_triton.py"  # the per-head kernel of the line's pinned wheel
LINE_FILES = (KERNEL, UPSTREAM_KERNEL)         # what the bench reads, resolved per line (harness/line_files.py)


def load_upstream(lock):
    """flash_mla_sparse_decode_triton from the pinned sglang wheel of `lock` (sha256-checked by fetch)."""
    from patchkit.fetch import fetch

    rel = line_path(lock, UPSTREAM_KERNEL)
    wheel = fetch(lock.upstream("sglang"), log=lambda *_: None)
    # Under the checkout's build/ (a file the module's kernels are read back from, so not a temporary folder).
    dest = REPO / "build" / "upstream" / lock.line
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(rel, dest)
    return load_module(dest / rel, "pinned_flash_mla_sm120_triton")


def load_flashmla():
    try:
        import flash_mla  # noqa: F401
        from flash_mla import flash_mla_with_kvcache, get_mla_metadata

        return flash_mla_with_kvcache, get_mla_metadata, None
    except Exception as exc:  # report why, keep benchmarking the rest
        return None, None, f"{type(exc).__name__}: {exc}"[:200]


ROW_SETS = ("flash", "v41")


def row_set_shapes(rows: str, heads, batches, topk_heads, extra_topks=V41.EXTRA_TOPKS) -> list[Shape]:
    """The shapes a run times: "flash" (window 128 + extra 512 per head count x batch, then top-k 2048 at
    topk_heads x 1/16/64/128) or "v41" (per head count and extra top-k, every bench/kernels/v41_rows.py row)."""
    if rows == "flash":
        shapes = [Shape(B, H, 128, 512) for H in heads for B in batches]
        return shapes + [Shape(B, H, 2048, 0) for H in topk_heads for B in (1, 16, 64, 128)]
    if rows == "v41":
        return [Shape(n, H, V41.WINDOW, k, label=label, kind=kind)
                for H in heads for k in extra_topks for n, label, kind in V41.v41_rows()]
    raise ValueError(f"expected a row set of {', '.join(ROW_SETS)}, found {rows!r}")


# Replays per timing: 20, fewer for a call that gathers more than the batch sweep's largest (128 rows x 2048
# tokens), so a prefill chunk's milliseconds-long calls keep the run short; at least 3 (x 3 repeats x ROTATE).
REPLAY_TOKENS = 1 << 18


def replays_for(shape: "Shape") -> int:
    tokens = shape.B * (shape.topk + shape.extra_topk)
    return 20 if tokens <= REPLAY_TOKENS else max(3, 20 * REPLAY_TOKENS // tokens)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--line", help="the release line of pin.lock (default: the newest, or PATCHKIT_LINE)")
    ap.add_argument("--sweep", action="store_true", help="also time config / split variants (H=64)")
    ap.add_argument("--out", default=str(REPO / "build" / "bench"),
                    help="where the JSON and the PNG go (default: build/bench)")
    ap.add_argument("--no-upstream", action="store_true")
    ap.add_argument("--configs", default="",
                    help="comma-separated MMA_CONFIGS / GLUON_CONFIGS names, each timed as its own column "
                         "(default split rule) with its error against float64")
    ap.add_argument("--experiments", default="",
                    help="comma-separated WS_CONFIGS names of bench/experiments/gluon_ws_decode.py (not shipped), "
                         "each timed as its own column with its error against float64")
    ap.add_argument("--heads", default="64,16,128", help="head counts of the window + extra shapes")
    ap.add_argument("--topk-heads", default="64", help="head counts of the top-k 2048 shapes")
    ap.add_argument("--batches", default="1,4,16,64,128", help="batch sizes of the window + extra shapes")
    ap.add_argument("--rows", default="flash", choices=ROW_SETS,
                    help="flash: the batch sweep (--heads x --batches, --topk-heads); v41: V4.1-Flash's decode, "
                         "verify and prefill rows at --heads x --extra-topks")
    ap.add_argument("--extra-topks", default=",".join(map(str, V41.EXTRA_TOPKS)),
                    help="--rows v41: the compressed top-k widths beside the window of 128")
    ap.add_argument("--tree", type=Path,
                    help="a slice of the line's patched tree (bench.airgapped.tree_slice): ours from its kernel file, with "
                         "its release's register_custom_op (without it: the line's overlay file, the pinned wheel read)")
    ap.add_argument("--peer", type=Path, default=REPO / "build" / "peer-flashinfer",
                    help="the FlashInfer sm_120 peer's folder (bench.kernels.peers.flashinfer_sm120_sources + _build)")
    ap.add_argument("--peer-sms", default="132,188",
                    help="SM counts the peer's split heuristic is run with, one column each (132: H200, 188: RTX PRO 6000)")
    ap.add_argument("--plot-from", type=Path, metavar="JSON",
                    help="time nothing: draw the plot of a saved bench_mma_decode.json, 'ours' being the config "
                         "pick_config picks now where the run timed it as a --configs column")
    ap.add_argument("--plot", type=Path, metavar="PNG", help="where the plot goes (default: OUT/bench_mma_decode.png)")
    ap.add_argument("--fp-fusion", choices=("shipped", "both"), default="shipped",
                    help="both: also time ours with the FP fusion setting the kernels do not state, same inputs")
    ap.add_argument("--release-tree", type=Path,
                    help="a folder with the release's register_custom_op files (bench/airgapped/release_slice.py); "
                         "default: the pinned wheel")
    args = ap.parse_args()
    if args.tree and args.release_tree:
        ap.error("expected --tree or --release-tree (a tree slice holds its release's register_custom_op), found both")
    lock = command_lock(args.line)
    if args.plot_from:
        replot(args.plot_from, args.plot or REPO / "docs/mma_decode_bench.png", lock)
        return
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    print_header()
    mma = load_ours(lock, args.tree, args.release_tree)
    fusion = fusion_keys(mma) if args.fp_fusion == "both" else None
    if fusion:
        print(f"fp fusion: the kernels state enable_fp_fusion={mma.ENABLE_FP_FUSION} ({fusion[0]}); "
              f"also timed with {not mma.ENABLE_FP_FUSION} ({fusion[1]})")
    upstream = None if args.no_upstream else load_upstream(lock)
    fm_call, fm_meta, fm_err = load_flashmla()
    print("flashmla:", "sgl-flash-mla (use_legacy=True)" if fm_call else f"unavailable ({fm_err})")
    peer, peer_sms = load_flashinfer_peer(args.peer), [int(n) for n in args.peer_sms.split(",") if n]
    experiments, ws = [c for c in args.experiments.split(",") if c], None
    if experiments:
        try:
            from bench.experiments import gluon_ws_decode as ws
        except Exception as exc:  # report, keep benchmarking the rest
            print(f"experiments: not run ({type(exc).__name__}: {exc})"[:300])
    bw = copy_bandwidth()
    print(f"copy bandwidth (read+write): {bw / 1e12:.2f} TB/s")

    gen = torch.Generator(device="cuda").manual_seed(0)
    pools = {
        256: make_pool(16384, 256, gen),  # 2.4 GB
        64: make_pool(32768, 64, gen),  # 1.2 GB
    }
    # The peer reads the 256-token pool as 64-token pages (a 2.4 GB copy made once, by SGLang's split).
    peer_kv = peer.pages_of_64(kernel_view(pools[256], 256)) if peer else None

    heads = [int(h) for h in args.heads.split(",") if h]
    topk_heads = [int(h) for h in args.topk_heads.split(",") if h]
    configs = [c for c in args.configs.split(",") if c]
    batches = [int(b) for b in args.batches.split(",") if b]
    shapes = row_set_shapes(args.rows, heads, batches, topk_heads,
                            [int(k) for k in args.extra_topks.split(",") if k])
    print(f"rows: {args.rows}, {len(shapes)} shapes", flush=True)

    rows = []
    for s in shapes:
        inp = Inputs(s, (pools[s.page], pools[s.extra_page]), gen)
        row = {"shape": s.name, "H": s.H, "B": s.B, "kind": s.kind, "topk": s.topk, "extra_topk": s.extra_topk}
        row["floor_us"] = s.kv_bytes() / bw * 1e6
        ref = reference_f64(inp, 0)
        row["mma_config"] = mma.pick_config(s.H, s.B, sms=torch.cuda.get_device_properties(0).multi_processor_count)
        try:   # a shape ours fails at is a finding: recorded (mma_fail), the run goes on
            row["mma_err"] = rel_err(mma.flash_mla_sparse_decode_mma(*inp.args(0))[0], ref)
            row["mma_us"] = graph_time_us(
                [lambda i=i: mma.flash_mla_sparse_decode_mma(*inp.args(i)) for i in range(ROTATE)], replays_for(s))
            if fusion:
                row[f"{fusion[0]}_err"], row[f"{fusion[0]}_us"] = row["mma_err"], row["mma_us"]
                time_column(row, fusion[1], lambda i: with_fp_fusion(mma, not mma.ENABLE_FP_FUSION,
                                                                     mma.flash_mla_sparse_decode_mma, *inp.args(i)),
                            ref, min(10, replays_for(s)))
        except Exception as exc:
            row["mma_fail"] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"ours failed at {s.name}:", row["mma_fail"], flush=True)
        for name in configs:
            def call(i, cfg=config_spec(mma, name)):
                a = inp.args(i)
                return mma.mma_sparse_decode(*a[:5], SCALE, *a[7:], config=cfg)
            time_column(row, f"cfg_{name}", call, ref)
        for name in experiments if ws else []:
            def call(i, name=name):
                a = inp.args(i)
                return ws.ws_sparse_decode(*a[:5], SCALE, *a[7:], config=name)
            time_column(row, f"exp_{name}", call, ref)
        if upstream is not None:
            reps = 3 if s.B * s.H >= 64 * 64 else 10
            row["upstream_us"] = graph_time_us(
                [lambda i=i: upstream.flash_mla_sparse_decode_triton(*inp.args(i)) for i in range(ROTATE)], reps)
        if fm_call is not None and s.H <= 128:
            metas = [fm_meta()[0] for _ in range(ROTATE)]
            pad = 64 - s.H if s.H < 64 else 0  # FlashMLA's SM90 kernel takes 64 or 128 heads

            def fm(i):
                a = inp.args(i)
                q, sink = a[0], a[4]
                if pad:
                    q = torch.nn.functional.pad(q, (0, 0, 0, pad))
                    sink = torch.nn.functional.pad(sink, (0, pad))
                out = fm_call(q, a[1], None, None, 512, metas[i], None, SCALE, False, True,
                              indices=a[2], attn_sink=sink, extra_k_cache=a[7],
                              extra_indices_in_kvcache=a[8], topk_length=a[3],
                              extra_topk_length=a[9], use_legacy=True)
                return (out[0][:, :, : s.H],) + tuple(out[1:])

            try:
                row["flashmla_err"] = rel_err(fm(0)[0], ref)
                row["flashmla_us"] = graph_time_us([lambda i=i: fm(i) for i in range(ROTATE)])
            except Exception as exc:
                row["flashmla_err"] = f"{type(exc).__name__}: {exc}"[:200]
                print("flashmla failed:", row["flashmla_err"])
        if peer is not None:
            time_peer(peer, peer_sms, inp, peer_kv, ref, row, replays_for(s))
        rows.append(row)
        print(json.dumps(row), flush=True)
        del inp, ref
        torch.cuda.empty_cache()

    sweep = []
    if args.sweep:
        # Candidate configs (BLOCK_H, BLOCK_T, warps, stages) x split counts, every shape.
        variants = [(16, 32, 8, 1), (32, 32, 8, 1), (16, 16, 4, 1), (16, 64, 8, 1)]
        for s in shapes:
            inp = Inputs(s, (pools[s.page], pools[s.extra_page]), gen)
            width = s.topk + s.extra_topk
            for cfg in variants:
                for splits in (None, 1, 2, 4, 8, 16):
                    if splits is not None and (splits * 64 > width or (s.B >= 64 and splits > 4)):
                        continue
                    try:
                        us = graph_time_us([
                            lambda i=i: mma.mma_sparse_decode(*inp.args(i)[:5], SCALE, *inp.args(i)[7:],
                                                              config=cfg, num_splits=splits)
                            for i in range(ROTATE)], replays=10)
                    except Exception as exc:
                        us = None
                        print("variant failed", s.name, cfg, splits, exc)
                    rec = {"shape": s.name, "H": s.H, "B": s.B, "cfg": cfg, "splits": splits, "us": us}
                    sweep.append(rec)
                    print(json.dumps(rec), flush=True)
            del inp
        print_best(sweep)

    (out_dir / "bench_mma_decode.json").write_text(json.dumps({"bw": bw, "rows": rows, "sweep": sweep}, indent=1))
    failed = [r["shape"] for r in rows if "mma_us" not in r]
    if failed:
        print(f"ours failed at {len(failed)} shapes (mma_fail in their rows, left out of the tables):", ", ".join(failed))
    rows = [r for r in rows if "mma_us" in r]
    print_table(rows, bw)
    if peer is not None:
        print_peer_table(rows, peer_sms)
    if configs or experiments:
        print_config_table(rows, configs, experiments, peer_sms if peer else [])
    if fusion:
        print_fusion_table(rows)
    draw_plot(rows, args.plot or out_dir / "bench_mma_decode.png")


def fusion_keys(mma) -> tuple[str, str]:
    """(the key of the FP fusion setting the kernels state, the key of the other one): fusion_on / fusion_off."""
    shipped = "fusion_on" if mma.ENABLE_FP_FUSION else "fusion_off"
    return shipped, "fusion_off" if shipped == "fusion_on" else "fusion_on"


def with_fp_fusion(module, enabled: bool, fn, *args):
    """fn(*args) with the module's launches compiled with enable_fp_fusion=enabled (Triton keys its cache on it)."""
    saved = module.ENABLE_FP_FUSION
    module.ENABLE_FP_FUSION = enabled
    try:
        return fn(*args)
    finally:
        module.ENABLE_FP_FUSION = saved


def print_fusion_table(rows):
    """Ours with FP fusion on and off, same inputs, same process: time and error against float64."""
    print()
    print("| shape | ours, fusion on (us) | ours, fusion off (us) | off / on | rel. error vs float64: on / off |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        on, off = r.get("fusion_on_us"), r.get("fusion_off_us")
        errs = [r.get("fusion_on_err"), r.get("fusion_off_err")]
        print(f"| {r['shape']} | {fmt(on)} | {fmt(off)} | {fmt(off / on if on and off else None, 2)} | "
              + " / ".join("-" if e is None else f"{e:.2e}" for e in errs) + " |")


def load_ours(lock, tree: Path | None = None, release_tree: Path | None = None):
    """The MMA kernel module of `lock`'s line: the file of a slice of its patched tree (its release's
    register_custom_op), else the line's overlay file (register_custom_op from release_tree's files
    (bench/airgapped/release_slice.py), else from the line's pinned wheel, read through the patchkit cache)."""
    if tree is None:
        return load_mma_backend(overlay_file(lock, KERNEL), "flash_mla_sm120_mma", tree=release_tree,
                                line=None if release_tree else lock.line)
    path = line_file(lock, KERNEL).in_tree(tree)
    if not path.is_file():
        raise SystemExit(f"--tree: expected {path} (python3 -m bench.airgapped.tree_slice OUT), found no such file")
    print(f"ours: {path} (the patched {lock.line} tree's kernel, with its Gluon module where the tree has it)")
    return load_mma_backend(path, "flash_mla_sm120_mma", tree=Path(tree))


def time_column(row, key, call, ref, replays=10) -> None:
    """row[key + '_err' / '_us']: call(i)'s error against float64 and its time over the ROTATE input sets;
    a failure goes to row[key + '_fail'] and the run goes on."""
    try:
        row[f"{key}_err"] = rel_err(call(0)[0], ref)
        row[f"{key}_us"] = graph_time_us([lambda i=i: call(i) for i in range(ROTATE)], replays=replays)
    except Exception as exc:  # report, keep benchmarking the rest
        row[f"{key}_fail"] = f"{type(exc).__name__}: {exc}"[:300]
        print(f"{key} failed:", row[f"{key}_fail"])


def load_flashinfer_peer(src: Path):
    """The FlashInfer sm_120 peer, or None after one line saying why it is not run."""
    from bench.kernels.peers.flashinfer_sm120 import PeerUnavailable, load_peer

    try:
        peer = load_peer(src)
    except PeerUnavailable as exc:
        print(f"flashinfer sm_120 peer: not run ({exc})")
        return None
    print(f"flashinfer sm_120 peer: {src} (FlashInfer {peer.flashinfer_version} built for this GPU, "
          "called as SGLang 0.5.23 does)")
    return peer


def time_peer(peer, sms, inp, peer_kv, ref, row, replays=20) -> None:
    """Per SM count: the peer's error against float64 and its time, as row['fi<SMs>_err' / '_us']."""
    def call(i):
        a = inp.args(i)
        return peer.decode(q=a[0], k_cache=peer_kv, indices=a[2], topk_length=a[3], attn_sink=a[4],
                           head_dim_v=512, softmax_scale=SCALE, extra_k_cache=a[7],
                           extra_indices_in_kvcache=a[8], extra_topk_length=a[9])

    for sm in sms:
        peer.set_sm_count(sm)
        try:
            row[f"fi{sm}_err"] = rel_err(call(0)[0], ref)
            facts = peer.plan_facts()
            row[f"fi{sm}_plan"] = {k: facts.get(k) for k in ("implementation", "variant", "cpb", "active_splits")}
            row[f"fi{sm}_us"] = graph_time_us([lambda i=i: call(i) for i in range(ROTATE)], replays)
        except Exception as exc:  # report, keep benchmarking the rest
            row[f"fi{sm}_fail"] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"flashinfer peer ({sm} SMs) failed:", row[f"fi{sm}_fail"])
    peer.set_sm_count(None)


def print_peer_table(rows, sms):
    print()
    names = [f"FlashInfer 0.7.2 @{sm} SMs" for sm in sms]
    print("| shape | ours (us) | " + " | ".join(f"{n} (us)" for n in names) + " | FlashMLA SM90 (us) | "
          + " | ".join(f"{n} / ours" for n in names) + " | rel. error vs float64: ours / "
          + " / ".join(f"FI@{sm}" for sm in sms) + " / FlashMLA |")
    print("|---|---:|" + "---:|" * len(sms) + "---:|" + "---:|" * len(sms) + "---|")
    splits = lambda r, sm: (r.get(f"fi{sm}_plan") or {}).get("active_splits")  # noqa: E731
    for r in rows:
        errs = [r.get("mma_err")] + [r.get(f"fi{sm}_err") for sm in sms] + [r.get("flashmla_err")]
        ratios = [r[f"fi{sm}_us"] / r["mma_us"] if r.get(f"fi{sm}_us") else None for sm in sms]
        print(f"| {r['shape']} | {fmt(r['mma_us'])} | "
              + " | ".join(f"{fmt(r.get(f'fi{sm}_us'))} ({splits(r, sm)} splits)" for sm in sms)
              + f" | {fmt(r.get('flashmla_us'))} | " + " | ".join(fmt(x, 2) for x in ratios) + " | "
              + " / ".join("fail" if isinstance(e, str) else "-" if e is None else f"{e:.1e}" for e in errs) + " |")


def draw_plot(rows, path):
    from bench.plots import PlotUnavailable, plot_mma_decode  # bench/plots.py: every docs/ plot, matplotlib optional

    try:
        plot_mma_decode(rows, path)
        print("plot:", path)
    except PlotUnavailable as exc:  # the JSON is the result; the picture can be drawn later (--plot-from)
        print(exc)


def replot(saved: Path, path: Path, lock) -> None:
    from bench.plots import shipped_times

    mma = load_ours(lock)
    rows = shipped_times(json.loads(saved.read_text())["rows"], mma.pick_config)
    draw_plot(rows, path)


def config_spec(mma, spec: str):
    """A --configs entry: a config name of the kernel's tables (MMA_CONFIGS / GLUON_CONFIGS)."""
    if spec not in mma.MMA_CONFIGS and spec not in mma.GLUON_CONFIGS:
        raise SystemExit(f"--configs: expected a config name of the kernel's tables, found {spec!r}")
    return spec


def print_config_table(rows, names, experiments=(), sms=()):
    """One table of every column the run timed: --configs, --experiments, the peer per SM count, FlashMLA
    ('-': not timed or failed)."""
    cols = ([(n, f"cfg_{n}") for n in names] + [(n, f"exp_{n}") for n in experiments]
            + [(f"FI@{sm}", f"fi{sm}") for sm in sms] + [("FlashMLA", "flashmla")])
    print()
    print("| shape | HBM floor (us) | ours (us) | " + " | ".join(f"{c} (us)" for c, _ in cols[:-1])
          + " | FlashMLA SM90 (us) | rel. error vs float64: ours / " + " / ".join(c for c, _ in cols) + " |")
    print("|---|---:|---:|" + "---:|" * len(cols) + "---|")
    for r in rows:
        errs = [r.get("mma_err")] + [r.get(f"{k}_err") for _, k in cols]
        print(f"| {r['shape']} | {fmt(r['floor_us'], 2)} | {fmt(r['mma_us'])} | "
              + " | ".join(fmt(r.get(f"{k}_us")) for _, k in cols) + " | "
              + " / ".join("fail" if isinstance(e, str) else "-" if e is None else f"{e:.1e}" for e in errs) + " |")


def print_best(sweep):
    best = {}
    for r in sweep:
        if r["us"] is not None and (r["shape"] not in best or r["us"] < best[r["shape"]]["us"]):
            best[r["shape"]] = r
    print("\n| shape | best config | splits | us |\n|---|---|---|---|")
    for name, r in best.items():
        print(f"| {name} | {tuple(r['cfg'])} | {r['splits']} | {r['us']:.1f} |")


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def print_table(rows, bw):
    print()
    print("| shape | ours (us) | upstream per-head (us) | FlashMLA SM90 (us) | HBM floor (us) | ours vs upstream | ours vs FlashMLA | % of roofline |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        up, fm = r.get("upstream_us"), r.get("flashmla_us")
        print(f"| {r['shape']} | {fmt(r['mma_us'])} | {fmt(up)} | {fmt(fm)} | {fmt(r['floor_us'], 2)} | "
              f"{fmt(up / r['mma_us'] if up else None)}x | {fmt(fm / r['mma_us'] if fm else None, 2)}x | "
              f"{100 * r['floor_us'] / r['mma_us']:.0f}% |")


if __name__ == "__main__":
    main()
