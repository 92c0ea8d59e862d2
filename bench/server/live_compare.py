"""Live numerics of the sm_120 decode path: the same greedy decodes on every decode backend, on the pinned
tree, and on deliberately broken kernels, with weights under which attention matters (TEST ONLY switches).

    OVERLAY_EMULATE_SM120=1 python3 -m bench.server.live_compare --bundle build/bundle --out DIR
                               [--variants pinned,mma,triton,torch,zero-attn,no-sink,drop-split]
                               [--output-len 256] [--batch 1,16] [--start-timeout 420]
    python3 -m bench.server.live_compare --report DIR        # the tables again from DIR's JSON files (writes nothing)

Every server runs the tiny DSv4 (serving/tiny_model.py: the real attention geometry) from the bundle with
CUDA graphs on and OVERLAY_DUMMY_INIT=scaled (serving/test_hooks/dummy_init.py; the same weights in every server).
Variants (bench/server/server_pool.py starts them side by side, then each is asked in turn):

    pinned      the pinned tree (its decode kernel is the per-head `triton` one)
    mma         patched, SGLANG_SM120_SPARSE_DECODE=mma (P1)
    triton      patched, =triton (the pinned kernel inside the patched build)
    torch       patched, =torch (the PyTorch reference; OVERLAY_GRAPH_SAFE_TORCH_DECODE=1 makes it capturable)
    zero-attn   patched mma, OVERLAY_TEST_BREAK_DECODE=zero-attn: the weights check (attention must matter)
    no-sink     patched mma, the sink not passed                 (a broken kernel: must FAIL)
    drop-split  patched mma, the last of 4 splits masked         (a broken kernel: must FAIL)

Two checks, both from the same servers (every one runs with OVERLAY_TEST_SHADOW_DECODE=1):

    kernel check  serving/test_hooks/shadow_decode.py compares every dispatcher call (prefill, warm-up and CUDA-graph
                  replays) with the tree's PyTorch reference on the same inputs; each server logs its largest
                  row error. Tolerance: SAFETY x the `triton` server's (the pinned kernel), at least
                  SHADOW_FLOOR. pinned, mma and torch must stay within it; the three broken kernels must not.
    logprobs      the tokens and top-k logprobs users get. Correct kernels must stay within the tolerance
                  calibrated on `triton` vs `torch`, and zeroed attention must leave it at some batch size
                  (the weights make attention matter). A sink ignored or a split dropped are reported here,
                  not required to fail: with FP8 activations two correct kernels' last-bit differences already
                  move the logprobs by ~0.5 nats (BENCHMARKS.md, "Live logprob comparison", run 9).

Prompts: fixed random token ids (PROMPT_SEED), batch 1 (prompt 0 alone) and batch 16 (prompts 0-15 in
one request, so they decode together), --output-len greedy tokens (ignore_eos), top TOP_LOGPROBS
logprobs per step. bench/server/logprob_compare.py compares per step over the common prefix and sets the
tolerances: kernel (triton vs torch), tree (pinned vs patched; P2-P4 change numerics too).

Writes DIR/<variant>.json (the decodes), DIR/<variant>-server.log, DIR/compare.json and prints the
table; exit 0 when every check came out as expected (good pairs within, broken pairs outside), else 1.
"""
from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import time
from pathlib import Path

from bench.server import bench_e2e
from bench.server import logprob_compare as lc
from bench.server import server_pool
from bench.command import command_line
from serving import smoke
from serving.test_hooks import emulate_sm120, shadow_decode

SPARSE = "SGLANG_SM120_SPARSE_DECODE"
DUMMY = {emulate_sm120.DUMMY_INIT_ENV: "scaled"}
SHADOW = {emulate_sm120.SHADOW_ENV: "1"}
VARIANTS = {
    "pinned": ("pinned", {}),
    "mma": ("patched", {SPARSE: "mma"}),
    "triton": ("patched", {SPARSE: "triton"}),
    "torch": ("patched", {SPARSE: "torch", emulate_sm120.GRAPH_SAFE_ENV: "1"}),
    "zero-attn": ("patched", {SPARSE: "mma", emulate_sm120.BREAK_ENV: "zero-attn"}),
    "no-sink": ("patched", {SPARSE: "mma", emulate_sm120.BREAK_ENV: "no-sink"}),
    "drop-split": ("patched", {SPARSE: "mma", emulate_sm120.BREAK_ENV: "drop-split"}),
}
# (name, reference, other, role): role calibrate-kernel / calibrate-tree set tolerances; check-* must pass;
# weights must fail at one batch size at least (attention matters); report rows are shown, not judged.
PAIRS = [
    ("triton vs torch", "torch", "triton", "calibrate-kernel"),
    ("mma vs torch", "torch", "mma", "check-kernel"),
    ("pinned vs patched-triton", "pinned", "triton", "calibrate-tree"),
    ("pinned vs patched-mma", "pinned", "mma", "check-tree"),
    ("attention zeroed vs torch", "torch", "zero-attn", "weights-kernel"),
    ("sink ignored vs torch", "torch", "no-sink", "report-kernel"),
    ("one split dropped vs torch", "torch", "drop-split", "report-kernel"),
]
# The kernel check's role of each variant: calibrate sets the tolerance, check must pass, red must fail.
SHADOW_ROLES = {"triton": "calibrate", "pinned": "check", "mma": "check", "torch": "check",
                "zero-attn": "red", "no-sink": "red", "drop-split": "red"}
SHADOW_FLOOR = 1e-3
PROMPT_SEED = 27
PROMPT_LENGTHS = (24, 200)          # each prompt's length is drawn from this range
TOP_LOGPROBS = 10                   # asked for; TOP_K of them compared (the rest bound missing tokens)
GRAPH_MAX_BS = 16
KV_TOKENS = 32768


def say(msg: str) -> None:
    print(f"[live {datetime.datetime.now(datetime.timezone.utc):%H:%M:%S}] {msg}", flush=True)


def prompts(n: int, seed: int = PROMPT_SEED) -> list[list[int]]:
    rng = random.Random(seed)
    # token ids 16..495: clear of the tiny tokenizer's special tokens at both ends
    return [[rng.randrange(16, 496) for _ in range(rng.randrange(*PROMPT_LENGTHS))] for _ in range(n)]


def request_body(batch: list[list[int]], output_len: int) -> dict:
    return {"input_ids": batch if len(batch) > 1 else batch[0], "return_logprob": True,
            "top_logprobs_num": TOP_LOGPROBS,
            "sampling_params": {"max_new_tokens": output_len, "temperature": 0, "ignore_eos": True}}


def sequences(answer) -> list[dict]:
    """sglang's /generate answer (one dict, or a list for a batch) as compare sequences."""
    out = []
    for item in answer if isinstance(answer, list) else [answer]:
        meta = item["meta_info"]
        out.append({"tokens": [int(t[1]) for t in meta["output_token_logprobs"]],
                    "logprobs": [float(t[0]) for t in meta["output_token_logprobs"]],
                    "top": [[(float(t[0]), int(t[1])) for t in step] for step in meta["output_top_logprobs"]]})
    return out


def shadow_reading(server: server_pool.Server) -> dict | None:
    """The server's last kernel-check line, after one more request so that it covers every decode step."""
    time.sleep(1.2)         # the hook logs at most once a second
    smoke.get_json(f"{server.base}/generate", request_body(prompts(1), 1))
    time.sleep(0.5)
    found = shadow_decode.last_reading(server.log_path.read_text(errors="replace"))
    return None if found is None else {"error": found[0], "calls": found[1]}


def decode_all(server: server_pool.Server, batches: list[int], output_len: int) -> dict:
    record = {}
    for b in batches:
        t0 = time.monotonic()
        answer = smoke.get_json(f"{server.base}/generate", request_body(prompts(b), output_len))
        record[f"batch{b}"] = sequences(answer)
        say(f"[{server.variant.name}] batch {b}: {len(record[f'batch{b}'])} x "
            f"{len(record[f'batch{b}'][0]['tokens'])} tokens in {time.monotonic() - t0:.1f} s")
    return record


# -- the comparison -------------------------------------------------------------------------------

def evaluate_shadow(readings: dict) -> dict:
    """The kernel check: each variant's largest row error against the torch reference, judged by its role."""
    tol = (max(SHADOW_FLOOR, lc.SAFETY * readings["triton"]["error"])
           if (readings.get("triton") or {}).get("error") is not None else None)
    rows, ok = [], tol is not None
    for name, role in SHADOW_ROLES.items():
        if name not in readings:
            continue
        got = readings[name]
        row = {"variant": name, "role": role, "error": got and got["error"], "calls": got and got["calls"],
               "tolerance": tol}
        if role == "calibrate":
            row["verdict"] = "calibration"
        elif got is None or tol is None:
            row["verdict"], ok = "no reading" if got is None else "no tolerance", False
        else:
            passes, expected = got["error"] <= tol, role == "check"
            row["verdict"] = ("PASS" if passes else "FAIL") + (" (expected)" if passes == expected else " (UNEXPECTED)")
            ok &= passes == expected
        rows.append(row)
    return {"tolerance": tol, "rows": rows, "all_as_expected": ok and bool(rows)}


def evaluate(decodes: dict, batches: list[int]) -> dict:
    """Every pair of PAIRS whose variants were run, per batch size, with tolerances and verdicts."""
    rows = []
    for name, ref, other, role in PAIRS:
        if ref not in decodes or other not in decodes:
            continue
        for b in batches:
            r = lc.compare_runs(decodes[ref][f"batch{b}"], decodes[other][f"batch{b}"])
            rows.append({"pair": name, "ref": ref, "other": other, "role": role, "batch": b,
                         **{k: v for k, v in r.items() if k != "per_sequence"},
                         "per_sequence_max": [s["max_diff"] for s in r["per_sequence"]],
                         "per_sequence_divergence": [s["first_divergence"] for s in r["per_sequence"]]})
    kernel = [r for r in rows if r["role"] == "calibrate-kernel"]
    tree = [r for r in rows if r["role"] == "calibrate-tree"]
    tol_kernel = lc.kernel_tolerance(kernel) if kernel else None
    tol_tree = lc.tree_tolerance(tol_kernel, tree) if tree and tol_kernel is not None else None
    # a comparison that compared nothing, or could not judge a row, has not shown anything
    ok = bool(rows)
    for r in rows:
        tol = tol_tree if r["role"].endswith("tree") else tol_kernel
        r["tolerance"] = tol
        if r["role"].startswith("calibrate") or tol is None:
            r["verdict"] = "calibration" if r["role"].startswith("calibrate") else "no tolerance"
            ok &= r["role"].startswith("calibrate")
            continue
        passes, why = lc.verdict(r, tol)
        r["why"] = why
        if r["role"].startswith("check"):
            r["verdict"] = "PASS (expected)" if passes else "FAIL (UNEXPECTED)"
            ok &= passes
        else:           # weights / report rows: said, judged below (weights) or not at all (report)
            r["verdict"] = "within" if passes else "outside"
    weights = [r for r in rows if r["role"].startswith("weights")]
    if weights:         # attention matters: zeroing it leaves the tolerance at one batch size at least
        ok &= any(r["verdict"] == "outside" for r in weights)
    return {"tol_kernel": tol_kernel, "tol_tree": tol_tree, "rows": rows, "all_as_expected": ok}


def fmt(x, digits=3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def table(result: dict) -> str:
    out = [f"kernel tolerance {fmt(result['tol_kernel'])} nats ({lc.SAFETY:g} x triton vs torch, floor "
           f"{lc.FLOOR_NATS:g}); tree tolerance {fmt(result['tol_tree'])} nats (kernel + {lc.SAFETY:g} x pinned "
           f"vs patched-triton); top-{lc.TOP_K} logprobs, common prefix",
           "| pair | batch | max abs logprob diff | median step diff | sequences diverged | first divergence "
           "| tolerance | verdict |",
           "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        out.append(f"| {r['pair']} | {r['batch']} | {fmt(r['max_diff'])} | {fmt(r['median_step_diff'])} | "
                   f"{r['diverged']}/{r['sequences']} | {'-' if r['first_divergence'] is None else r['first_divergence']} "
                   f"| {fmt(r['tolerance'])} | {r['verdict']}{' - ' + r['why'] if r.get('why') else ''} |")
    out.append("logprobs: all as expected" if result["all_as_expected"] else "logprobs: NOT all as expected")
    return "\n".join(out)


def shadow_table(result: dict) -> str:
    out = [f"kernel check: largest row error of each server's dispatcher against the torch reference, every call; "
           f"tolerance {fmt(result['tolerance'])} ({lc.SAFETY:g} x triton's, floor {SHADOW_FLOOR:g})",
           "| variant | calls checked | largest row error | tolerance | verdict |", "|---|---:|---:|---:|---|"]
    for r in result["rows"]:
        out.append(f"| {r['variant']} | {'-' if r['calls'] is None else r['calls']} | {fmt(r['error'])} | "
                   f"{fmt(r['tolerance'])} | {r['verdict']} |")
    out.append("kernel check: all as expected" if result["all_as_expected"] else "kernel check: NOT all as expected")
    return "\n".join(out)


def report(out_dir: Path, batches: list[int], write: bool = True) -> int:
    """The tables from out_dir's decodes; write=True (a run) also saves compare.json. `--report` passes False:
    re-reading a results folder, committed ones included, must not rewrite it."""
    records = {p.name.split(".")[0]: bench_e2e.load_json(p)
               for p in sorted([*out_dir.glob("*.json"), *out_dir.glob("*.json.gz")])
               if p.name.split(".")[0] in VARIANTS}   # compare.json and servers.json are not variants
    result = evaluate({v: r["decodes"] for v, r in records.items()}, batches)
    shadow = {v: r["shadow"] for v, r in records.items() if "shadow" in r}   # runs before 2026-12-03 had none
    result["kernel_check"] = evaluate_shadow(shadow) if shadow else None
    if write:
        (out_dir / "compare.json").write_text(json.dumps(result, indent=1) + "\n")
    if result["kernel_check"]:
        print(shadow_table(result["kernel_check"]))
    print(table(result))
    ok = result["all_as_expected"] and (result["kernel_check"] or {}).get("all_as_expected", False)
    print("all as expected" if ok else "NOT all as expected")
    return 0 if ok else 1


# -- command line ---------------------------------------------------------------------------------

def variant_list(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected variants from {', '.join(VARIANTS)}, found {text!r}")
    return names


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python3 -m bench.server.live_compare", description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", type=Path, help="offline bundle dir or installed SITE_ROOT (required to run)")
    ap.add_argument("--out", type=Path, help="results dir (required)")
    ap.add_argument("--variants", type=variant_list, default=list(VARIANTS))
    ap.add_argument("--batch", type=bench_e2e.int_list, default=[1, 16])
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--eager", action="store_true",
                    help="no CUDA graphs (the same kernels, eagerly; for a box where graph capture does not finish)")
    ap.add_argument("--start-timeout", type=float, default=420.0, help="seconds for every server to be healthy")
    ap.add_argument("--dummy-init", choices=("scaled", "sglang"), default="scaled",
                    help="scaled: OVERLAY_DUMMY_INIT=scaled (attention matters); sglang: SGLang's own dummy weights "
                         "(flat logits: a comparison cannot fail; for telling a weights problem from a kernel one)")
    ap.add_argument("--report", type=Path, metavar="DIR", help="print the tables from DIR's JSON files and stop")
    return ap.parse_args(argv)


def server_variants(args: argparse.Namespace) -> list[server_pool.Variant]:
    """One server per --variants name: its tree, the weights, the kernel check (every server) and its own switches."""
    # graphs only for the batch sizes decoded: each captured size compiles its own kernels on a cold box
    graphs = (["--disable-cuda-graph"] if args.eager else
              ["--cuda-graph-max-bs-decode", str(max(args.batch)),
               "--cuda-graph-bs-decode", *map(str, sorted(set(args.batch)))])
    dummy = DUMMY if args.dummy_init == "scaled" else {}
    return [server_pool.Variant(v, VARIANTS[v][0], {**dummy, **SHADOW, **VARIANTS[v][1]},
                                extra_args=[*graphs, "--max-total-tokens", str(KV_TOKENS), "--random-seed", "0"])
            for v in args.variants]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        return report(args.report, args.batch, write=False)
    if not args.bundle or not args.out:
        print("live_compare: expected --bundle DIR and --out DIR (or --report DIR), found "
              f"{'no --bundle' if not args.bundle else 'no --out'}", file=sys.stderr)
        return 2
    if max(args.batch) > GRAPH_MAX_BS:
        print(f"live_compare: --batch: expected at most {GRAPH_MAX_BS} (the captured graphs), found {max(args.batch)}",
              file=sys.stderr)
        return 2
    rc, site = server_pool.gate_trees(args.bundle, {VARIANTS[v][0] for v in args.variants}, args.out, say)
    if rc:
        return rc
    servers = server_pool.build(server_variants(args), site, sys.executable, args.out)
    with server_pool.sigterm_as_exit():
        return _run(servers, args)


def _run(servers, args) -> int:
    try:
        # one server first, alone: it fills the shared Triton and JIT caches, so the others start from warm
        # caches instead of compiling the same kernels side by side
        first = [s for s in servers if s.variant.tree == "patched"][:1] or servers[:1]
        rest = [s for s in servers if s not in first]
        server_pool.start_all(first, say)
        server_pool.wait_all(first, args.start_timeout, say)
        server_pool.start_all(rest, say)
        server_pool.wait_all(rest, args.start_timeout, say)
        for s in servers:
            if s.error:
                continue
            record = {"variant": s.variant.name, "tree": s.variant.tree, "server_command": s.launch.shell(),
                      "bench_command": command_line(), "startup_s": s.startup_s, "output_len": args.output_len}
            try:
                record["decodes"] = decode_all(s, args.batch, args.output_len)
                record["shadow"] = shadow_reading(s)
                say(f"[{s.variant.name}] kernel check: {record['shadow']}")
            except smoke.SmokeFailure as exc:
                s.error = str(exc)
                say(f"[{s.variant.name}] FAIL: {exc}")
                continue
            (args.out / f"{s.variant.name}.json").write_text(json.dumps(record) + "\n")
    finally:
        server_pool.stop_all(servers, say)
        server_pool.say_key_lines(servers, say, args.out)
    failed = [s.variant.name for s in servers if s.error]
    rc = report(args.out, args.batch)
    if failed:
        say(f"servers that failed: {', '.join(failed)}")
    return 1 if failed else rc


if __name__ == "__main__":
    sys.exit(main())
