"""field-check's optional server stage (MODEL=path, its own time budget): the patched server started with the line's
recipe (serving/serve_cmd.py) at the recipe's TP, the release's watcher of Triton kernels compiled or loaded after the
server is ready switched on to report every one, a warm-up, requests at concurrency 1 and 16 with their tok/s, and
whether any Triton kernel compiled or loaded after the warm-up."""
from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

from . import serve_cmd, smoke

# sglang/srt/utils/triton_load_watch.py (0.5.23): after mark_serving_started() it warns on an uncached compile at
# least SGLANG_TRITON_SLOW_COMPILE_THRESHOLD_SECS long and on a device-load with less free memory than
# SGLANG_TRITON_LOAD_WARNING_THRESHOLD_GB: at 0 and a huge threshold it reports every one. 0.5.14 has no watcher.
WATCH_ENV = {"SGLANG_TRITON_SLOW_COMPILE_THRESHOLD_SECS": "0", "SGLANG_TRITON_LOAD_WARNING_THRESHOLD_GB": "1e9"}
LATE = re.compile(r"Triton kernel '([^']+)' (?:took [\d.]+ s to compile|device-loaded) after serving started")
CONCURRENCY = (1, 16)
MAX_TOKENS = 128
PROMPT = "Explain, step by step, how a sparse attention kernel chooses which tokens to read."


def late_kernels(log_text: str) -> list[str]:
    """The Triton kernels the watcher saw compiled or loaded after the server was ready, in order, each once."""
    seen = []
    for name in LATE.findall(log_text):
        if name not in seen:
            seen.append(name)
    return seen


def concurrency_run(base: str, n: int, max_tokens: int = MAX_TOKENS) -> dict:
    """n requests at once, each max_tokens long (ignore_eos): completion tokens over the wall time."""
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}}
    tokens, errors = [], []

    def one():
        try:
            out = smoke.get_json(f"{base}/generate", body)
            tokens.append(int(out["meta_info"]["completion_tokens"]))
        except Exception as exc:   # noqa: BLE001 - a failed request is counted and named
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one) for _ in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return {"concurrency": n, "requests": n, "completed": len(tokens), "tokens": sum(tokens),
            "wall_s": round(wall, 3), "tok_s": round(sum(tokens) / wall, 1) if wall > 0 else None,
            "errors": errors[:3]}


def stage_server(model: str, tp: int, out_dir: Path, timeout: float, say, line: str, port: int = 30000) -> dict:
    """The server stage; the server's log is kept in out_dir (server.log, not copied into the report)."""
    launch = serve_cmd.build(model=model, tp=tp, port=port, python=sys.executable)   # field-check runs in sglang's env
    if line != "0.5.14":
        launch.env.update(WATCH_ENV)
    log_path = Path(out_dir) / "server.log"
    base = f"http://127.0.0.1:{port}"
    if not smoke.port_is_free("127.0.0.1", port):
        return {"status": "skipped", "reason": f"port {port} is busy (another server?)"}
    proc = None
    result = {"tp": tp, "watcher": "on" if line != "0.5.14" else "absent (the release has none)"}
    try:
        proc = smoke.start_server(launch, log_path)
        result["ready_s"] = round(smoke.wait_healthy(base, proc, timeout), 1)
        say(f"  server ready after {result['ready_s']} s; warm-up")
        concurrency_run(base, 2, 16)
        after_warmup = len(log_path.read_bytes())
        result["runs"] = []
        for n in CONCURRENCY:
            run = concurrency_run(base, n)
            result["runs"].append(run)
            say(f"  server concurrency {n}: {run['tok_s']} tok/s ({run['completed']}/{n} completed)")
        late = late_kernels(log_path.read_bytes()[after_warmup:].decode(errors="replace"))
        result["late_triton_kernels"] = late
        ok = all(r["completed"] == r["requests"] for r in result["runs"])
        result["status"] = "pass" if ok and not late else "fail"
    except smoke.SmokeFailure as exc:
        result.update(status="skipped", reason=f"the server did not serve: {exc}")
    finally:
        if proc is not None:
            smoke.stop_server(proc, 30)
    return result
