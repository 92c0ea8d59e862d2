"""The GPU stages of `apply.py field-check`: the machine, P1 against float64 through the line's own
flash_mla_with_kvcache_sm120 call, CUDA-graph capture and replay, the release's own sm_120 path on the same inputs,
and the routing rule on this card's timings (the indexer stage: serving/field_indexer.py, on these helpers).

Every row is a dict with `status` pass | fail | ran | skipped | error; a row that cannot run says why (`reason`:
not sm_12x, kernel missing, out of memory, the time budget spent) and the report goes on. torch is imported when a
stage runs, never at import (apply.py imports this module's command on a CPU machine).
"""
from __future__ import annotations

import importlib.util
import math
import os
import statistics
import sys
import time
from contextlib import nullcontext
from importlib import metadata

from . import field_rows as R

DEVICE = "cuda"   # where the cases are built; the CPU tests run the stages' bookkeeping on "cpu"
DISTS = {"torch": ("torch",), "triton": ("triton",), "sglang": ("sglang",), "flashinfer": ("flashinfer-python",),
         "deep_gemm": ("sgl-deep-gemm", "deep-gemm", "deep_gemm")}


class Budget:
    """The kernel stages' shared time budget: past it, each row left is skipped with the reason."""

    def __init__(self, seconds: float, clock=time.monotonic):
        self.clock, self.end = clock, clock() + seconds
        self.seconds = seconds

    def spent(self) -> str | None:
        return f"the kernel stages' time budget ({self.seconds:.0f} s) is spent" if self.clock() > self.end else None


def skipped(reason: str, **fields) -> dict:
    return {**fields, "status": "skipped", "reason": reason}


def version_of(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


# -- the machine ----------------------------------------------------------------------------------

def machine(torch, nvidia_smi, attestation_line: str) -> dict:
    """The card and the software on it; no host name, user path or serial number is read."""
    props = torch.cuda.get_device_properties(0)
    driver, driver_cuda = nvidia_smi()
    return {
        "gpu": props.name, "cc": f"{props.major}.{props.minor}", "sm": f"sm_{props.major}{props.minor}",
        "sm_count": props.multi_processor_count, "memory_gib": round(props.total_memory / 2 ** 30, 1),
        "gpu_count": torch.cuda.device_count(), "driver": driver, "driver_cuda": driver_cuda,
        "cuda": torch.version.cuda, "python": sys.version.split()[0],
        "versions": {k: version_of(v) for k, v in DISTS.items()},
        "attestation": attestation_line,
        "emulate_sm120": os.environ.get("OVERLAY_EMULATE_SM120") == "1",
    }


def is_sm12x(facts: dict) -> bool:
    return facts["cc"].split(".")[0] == "12"


# -- where the line's call comes from ---------------------------------------------------------------

class InstalledCall:
    """The line's dispatcher out of the installed sglang, loaded afresh for each backend (the module reads its
    switch when it loads), its lazy kernel imports resolving to the installed package."""

    def __init__(self, line: R.LineCall):
        self.line = line
        self.where = f"the installed {line.module}"

    def origin(self) -> str:
        try:
            spec = importlib.util.find_spec(self.line.module)
        except ImportError as exc:     # a parent package absent: sglang not installed at all
            raise ModuleNotFoundError(f"{self.line.module} is not installed ({exc})") from None
        if spec is None or spec.origin is None:
            raise ModuleNotFoundError(f"{self.line.module} is not installed")
        return spec.origin

    def load(self, backend: str):
        origin = self.origin()
        saved = os.environ.get(self.line.selector)
        os.environ[self.line.selector] = backend
        try:
            fresh = importlib.util.spec_from_file_location(f"{self.line.module}__field_{backend}", origin)
            module = importlib.util.module_from_spec(fresh)
            fresh.loader.exec_module(module)
        finally:
            if saved is None:
                os.environ.pop(self.line.selector, None)
            else:
                os.environ[self.line.selector] = saved
        return module

    def calling(self, module):
        return nullcontext()


def module_for(source, backend: str):
    """The source's module for `backend`, loaded once per run (a fresh load re-creates every kernel object)."""
    cache = source.__dict__.setdefault("_field_modules", {})
    if backend not in cache:
        cache[backend] = source.load(backend)
    return cache[backend]


def call(source, module, kw: dict):
    """The line's own call, as the DSv4 backend makes it (keywords of flash_mla_with_kvcache_sm120)."""
    with source.calling(module):
        return module.flash_mla_with_kvcache_sm120(
            q=kw["q"], k_cache=kw["k_cache"], head_dim_v=512, softmax_scale=kw["softmax_scale"],
            indices=kw["indices"], topk_length=kw["topk_length"], attn_sink=kw["attn_sink"],
            extra_k_cache=kw["extra_k_cache"], extra_indices_in_kvcache=kw["extra_indices"],
            extra_topk_length=kw["extra_topk_length"])


# -- cases and checks --------------------------------------------------------------------------------

def case_for(row: R.Row, seed: int):
    from .mma_decode_cases import make_case

    return make_case(row.rows, row.heads, row.topk, page_size=row.page, extra_topk=row.extra_topk,
                     extra_page_size=row.extra_page, seed=seed, device=DEVICE, num_pages=max(8, row.rows // 16))


def checked_rows(n: int) -> list[int]:
    """The query rows compared with float64: all up to CHECKED_ROWS, else that many spread over the batch (the
    first two, which make_case leaves empty, among them)."""
    if n <= R.CHECKED_ROWS:
        return list(range(n))
    step = n / (R.CHECKED_ROWS - 2)
    return sorted({0, 1, n - 1, *(int(i * step) for i in range(R.CHECKED_ROWS - 2))})[: R.CHECKED_ROWS]


class Reference:
    """The float64 reference of a case at checked_rows, computed once and judged against every backend's output."""

    def __init__(self, case):
        import dataclasses

        import torch

        from .mma_decode_cases import reference_f64

        self.rows = checked_rows(case.q.shape[0])
        self.pick = torch.tensor(self.rows, device=case.q.device)
        pick = self.pick
        part = dataclasses.replace(
            case, q=case.q[pick], indices=case.indices[pick],
            topk_length=None if case.topk_length is None else case.topk_length[pick],
            extra_indices=None if case.extra_indices is None else case.extra_indices[pick],
            extra_topk_length=None if case.extra_topk_length is None else case.extra_topk_length[pick])
        self.out, self.lse = reference_f64(part)

    def judge(self, out, lse, check_lse: bool = True) -> dict:
        """err_f64 and lse_err of a call's output, and pass/fail by the GPU tests' thresholds. The log-sum-exp
        counts for P1 alone (as in the GPU tests): the release's paths return theirs without the sink."""
        from .mma_decode_cases import LSE_ABS_TOL, REL_TOL, lse_error, rel_err

        err = rel_err(out[self.pick], self.out)
        lerr = lse_error(lse[self.pick], self.lse) if check_lse else None   # other paths lay theirs out otherwise
        nan = bool(out.isnan().any())
        ok = not nan and err < REL_TOL and (not check_lse or lerr < LSE_ABS_TOL)
        return {"err_f64": finite(err), "lse_err": finite(lerr), "nan": nan, "checked_rows": len(self.rows),
                "status": "pass" if ok else "fail"}


def time_ms(fn, iters: int = 20) -> float:
    """Median milliseconds of fn() by CUDA events, after three warm-up calls (wall clock off CUDA)."""
    import torch

    for _ in range(3):
        fn()
    if DEVICE != "cuda":
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) * 1e3 / iters
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def classify(exc: BaseException) -> str:
    """Why a row could not run, in the report's words."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        torch.cuda.empty_cache()
        return "out of memory"
    if isinstance(exc, (ImportError, AttributeError)):
        return f"kernel missing: {type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


def run_backend(source, backend: str, case, ref: Reference | None, check_lse: bool) -> tuple[dict, Reference]:
    """One case through one backend: its float64 check (the reference built on first use) and its time."""
    import torch

    module = module_for(source, backend)
    kw = case.kwargs()
    out, lse = call(source, module, kw)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    ref = ref or Reference(case)
    result = ref.judge(out, lse, check_lse)
    result["ms"] = time_ms(lambda: call(source, module, kw))
    return result, ref


def stage_rows(source, rows, facts: dict, budget: Budget, say) -> tuple[list[dict], list[dict]]:
    """Each row through P1 and then the release's own path, on the same inputs against one float64 reference:
    (p1 rows, release rows)."""
    line = source.line
    p1_out, rel_out = [], []
    release_off = (f"not sm_12x ({facts['sm']}): {line.release_label} run on sm_12x alone"
                   if line.release_sm12x_only and not is_sm12x(facts) else None)
    for i, row in enumerate(rows):
        base = row.as_dict()
        if budget.spent():
            p1_out.append(skipped(budget.spent(), **base))
            rel_out.append(skipped(release_off or budget.spent(), **base, ran=False))
            continue
        case = ref = None
        try:
            module_for(source, line.p1)      # first: a missing kernel is the row's reason, before any input is built
            case = case_for(row, seed=i)
            got, ref = run_backend(source, line.p1, case, None, check_lse=True)
            result = {**base, **got}
        except Exception as exc:   # the row says why; the report goes on
            result = skipped(classify(exc), **base)
        p1_out.append(result)
        say(f"  p1 {row.label}: {_brief(result)}")
        if release_off:
            rel_out.append(skipped(release_off, **base, ran=False))
            continue
        try:
            module_for(source, line.release)
            case = case or case_for(row, seed=i)
            got, ref = run_backend(source, line.release, case, ref, check_lse=False)
            result = {**base, **got, "ran": True}
        except Exception as exc:
            result = {**skipped(classify(exc), **base), "ran": False, "error": classify(exc)}
        rel_out.append(result)
        say(f"  release {row.label}: {_brief(result)}")
    if release_off:
        say(f"  release: every row skipped ({release_off})")
    return p1_out, rel_out


def stage_graphs(source, budget: Budget, say) -> list[dict]:
    """Capture the line's call in a CUDA graph (decode and verify row counts), replay it with three new inputs of
    the same shapes, each against float64."""
    import torch

    from .mma_decode_cases import GraphInputs, LSE_ABS_TOL, REL_TOL, make_case, reference_f64, rel_err

    out = []
    for rows, heads, label in R.GRAPH_ROWS:
        base = {"label": f"graph {label} h{heads}", "rows": rows, "heads": heads}
        if budget.spent():
            out.append(skipped(budget.spent(), **base))
            continue
        try:
            module = module_for(source, source.line.p1)
            cases = [make_case(rows, heads, R.WINDOW, extra_topk=512, seed=100 + s, device=DEVICE,
                               num_pages=max(32, rows // 2)) for s in range(3)]
            static = GraphInputs(cases[0])
            call(source, module, static.kwargs)    # compile outside the capture, as SGLang's warm-up does
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
                got = call(source, module, static.kwargs)[0]
            errs = []
            for case in cases:
                static.load(case)
                graph.replay()
                torch.cuda.synchronize()
                errs.append(rel_err(got, reference_f64(case)[0]))
            ok = all(e < REL_TOL for e in errs)     # a NaN error is not below it
            errs = [finite(e) for e in errs]
            result = {**base, "replay_err_f64": errs, "status": "pass" if ok else "fail",
                      "thresholds": {"rel": REL_TOL, "lse_abs": LSE_ABS_TOL}}
        except Exception as exc:
            result = skipped(classify(exc), **base)
        out.append(result)
        say(f"  graphs {base['label']}: {_brief(result)}")
    return out


def stage_routing(source, p1: list[dict], release: list[dict], say) -> dict:
    """On a line that routes its default by rows: the SM120_DEFAULT_ROUTES entry this card's timings imply (the
    README's rule), beside the one the line ships."""
    line = source.line
    if not line.routes:
        return skipped(f"the line routes no default by rows ({line.module} has no SM120_DEFAULT_ROUTES)")
    try:
        shipped = tuple(getattr(module_for(source, line.p1), "SM120_DEFAULT_ROUTES"))
    except Exception as exc:
        return skipped(classify(exc))
    timed = [{"rows": a["rows"], "p1_ms": a.get("ms"), "p1_pass": a["status"] == "pass",
              "other_ms": b.get("ms"), "other_pass": b["status"] == "pass"}
             for a, b in zip(p1, release) if a.get("ms") is not None and b.get("ms") is not None]
    if not timed:
        reason = next((r["reason"] for r in release if r.get("reason")), "no row ran both paths")
        result = skipped(f"not evaluated: {reason}", shipped=repr(shipped))
    else:
        implied = R.implied_routes(timed, line.p1, line.release)
        result = {"status": "ran", "shipped": repr(shipped), "implied": repr(implied), "rows_compared": len(timed),
                  "entry": f"SM120_DEFAULT_ROUTES = {implied!r}", "agrees": implied == shipped}
    say(f"  routing: {result.get('entry') or result['reason']}")
    return result


def _brief(result: dict) -> str:
    if result["status"] == "skipped":
        return f"skipped ({result['reason']})"
    parts = [result["status"]]
    if "err_f64" in result:
        parts.append(f"err {_num(result['err_f64'])}"
                     + (f" lse {_num(result['lse_err'])}" if result.get("lse_err") is not None else ""))
    if "err_f32_ref" in result:
        parts.append(f"err vs the float32 reference {_num(result['err_f32_ref'])}")
    if "mismatched_rows" in result:
        parts.append(f"{result['mismatched_rows']} rows unlike the float64 set")
    if "replay_err_f64" in result:
        parts.append("replays " + ", ".join(_num(e) for e in result["replay_err_f64"]))
    if result.get("ms") is not None:
        parts.append(f"{result['ms']:.3f} ms")
    return " ".join(parts)


def _num(x) -> str:
    return f"{x:.2e}" if isinstance(x, float) else str(x)


def finite(x):
    """A number the JSON report can hold (inf and nan as strings)."""
    return x if not isinstance(x, float) or math.isfinite(x) else repr(x)
