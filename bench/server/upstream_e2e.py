"""Each exported change measured end to end with the release's own client commands: the patched server with
every switch on, and again with one change's switch set back to upstream's path, each server alone on the GPU.

    OVERLAY_EMULATE_SM120=1 python3 -m bench.server.upstream_e2e --bundle DIR --out DIR --gsm8k FILE
                               [--variants all,P1-off,P3-off,P4-off,pinned] [--context 131072] [--layers 4]
                               [--num-prompts 64] [--input-len 1024] [--output-len 256] [--concurrency 16]
                               [--gsm8k-examples 100] [--gsm8k-max-tokens 256] [--start-timeout 420] [--tp 1]
                               [--warmup-runs 1]
    python3 -m bench.server.upstream_e2e --report DIR      # the table again from DIR's JSON files (writes nothing)

Per server, the two commands an upstream reviewer runs against a server, unchanged but for sizes:
  benchmark  `python3 -m sglang.bench_serving --backend sglang --dataset-name random-ids ...` (random-ids: `random`
             samples its text from ShareGPT, a download the GPU box cannot make), ignore_eos as its default;
             its --output-file JSONL gives output tok/s, median TPOT and TTFT, p99 ITL. It runs --warmup-runs
             times first with another --seed (not recorded): a server's first pass builds the Triton kernels
             of shapes CUDA-graph capture did not meet, a cost set by the machine's caches, not by the change
             (BENCHMARKS.md, "... one change at a time (2026-12-05)": the p99 ITL of a fresh machine's first server).
  accuracy   `python3 -m sglang.test.run_eval --eval-name gsm8k --gsm8k-data-path FILE ...` (5-shot, greedy, the
             chat API); its score and output tok/s. run_eval writes its report to /tmp/gsm8k_<model>.{json,html};
             they are moved into DIR.
The server is serving/serve_cmd.py's launch (the plain `sglang.launch_server` command, printed) on bench_e2e's
DeepSeek-V4-Flash-shaped model (--layers layers, real per-layer geometry, 512-token tiny vocabulary) with
OVERLAY_DUMMY_INIT=scaled random weights. Random weights answer GSM8K with noise: its score says the route
serves end to end, not model quality. A variant `X-off` is the patched tree with change X's switch at its
upstream value (OFF_SWITCHES), so `all` vs `X-off` is that change alone, everything else equal. The table
states `all / this` only between records measured after a warm-up run.

Writes DIR/<variant>.json (commands as run, parsed results), DIR/<variant>-{server.log,bench_serving.txt,
bench_serving.jsonl,gsm8k.txt,gsm8k.json,gsm8k.html.gz}; prints the command, GPU, versions and the table.
Exit 1 when a server or a client command failed (its row says which).
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.server import bench_e2e, server_pool
from serving import smoke
from serving.test_hooks import emulate_sm120

# The release's client entry points (0.5.14 is the line whose server runs on the GPU box; 0.5.23 moved the
# benchmark to sglang.benchmark.serving). tests/line_0_5_14/test_upstream_e2e.py checks them against [patch.reproduce].
BENCH_MODULE = "sglang.bench_serving"
EVAL_MODULE = "sglang.test.run_eval"

# The switch value that puts each change's code path back to upstream's (serving/serve_cmd.py OVERLAY_ENV
# holds the on values).
OFF_SWITCHES = {
    "P1": {"SGLANG_SM120_SPARSE_DECODE": "triton"},   # upstream's per-head Triton kernel
    "P3": {"SGLANG_SM120_MHC_PRE_TRITON": "0"},       # upstream's fp32 torch path
    "P4": {"SGLANG_SM120_INDEXER_TRITON": "0"},       # upstream's torch fallback over the whole page table
}
VARIANT_NAMES = ["all", *(f"{p}-off" for p in OFF_SWITCHES), "pinned"]
CLIENT_TIMEOUT_S = 420.0
# openai/grade-school-math grade_school_math/data/test.jsonl (1319 problems), the file run_eval downloads itself
# where it has internet (sglang/test/simple_eval_gsm8k.py GSM8K_URL).
GSM8K_TEST_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
T0 = time.monotonic()


def say(msg: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
    print(f"[upstream-e2e {now} +{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def variant_list(text: str) -> list[str]:
    names = [x for x in text.split(",") if x]
    bad = [x for x in names if x not in VARIANT_NAMES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected names from {','.join(VARIANT_NAMES)}, found {text!r}")
    return names


def variants(args, model_dir: Path) -> list[server_pool.Variant]:
    extra = ["--load-format", "dummy", "--cuda-graph-max-bs-decode", str(args.concurrency),
             "--max-running-requests", str(args.concurrency), "--swa-full-tokens-ratio", "1.0",
             "--random-seed", "0", "--served-model-name", bench_e2e.SERVED_NAME]
    out = []
    for name in args.variants:
        env = {emulate_sm120.DUMMY_INIT_ENV: "scaled"}
        if name.endswith("-off"):
            env.update(OFF_SWITCHES[name[:-len("-off")]])
        out.append(server_pool.Variant(name, "pinned" if name == "pinned" else "patched", env,
                                       model=str(model_dir), context=args.context, extra_args=list(extra), tp=args.tp))
    return out


def bench_argv(python: str, port: int, model_dir: Path, args, jsonl: Path) -> list[str]:
    return [python, "-m", BENCH_MODULE, "--backend", "sglang", "--host", "127.0.0.1", "--port", str(port),
            "--tokenizer", str(model_dir), "--dataset-name", "random-ids",
            "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
            "--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.concurrency),
            "--output-file", str(jsonl)]


def eval_argv(python: str, port: int, args) -> list[str]:
    return [python, "-m", EVAL_MODULE, "--host", "127.0.0.1", "--port", str(port), "--eval-name", "gsm8k",
            "--num-examples", str(args.gsm8k_examples), "--max-tokens", str(args.gsm8k_max_tokens),
            "--gsm8k-data-path", str(args.gsm8k)]


# -- reading what the release's commands print -----------------------------------------------------------

BENCH_KEYS = ("completed", "output_throughput", "median_tpot_ms", "median_ttft_ms", "p99_itl_ms", "duration")
# bench_serving's default --seed is 42; a warm-up run draws other prompts, so the recorded run's prefixes are
# not already in the server's radix cache.
WARMUP_SEED = 1042


def parse_bench_jsonl(path: Path) -> dict:
    """The last record bench_serving appended to --output-file (one JSON object per run)."""
    lines = [l for l in path.read_text().splitlines() if l.strip()] if path.is_file() else []
    if not lines:
        return {"error": f"no record in {path.name}"}
    record = json.loads(lines[-1])
    missing = [k for k in BENCH_KEYS if k not in record]
    if missing:
        return {"error": f"{path.name}: expected keys {', '.join(missing)}"}
    return {k: record[k] for k in BENCH_KEYS}


SCORE_RE = re.compile(r"^Score: ([0-9.]+)$", re.M)
EVAL_TPUT_RE = re.compile(r"^Output throughput: ([0-9.]+) token/s$", re.M)


def parse_eval_stdout(text: str) -> dict:
    score = SCORE_RE.search(text)
    if not score:
        return {"error": "run_eval printed no 'Score:' line"}
    tput = EVAL_TPUT_RE.search(text)
    return {"score": float(score.group(1)), "output_tok_s": float(tput.group(1)) if tput else None}


# -- one server -------------------------------------------------------------------------------------------

def client_env(server) -> dict:
    """The server's tree on the path (bundle mode puts it there through PYTHONPATH), and no proxy for localhost."""
    env = {**os.environ, **server.launch.env}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def run_client(argv: list[str], env: dict, log: Path) -> tuple[int, str]:
    say(f"  + {' '.join(argv[1:]) if argv[1:2] == ['-m'] else ' '.join(argv)}")
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = f"{exc.stdout or ''}{exc.stderr or ''}\nTIMEOUT after {CLIENT_TIMEOUT_S:.0f} s", 124
        text = text if isinstance(text, str) else text.decode(errors="replace")
    log.write_text(text)
    return rc, text


def collect_eval_report(out_dir: Path, name: str, tmp: Path = Path("/tmp")) -> None:
    """run_eval writes /tmp/gsm8k_<served model>.{json,html}; move them beside the other results."""
    stem = f"gsm8k_{bench_e2e.SERVED_NAME.replace('/', '_')}"
    src_json, src_html = tmp / f"{stem}.json", tmp / f"{stem}.html"
    if src_json.is_file():
        shutil.move(src_json, out_dir / f"{name}-gsm8k.json")
    if src_html.is_file():
        with open(src_html, "rb") as fin, gzip.open(out_dir / f"{name}-gsm8k.html.gz", "wb") as fout:
            shutil.copyfileobj(fin, fout)
        src_html.unlink()


def measure_server(server, args, model_dir: Path) -> dict:
    name, out = server.variant.name, args.out
    python, env = server.launch.argv[0], client_env(server)
    record = {"variant": name, "tree": server.variant.tree, "env": server.variant.env, "tp": server.variant.tp,
              "server_command": server.launch.shell(), "startup_s": server.startup_s}
    record["warmup_runs"] = args.warmup_runs
    for i in range(args.warmup_runs):
        warm = out / f"{name}-bench_serving-warmup.jsonl"
        argv = bench_argv(python, server.port, model_dir, args, warm) + ["--seed", str(WARMUP_SEED + i)]
        rc, _ = run_client(argv, env, out / f"{name}-bench_serving-warmup.txt")
        if rc:
            record["bench"] = {"error": f"bench_serving warm-up exit {rc}"}
            record["gsm8k"] = {"error": "not run: the warm-up failed"}
            return record
    jsonl = out / f"{name}-bench_serving.jsonl"
    jsonl.unlink(missing_ok=True)
    argv = bench_argv(python, server.port, model_dir, args, jsonl)
    record["bench_command"] = " ".join(["python3", *argv[1:]])
    rc, _ = run_client(argv, env, out / f"{name}-bench_serving.txt")
    record["bench"] = parse_bench_jsonl(jsonl) if rc == 0 else {"error": f"bench_serving exit {rc}"}
    argv = eval_argv(python, server.port, args)
    record["eval_command"] = " ".join(["python3", *argv[1:]])
    rc, text = run_client(argv, env, out / f"{name}-gsm8k.txt")
    record["gsm8k"] = parse_eval_stdout(text) if rc == 0 else {"error": f"run_eval exit {rc}"}
    collect_eval_report(out, name)
    record["harness_lines"] = server_pool.key_harness_lines(server)
    b, g = record["bench"], record["gsm8k"]
    say(f"[{name}] bench_serving {fmt(b.get('output_throughput'))} tok/s, TPOT {fmt(b.get('median_tpot_ms'), 2)} ms"
        f" | gsm8k score {fmt(g.get('score'), 3)}" + "".join(f" | {x['error']}" for x in (b, g) if "error" in x))
    return record


# -- the table --------------------------------------------------------------------------------------------

def fmt(x, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def comparable(a: dict, b: dict) -> bool:
    """Two records' throughputs may be divided: both were measured after a warm-up run (without one, the
    recorded pass carries first-use kernel builds whose cost depends on the machine's caches)."""
    return a.get("warmup_runs", 0) >= 1 and b.get("warmup_runs", 0) >= 1


def table(records: dict) -> str:
    all_record = records.get("all") or {}
    base = all_record.get("bench", {}).get("output_throughput")
    head = ("| variant | tree | switches off | bench_serving output tok/s | all / this | median TPOT ms | "
            "median TTFT ms | p99 ITL ms | GSM8K score (random weights) | run_eval output tok/s | start-up s | "
            "warm-up runs |")
    rows = [head, "|" + "---|" * 3 + "---:|" * 9]
    for name in VARIANT_NAMES:
        r = records.get(name)
        if r is None:
            continue
        b, g = r.get("bench", {}), r.get("gsm8k", {})
        tput = b.get("output_throughput")
        ratio = f"{base / tput:.2f}x" if base and tput and name != "all" and comparable(all_record, r) else "-"
        off = ", ".join(f"{k}={v}" for k, v in r.get("env", {}).items() if k.startswith("SGLANG_")) or "-"
        rows.append(f"| {name} | {r.get('tree')} | {off} | {fmt(tput)} | {ratio} | {fmt(b.get('median_tpot_ms'), 2)} | "
                    f"{fmt(b.get('median_ttft_ms'))} | {fmt(b.get('p99_itl_ms'))} | {fmt(g.get('score'), 3)} | "
                    f"{fmt(g.get('output_tok_s'))} | {fmt(r.get('startup_s'))} | {r.get('warmup_runs', 0)} |")
        for part in (b, g):
            if "error" in part:
                rows.append(f"| {name} | | error: {part['error']} |" + " |" * 9)
    return "\n".join(rows)


def read_records(out_dir: Path) -> dict:
    records = {}
    for name in VARIANT_NAMES:
        path = out_dir / f"{name}.json"
        if path.is_file():
            records[name] = json.loads(path.read_text())
    return records


def report(out_dir: Path) -> int:
    records = read_records(out_dir)
    if not records:
        print(f"upstream_e2e: expected <variant>.json files in {out_dir}, found none", file=sys.stderr)
        return 2
    print(table(records))
    return 0


def gsm8k_problem(path: Path) -> str | None:
    """None when path is GSM8K's test set as run_eval downloads it, else what is wrong, in one line."""
    import hashlib

    if not path.is_file():
        return f"expected GSM8K's test.jsonl, found no file {path}"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != GSM8K_TEST_SHA256:
        return f"expected GSM8K's test.jsonl (sha256 {GSM8K_TEST_SHA256[:12]}...), found sha256 {digest[:12]}... in {path}"
    return None


# -- main -------------------------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python3 -m bench.server.upstream_e2e", description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", type=Path, help="offline bundle dir or installed SITE_ROOT (required to run)")
    ap.add_argument("--out", type=Path, help="results dir (required to run)")
    ap.add_argument("--gsm8k", type=Path, help="GSM8K test.jsonl (run_eval's --gsm8k-data-path; required to run)")
    ap.add_argument("--variants", type=variant_list, default=["all", "P1-off", "P3-off", "P4-off"])
    ap.add_argument("--context", type=int, default=131072, help="the server's context ceiling")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tp", type=int, default=1,
                    help="the server's --tp-size: 2 or more shows the per-rank head count fix (needs as many GPUs)")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--gsm8k-examples", type=int, default=100)
    ap.add_argument("--gsm8k-max-tokens", type=int, default=256)
    ap.add_argument("--start-timeout", type=float, default=420.0, help="seconds for each server to come up")
    ap.add_argument("--warmup-runs", type=int, default=1, choices=range(0, 4), metavar="0..3",
                    help="bench_serving runs before the recorded one, with other prompts (not recorded)")
    ap.add_argument("--report", type=Path, metavar="DIR", help="print the table from DIR's JSON files; writes nothing")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        return report(args.report)
    missing = [f for f, v in (("--bundle", args.bundle), ("--out", args.out), ("--gsm8k", args.gsm8k)) if not v]
    if missing:
        print(f"upstream_e2e: expected {', '.join(missing)}, found none", file=sys.stderr)
        return 2
    problem = gsm8k_problem(args.gsm8k)
    if problem:
        print(f"upstream_e2e: --gsm8k: {problem}", file=sys.stderr)
        return 2
    trees = {"pinned" if v == "pinned" else "patched" for v in args.variants}
    rc, site = server_pool.gate_trees(args.bundle, trees, args.out, say)
    if rc:
        return rc
    model_dir = bench_e2e.generate_model(args.layers)
    servers = server_pool.build(variants(args, model_dir), site, sys.executable, args.out)
    say(f"versions: {json.dumps(bench_e2e.versions(servers[0].launch))}")
    records: dict = {}

    def work(server) -> None:
        try:
            records[server.variant.name] = measure_server(server, args, model_dir)
        except (smoke.SmokeFailure, OSError, ValueError) as exc:
            server.error = f"{type(exc).__name__}: {exc}"[:300]
            say(f"[{server.variant.name}] FAIL: {server.error}")
            return
        (args.out / f"{server.variant.name}.json").write_text(json.dumps(records[server.variant.name], indent=1) + "\n")

    with server_pool.sigterm_as_exit():
        try:
            server_pool.each_alone(servers, args.start_timeout, say, work)
        finally:
            server_pool.stop_all(servers, say)
            server_pool.say_key_lines(servers, say, args.out)
    print(table(records), flush=True)
    failed = [s.variant.name for s in servers if s.error]
    failed += [n for n, r in records.items() if "error" in r["bench"] or "error" in r["gsm8k"]]
    if failed:
        say(f"failed: {', '.join(sorted(set(failed)))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
