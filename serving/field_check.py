"""`apply.py field-check` (`make field-check`): is this patch set correct, and faster, on this card? One report.

Runs the stages of serving/field_rows.py in order, each with a progress line: the machine, P1 against float64 through
the line's own flash_mla_with_kvcache_sm120 call at the stated shapes, CUDA-graph capture and replay, the release's
own sm_120 path on the same inputs, the routing rule on this card (0.5.23), the indexer V4.1 reaches (DeepGEMM's fp4
paged MQA logits and the candidate blocks against torch, serving/field_indexer.py), and with --model the patched
server. A row that cannot run says why; the report is always written:
field-report-<gpu>-<date>.json and .md in --out, with no host name, user path or serial number. Nothing is sent
anywhere. Without a CUDA GPU it refuses in one line (exit 2).
"""
from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
import os
import re
import socket
import sys
import time
from pathlib import Path

from . import field_rows as R

FORMAT = 1
KIND = "dsv4-sm120-overlay field report"
KERNEL_BUDGET_S = 420          # the kernel stages: 7 minutes on one GPU
SERVER_BUDGET_S = 1800         # the server stage's own: loading a real checkpoint


class NoCuda(Exception):
    """field-check needs a CUDA GPU: the one-line refusal."""


def header_lines() -> list[str]:
    never = "; ".join(R.NEVER_RAN_HERE.values())
    return [f"Stages never run on a GPU by the project: {never}.", R.NONE_ON_SM12X,
            "Nothing in this report was sent anywhere; it names no host, user path or serial number."]


def require_cuda():
    """torch with a visible CUDA GPU, else NoCuda naming what was found."""
    try:
        import torch
    except Exception as exc:   # noqa: BLE001 - any import failure is the same refusal
        raise NoCuda(f"expected torch with a CUDA GPU, found no importable torch ({type(exc).__name__})") from None
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise NoCuda(f"expected a CUDA GPU visible to torch {torch.__version__}, found none "
                     f"(torch CUDA {torch.version.cuda or 'absent'})")
    return torch


def gpu_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


# -- scrubbing ------------------------------------------------------------------------------------------

SERIAL = re.compile(r"GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}|\b[Ss]erial(?: [Nn]umber)?\s*[:=]\s*\S+")


def private_words(environ=os.environ) -> list[str]:
    """What would name this machine or its user: the host name, the user, home and the working directory."""
    words = {socket.gethostname(), os.path.expanduser("~"), str(Path.cwd())}
    try:
        words.add(getpass.getuser())
    except Exception:   # noqa: BLE001 - no user name to hide
        pass
    for key in ("HOME", "USER", "LOGNAME", "HOSTNAME", "VIRTUAL_ENV"):
        if environ.get(key):
            words.add(environ[key])
    return sorted((w for w in words if w and w.strip("/")), key=len, reverse=True)


def scrub(text: str, words: list[str]) -> str:
    """text without serial numbers, GPU UUIDs and any of `words` as a whole word or path (longest first: a path
    before the user name in it; a short host name such as `vm` inside another word is left alone)."""
    text = SERIAL.sub("<serial>", text)
    for w in words:
        text = re.sub(rf"(?<![\w.-]){re.escape(w)}(?![\w-])", "<scrubbed>", text)
    return text


def scrub_report(report: dict, words: list[str]) -> dict:
    return json.loads(scrub(json.dumps(report), [json.dumps(w)[1:-1] for w in words]))


# -- the report ---------------------------------------------------------------------------------------

def new_report(patch_set, line: str, today: dt.date) -> dict:
    return {"format": FORMAT, "kind": KIND, "date": today.isoformat(), "line": line,
            "patch_set": {"line": patch_set.line, "version": patch_set.version, "series_digest": patch_set.digest},
            "header": header_lines(), "machine": {}, "stages": {}, "stage_order": list(R.STAGES),
            "thresholds": {}, "shapes": "serving/field_rows.py p1_rows()"}


def write_report(report: dict, out: Path, words: list[str]) -> tuple[Path, Path]:
    report = scrub_report(report, words)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"field-report-{gpu_slug(report['machine'].get('gpu', 'gpu'))}-{report['date']}"
    js, md = out / f"{stem}.json", out / f"{stem}.md"
    js.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    md.write_text(scrub(markdown(report), words))
    return js, md


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return "-" if v is None or v == "" else str(v).replace("|", "/")


def _table(rows: list[dict], cols: list[str]) -> list[str]:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return out


def markdown(report: dict) -> str:
    m, st = report["machine"], report["stages"]
    ps = report["patch_set"]
    lines = [f"# field-check report: {m.get('gpu', '?')} ({m.get('sm', '?')}), {report['date']}", ""]
    lines += [f"> {h}" for h in report["header"]] + [""]
    lines += [f"Patch set: line {ps['line']}, version {ps['version']}, series digest {ps['series_digest'][:16]}. "
              f"The line's call: {report.get('call', '-')}; kernel stages {report.get('kernel_stages_s', '-')} s.", ""]
    lines += ["## Machine", ""] + _table([{"what": k, "value": v} for k, v in m.items() if k != "versions"],
                                         ["what", "value"])
    lines += _table([{"what": k, "value": v} for k, v in m.get("versions", {}).items()], ["what", "value"])[2:]
    lines.append("")
    for name in report["stage_order"]:
        if name == "machine":
            continue
        rows = st.get(name)
        lines += [f"## {name}", ""]
        if rows is None:
            lines += ["not run", ""]
            continue
        if isinstance(rows, dict):
            lines += _table([{"what": k, "value": v} for k, v in rows.items()], ["what", "value"]) + [""]
            continue
        cols = ["label", "status", "err_f64", "lse_err", "err_f32_ref", "mismatched_rows", "ms", "replay_err_f64",
                "reason"]
        cols = [c for c in cols if any(c in r for r in rows)]
        passed = sum(r["status"] == "pass" for r in rows)
        lines += [f"{passed} of {len(rows)} rows pass; "
                  f"{sum(r['status'] == 'skipped' for r in rows)} skipped (each says why).", ""]
        lines += _table(rows, cols) + [""]
    lines += [f"Thresholds (the GPU tests'): {report['thresholds']}.", ""]
    return "\n".join(lines)


# -- running ------------------------------------------------------------------------------------------

def detect_line(sglang_version: str | None, locks) -> str | None:
    """The release line whose pinned sglang is the installed one."""
    for name, lock in locks.items():
        if sglang_version and lock.upstream("sglang").version == sglang_version.split("+")[0]:
            return name
    return None


def sglang_site() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent


def run(report: dict, source, torch, out: Path, say=print, model: str | None = None, tp: int = 1,
        kernel_budget: float = KERNEL_BUDGET_S, server_budget: float = SERVER_BUDGET_S,
        attestation_line: str = "attestation: not read", rows=None, indexer: dict | None = None) -> dict:
    """Every stage into `report` (the caller writes it); `source` gives the line's call (field_kernels) and, where
    it has indexer_parts(), the indexer's functions (else the installed sglang's); `indexer`: keywords of
    field_indexer.stage_indexer (shapes, geo)."""
    from . import doctor, field_indexer, field_kernels as K
    from .mma_decode_cases import LSE_ABS_TOL, REL_TOL

    started = time.monotonic()
    st = report["stages"]
    report["thresholds"] = {"rel_err_f64": REL_TOL, "lse_abs": LSE_ABS_TOL,
                            "indexer_reference_vs_f64": field_indexer.REF_F64_TOL,
                            "indexer_deepgemm_vs_f32_reference": field_indexer.DEEPGEMM_TOL}
    say("field-check: machine")
    facts = report["machine"] = K.machine(torch, doctor.nvidia_smi, attestation_line)
    report["call"] = source.where
    if not K.is_sm12x(facts):
        say(f"field-check: this card is {facts['sm']}, not sm_12x: sm_12x-only rows are skipped with that reason"
            + (" (OVERLAY_EMULATE_SM120=1: TEST ONLY)" if facts["emulate_sm120"] else ""))
    budget = K.Budget(kernel_budget)
    rows = R.p1_rows() if rows is None else rows
    say("field-check: graphs (capture and replay of decode and verify; first, so a short budget keeps them)")
    st["graphs"] = K.stage_graphs(source, budget, say)
    say("field-check: indexer (V4.1's DeepGEMM fp4 paged logits and candidate blocks against torch; before the P1 "
        "rows, so a short budget keeps them)")
    st["indexer"] = field_indexer.stage_indexer(source, facts, budget, say, **(indexer or {}))
    say(f"field-check: p1 and release ({len(rows)} rows against float64 through {source.where}; "
        f"beside each, {source.line.release_label} on the same inputs)")
    st["p1"], st["release"] = K.stage_rows(source, rows, facts, budget, say)
    say("field-check: routing")
    st["routing"] = K.stage_routing(source, st["p1"], st["release"], say)
    report["kernel_stages_s"] = round(time.monotonic() - started, 1)
    if model:
        from . import field_server

        say(f"field-check: server (TP {tp}, its own budget of {server_budget:.0f} s)")
        st["server"] = field_server.stage_server(model, tp, out, server_budget, say, report["line"])
    else:
        st["server"] = {"status": "skipped", "reason": "no MODEL=path given"}
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("."), help="where the report goes (default: here)")
    parser.add_argument("--model", help="a DeepSeek-V4-Flash / V4.1-Flash checkpoint: also run the server stage")
    parser.add_argument("--tp", type=int, default=1, help="the server stage's tensor parallelism (the recipe's)")
    parser.add_argument("--budget", type=float, default=KERNEL_BUDGET_S,
                        help=f"seconds for the kernel stages (default {KERNEL_BUDGET_S}); rows past it are skipped, saying so")


def run_field_check(args: argparse.Namespace, engine=None, say=print, today=None) -> int:
    try:
        torch = require_cuda()
    except NoCuda as exc:
        print(f"field-check: {exc}: it runs on an NVIDIA GPU (docs/field_check.md)", file=sys.stderr)
        return 2
    from importlib import metadata

    from patchkit import attestation
    from patchkit.engine import Engine
    from patchkit.lockfile import load_locks
    from . import REPO, field_kernels as K

    try:
        installed = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        installed = None
    repo = Path(engine.lock.path).parent if engine is not None else REPO
    line = getattr(args, "line", None) or detect_line(installed, load_locks(repo / "pin.lock"))
    if line not in R.LINES:
        print(f"field-check: expected sglang of a release line ({', '.join(R.LINES)}) installed, found "
              f"{installed or 'none'}", file=sys.stderr)
        return 2
    engine = Engine.from_repo(repo, read_only=True, line=line)
    site = sglang_site()
    att = attestation.describe(site, engine.patch_set()) if site else "attestation: no sglang installed"
    report = new_report(engine.patch_set(), line, today or dt.date.today())
    run(report, K.InstalledCall(R.LINES[line]), torch, args.out, say, args.model, args.tp, kernel_budget=args.budget,
        attestation_line=att)
    js, md = write_report(report, args.out, private_words())
    say(f"field-check: report {js} and {md}; share them as they are (docs/field_check.md)")
    return 0


def add_parser(subparsers) -> None:
    """The `field-check` subcommand of apply.py (apply.py hands it to patchkit.cli as an extension)."""
    p = subparsers.add_parser("field-check", help="P1 and the release's path on this GPU; one report to share",
                              description=__doc__.split("\n")[0])
    add_arguments(p)
    p.set_defaults(func=lambda engine, args: run_field_check(args, engine))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.field_check", description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument("--line", help="the release line (default: the one whose sglang is installed)")
    return run_field_check(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
