"""Several sglang servers from one installed bundle on one GPU, stopped on every path.

Two ways to run them:
  side by side  `start_all` launches each `Variant` (a tree plus environment overrides), `wait_all` waits
                for every /health, `stop_all` stops each process group (also on Ctrl-C / SIGTERM through the
                caller's try/finally). Start-up (imports, weight load, CUDA-graph capture: 1-3.5 min each on
                an H200) is paid once for all. For answers only (bench/server/live_compare.py), never timing.
  alone         `each_alone` starts one server, runs the caller's work on it, stops it, then the next. For
                timing: idle servers beside the measured one are not free. On the H200 two idle neighbours
                made the `mma` server's decode steps longer, while the slow `triton` server's steps did not
                move (BENCHMARKS.md, "P1's own share of decode, run 3").
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import time
from pathlib import Path

from bench.command import command_line
from serving import serve_cmd, smoke

PORT_BASE = 30300
PORT_STEP = 10


@dataclasses.dataclass
class Variant:
    name: str
    tree: str                                   # pinned | patched
    env: dict = dataclasses.field(default_factory=dict)   # on top of the launch's own environment
    model: str | None = None                    # None: the tiny model
    context: int | None = None
    extra_args: list = dataclasses.field(default_factory=list)
    tp: int = 1                                 # the server's --tp-size (GPUs)


@dataclasses.dataclass
class Server:
    variant: Variant
    port: int
    launch: serve_cmd.Launch
    log_path: Path
    proc: object = None
    startup_s: float | None = None
    error: str | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def free_ports(n: int, base: int | None = None) -> list[int]:
    """n ports p, each with p + 10000 free too (sglang's gRPC twin), PORT_STEP apart, from base (PORT_BASE)."""
    base = PORT_BASE if base is None else base
    ports, p = [], base
    while len(ports) < n:
        if smoke.port_is_free("127.0.0.1", p) and smoke.port_is_free("127.0.0.1", p + 10000):
            ports.append(p)
        p += PORT_STEP
        if p > 55000:
            raise RuntimeError(f"expected {n} free ports from {base}, found {len(ports)}")
    return ports


def gate_trees(bundle: Path, trees, out_dir: Path, say) -> tuple[int, Path | None]:
    """The start every server bench shares: serve_cmd's gate on each bundle tree the variants run (a refusal: its
    exit code, nothing else done), then out_dir made and the command line printed for the record.
    Returns (0, the installed site) or (rc, None)."""
    site = None
    for tree in sorted(set(trees)):
        rc, site = serve_cmd.bundle_gate(argparse.Namespace(bundle=bundle, python=None, tree=tree), log=say)
        if rc:
            return rc, None
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    say(f"command: {command_line()}")
    return 0, site


def build(variants: list[Variant], site_root: Path, python: str, out_dir: Path,
          port_base: int | None = None) -> list[Server]:
    """port_base: where the port search starts (PORT_BASE); runs side by side (tests) keep apart this way."""
    servers = []
    for variant, port in zip(variants, free_ports(len(variants), port_base)):
        launch = serve_cmd.build(model=variant.model, tp=variant.tp, port=port, context=variant.context, python=python,
                                 bundle_site=site_root, tree=variant.tree, extra_args=list(variant.extra_args))
        launch.env.update(variant.env)      # after OVERLAY_ENV: a variant's backend choice wins
        servers.append(Server(variant, port, launch, out_dir / f"{variant.name}-server.log"))
    return servers


def start_all(servers: list[Server], say) -> None:
    for s in servers:
        say(f"[{s.variant.name}] starting: {s.launch.shell()}")
        s.proc = smoke.start_server(s.launch, s.log_path)


def wait_all(servers: list[Server], timeout: float, say) -> None:
    """Wait for every server's /health (one shared deadline); a server that fails is marked, not fatal."""
    deadline = time.monotonic() + timeout
    t0 = time.monotonic()
    for s in servers:
        try:
            smoke.wait_healthy(s.base, s.proc, max(deadline - time.monotonic(), 1.0))
            s.startup_s = time.monotonic() - t0
            say(f"[{s.variant.name}] healthy {s.startup_s:.1f} s after the start of the wait")
        except smoke.SmokeFailure as exc:
            s.error = str(exc)
            dump_stacks(s)
            say(f"[{s.variant.name}] FAIL: {exc}\n---- last lines of {s.log_path} ----\n{smoke.log_tail(s.log_path)}")


def claim_port(server: Server, say) -> None:
    """Ports are picked when the servers are built; one started minutes later may find its port taken by another
    process, whose /health would answer for it. Move it to the next free port (its launch's `--port` value)."""
    if smoke.port_is_free("127.0.0.1", server.port) and smoke.port_is_free("127.0.0.1", server.port + 10000):
        return
    port = free_ports(1, server.port + PORT_STEP)[0]
    argv = server.launch.argv
    argv[argv.index("--port") + 1] = str(port)
    say(f"[{server.variant.name}] port {server.port} is taken now; using {port}")
    server.port = port


def each_alone(servers: list[Server], timeout: float, say, work) -> None:
    """Start each server by itself, wait for /health (`timeout` each), call work(server) when it is up, stop
    it before the next one starts. A server that does not come up is marked (its error), not fatal."""
    for s in servers:
        try:
            claim_port(s, say)
            start_all([s], say)
            wait_all([s], timeout, say)
            if not s.error:
                work(s)
        finally:
            stop_all([s], say)


def dump_stacks(server: Server, settle: float = 3.0) -> None:
    """Ask every process of a server that did not come up for its Python stacks (serving/test_hooks/boxhooks registers
    SIGUSR2 with faulthandler), so its log says where it was stuck; then give them a moment to write."""
    import os

    if server.proc is None or server.proc.poll() is not None:
        return
    try:
        os.killpg(server.proc.pid, signal.SIGUSR2)
    except (ProcessLookupError, PermissionError):
        return
    time.sleep(settle)


def stop_all(servers: list[Server], say) -> None:
    """SIGTERM every server's process group at once (so the grace periods overlap, inside `timeout -k`'s), then
    wait for each, SIGKILL what is left. SIGTERM/SIGINT are ignored meanwhile: a second signal must not cut
    the stopping short and leave servers holding the GPU."""
    import os

    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for s in servers:
            if s.proc is not None:
                try:
                    os.killpg(s.proc.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        for s in servers:
            if s.proc is not None:
                left = smoke.stop_server(s.proc, 20.0)
                say(f"[{s.variant.name}] stopped" if not left else f"[{s.variant.name}] processes {left} survived SIGKILL")
                s.proc = None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


KEY_LINES = ("dummy weights by role", "deliberately broken", "entered", "ERROR", "sm_120 branches forced",
             "checked against the torch reference")


def key_harness_lines(server: Server) -> list[str]:
    """The harness lines that say what a server ran: its weights, a broken kernel, the sm_120 entries."""
    return [l for l in smoke.harness_lines(server.log_path, limit=200) if any(k in l for k in KEY_LINES)]


def say_key_lines(servers: list[Server], say, out_dir: Path | None = None) -> None:
    """Print each server's key harness lines; with out_dir also write them, with start-up and error, to servers.json."""
    import json

    record = {}
    for s in servers:
        lines = key_harness_lines(s)
        for line in lines:
            say(f"[{s.variant.name}] {line[:300]}")
        record[s.variant.name] = {"tree": s.variant.tree, "env": s.variant.env, "startup_s": s.startup_s,
                                  "error": s.error, "harness_lines": lines}
    if out_dir is not None:
        (Path(out_dir) / "servers.json").write_text(json.dumps(record, indent=1) + "\n")


@contextlib.contextmanager
def sigterm_as_exit():
    """SIGTERM (`timeout`, a lease ending) raises SystemExit(143), so the caller's finally stops every server:
    each runs in its own session and would otherwise outlive this process, holding the GPU."""
    def _exit(signum, frame):
        raise SystemExit(128 + signum)
    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
