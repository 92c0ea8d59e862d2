"""Smoke test: start the server, wait for health, send real requests, check them, shut it down.

    python -m serving.smoke [--model PATH] [--tp N] [--port P] [--context N] [--timeout S]
                            [--bundle DIR --tree pinned|patched] [--eager] [--log FILE]

Requests: /v1/models, a chat completion and a raw /generate, each non-streaming and streaming.
Each must return 200, the expected JSON shape and at least one token. Reports the time to first
token and the decode rate of the streaming /generate. On any failure it prints the reason and
the tail of the server log, and exits 1. The server runs in its own process group, which is
killed on every exit path (success, failure, Ctrl-C, SIGTERM): no server is left running.

--server-cmd replaces the sglang launch with any command ({port} is filled in); the tests use it
to run small fake servers that fail in known ways. --bundle/--tree/--eager are serve_cmd's (serve
from an offline bundle, run its gate first). After the checks it repeats the server log's
[overlay-boxhooks] lines (what the GPU-box harness forced or replaced, per process).
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from patchkit import jsonio
from patchkit.report import printable_streams

from . import serve_cmd
from . import REPO

DEFAULT_LOG = REPO / "build" / "smoke-server.log"
PROMPT = "The capital of France is"


class SmokeFailure(Exception):
    """One line saying what was expected and what was found."""


class _Terminated(BaseException):
    """SIGTERM to the driver: unwind through `finally` so the server is stopped."""


# -- the server process --------------------------------------------------------------------------

def port_is_free(host: str, port: int) -> bool:
    """Whether the server could listen on host:port (SO_REUSEADDR, as uvicorn binds: a port
    left in TIME_WAIT by an earlier run is free, one with a listener is not)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def start_server(launch: serve_cmd.Launch, log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        try:
            # A new session = a new process group holding the server and every worker it forks.
            return subprocess.Popen(launch.argv, env={**os.environ, **launch.env}, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise SmokeFailure(f"cannot start the server: {exc}") from None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in group pgid. Zombies are already dead: an orphan whose
    reaper is slow must not count as a server left running."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()   # after "pid (comm) ": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def stop_server(proc: subprocess.Popen, grace: float) -> list[int]:
    """SIGTERM the server's process group, SIGKILL what is left after `grace` s, reap the leader.
    Returns the pids still alive afterwards (none, unless something is unkillable)."""
    pgid = proc.pid   # session leader: its pid is the group id
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        proc.poll()   # reap the leader if it already exited
        if not group_members(pgid):
            break
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()
            if not group_members(pgid):
                break
            time.sleep(0.1)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    return group_members(pgid)


def log_tail(log_path: Path, lines: int = 40) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-lines:]) or "(server log is empty)"


# -- HTTP ---------------------------------------------------------------------------------------

def _request(url: str, body: dict | None = None, timeout: float = 300.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def get_json(url: str, body: dict | None = None) -> dict:
    try:
        with _request(url, body) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise SmokeFailure(f"{url}: expected HTTP 200, got {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SmokeFailure(f"{url}: request failed: {exc}") from None
    # size- and depth-limited (a server's reply is data): one SmokeFailure line, never a RecursionError
    return jsonio.parse(raw, url, error=SmokeFailure)


def stream_events(url: str, body: dict):
    """Yield (arrival time, decoded JSON) for each server-sent `data:` event until [DONE]."""
    try:
        resp = _request(url, body)
    except urllib.error.HTTPError as exc:
        raise SmokeFailure(f"{url} (stream): expected HTTP 200, got {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SmokeFailure(f"{url} (stream): request failed: {exc}") from None
    with resp:
        for raw in resp:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:"):
                continue
            payload = line[len("data:"):].strip()
            if payload == "[DONE]":
                return
            yield time.perf_counter(), jsonio.parse(payload, f"{url} (stream event)", error=SmokeFailure)
    raise SmokeFailure(f"{url} (stream): the stream ended without data: [DONE]")


def wait_healthy(base: str, proc: subprocess.Popen, timeout: float) -> float:
    """Poll GET /health until 200; fail at once if the server process exits. Returns seconds."""
    start = time.monotonic()
    while True:
        code = proc.poll()
        if code is not None:
            raise SmokeFailure(f"server exited with code {code} before it became healthy")
        try:
            with _request(f"{base}/health", timeout=5) as resp:
                if resp.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass   # not listening yet, or 503 while it loads
        if time.monotonic() - start > timeout:
            raise SmokeFailure(f"server not healthy after {timeout:g} s (GET {base}/health)")
        time.sleep(1.0)


# -- the checks ---------------------------------------------------------------------------------

def _field(obj, path: str):
    """obj['a'][0]['b'] for path 'a.0.b', or SmokeFailure naming the missing part."""
    cur = obj
    for part in path.split("."):
        try:
            cur = cur[int(part)] if part.isdigit() else cur[part]
        except (KeyError, IndexError, TypeError):
            raise SmokeFailure(f"expected field {path} in the response, found {json.dumps(obj)[:300]}") from None
    return cur


def _tokens(count, what: str, limit: int) -> int:
    if not isinstance(count, int) or not 0 < count <= limit:
        raise SmokeFailure(f"{what}: expected 1..{limit} generated tokens, found {count!r}")
    return count


def check_models(base: str) -> str:
    model = _field(get_json(f"{base}/v1/models"), "data.0.id")
    if not isinstance(model, str) or not model:
        raise SmokeFailure(f"/v1/models: expected a model id, found {model!r}")
    return model


def check_chat(base: str, model: str, max_tokens: int) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    out = get_json(f"{base}/v1/chat/completions", body)
    if _field(out, "choices.0.message.role") != "assistant":
        raise SmokeFailure(f"chat: expected role 'assistant', found {_field(out, 'choices.0.message.role')!r}")
    if not isinstance(_field(out, "choices.0.message.content"), str):
        raise SmokeFailure("chat: expected message.content to be a string")
    return _tokens(_field(out, "usage.completion_tokens"), "chat", max_tokens)


def check_chat_stream(base: str, model: str, max_tokens: int) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    chunks, usage = 0, None
    for _, event in stream_events(f"{base}/v1/chat/completions", body):
        if event.get("choices"):
            if not isinstance(_field(event, "choices.0.delta"), dict):
                raise SmokeFailure("chat stream: expected choices[0].delta to be an object")
            chunks += 1
        if event.get("usage"):
            usage = event["usage"].get("completion_tokens")
    if chunks == 0:
        raise SmokeFailure("chat stream: expected chunks with choices, found none")
    return _tokens(usage, "chat stream", max_tokens)


def check_generate(base: str, max_tokens: int) -> int:
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}}
    out = get_json(f"{base}/generate", body)
    if not isinstance(_field(out, "text"), str):
        raise SmokeFailure("generate: expected 'text' to be a string")
    return _tokens(_field(out, "meta_info.completion_tokens"), "generate", max_tokens)


@dataclass
class Timing:
    ttft_s: float
    decode_tokens: int
    decode_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else float("nan")


def check_generate_stream(base: str, max_tokens: int) -> tuple[int, Timing]:
    """Streaming /generate: each event carries the cumulative completion_tokens."""
    body = {"text": PROMPT, "stream": True,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}}
    sent = time.perf_counter()
    first = last = None
    for arrived, event in stream_events(f"{base}/generate", body):
        tokens = _field(event, "meta_info.completion_tokens")
        if not isinstance(_field(event, "text"), str):
            raise SmokeFailure("generate stream: expected 'text' to be a string")
        if isinstance(tokens, int) and tokens > 0:
            first = first or (arrived, tokens)
            last = (arrived, tokens)
    if first is None:
        raise SmokeFailure("generate stream: expected events with generated tokens, found none")
    count = _tokens(last[1], "generate stream", max_tokens)
    return count, Timing(first[0] - sent, last[1] - first[1], last[0] - first[0])


def run_checks(base: str, max_tokens: int, say) -> Timing:
    model = check_models(base)
    say(f"GET /v1/models: ok ({model})")
    say(f"chat completion: ok, {check_chat(base, model, max_tokens)} tokens")
    say(f"chat completion (stream): ok, {check_chat_stream(base, model, max_tokens)} tokens")
    say(f"generate: ok, {check_generate(base, max_tokens)} tokens")
    count, timing = check_generate_stream(base, max_tokens)
    say(f"generate (stream): ok, {count} tokens")
    return timing


# -- driver -------------------------------------------------------------------------------------

def smoke(launch: serve_cmd.Launch, host: str, port: int, timeout: float,
          max_tokens: int, log_path: Path, grace: float) -> int:
    def say(msg):
        print(f"smoke: {msg}", flush=True)

    if not port_is_free(host, port):
        say(f"FAIL: port {port} on {host} is busy (another server?); stop it or pass PORT=<free port>")
        return 1
    say(f"starting: {launch.shell()}")
    say(f"server log: {log_path}")
    proc = None
    rc = 1
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        proc = start_server(launch, log_path)
        base = f"http://{host}:{port}"
        say(f"healthy after {wait_healthy(base, proc, timeout):.1f} s")
        timing = run_checks(base, max_tokens, say)
        say(f"time to first token {timing.ttft_s * 1e3:.1f} ms; decode {timing.tokens_per_s:.1f} tokens/s "
            f"({timing.decode_tokens} tokens after the first, streaming /generate, batch 1)")
        rc = 0
    except SmokeFailure as exc:
        say(f"FAIL: {exc}")
        print(f"---- last lines of {log_path} ----\n{log_tail(log_path)}", flush=True)
    except (KeyboardInterrupt, _Terminated):
        say("interrupted")
        rc = 130
    finally:
        # No second Ctrl-C/SIGTERM may cut the teardown short (it is bounded by grace + 10 s).
        previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if proc is not None:
            left = stop_server(proc, grace)
            if left:
                say(f"FAIL: server processes {left} survived SIGKILL")
                rc = rc or 1
            else:
                say("server stopped")
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    for line in harness_lines(log_path):
        say(f"server log: {line}")
    if rc == 0:
        say("PASS")
    return rc


def harness_lines(log_path: Path, limit: int = 24) -> list[str]:
    """The distinct [overlay-boxhooks] lines of the server log (pids dropped), in order."""
    import re
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return []
    seen = []
    for line in text.splitlines():
        if "[overlay-boxhooks]" in line:
            line = re.sub(r" \(pid \d+\)$", "", line[line.index("[overlay-boxhooks]"):])
            if line not in seen:
                seen.append(line)
    return seen[:limit]


def _raise_terminated(signum, frame):
    raise _Terminated()


def main(argv: list[str] | None = None) -> int:
    printable_streams()   # a terminal that cannot encode a character gets it escaped
    parser = argparse.ArgumentParser(prog="python -m serving.smoke", description=__doc__.split("\n")[0])
    serve_cmd.add_arguments(parser)
    parser.add_argument("--timeout", type=float, default=1200.0,
                        help="seconds to wait for /health (model load + CUDA-graph capture)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per request")
    parser.add_argument("--log", type=Path, default=DEFAULT_LOG, help="server log file")
    parser.add_argument("--stop-grace", type=float, default=20.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--server-cmd", help="run this command instead of sglang ({port} is filled in)")
    args = parser.parse_args(argv)
    host = "127.0.0.1"
    if args.server_cmd:
        launch = serve_cmd.Launch(argv=shlex.split(args.server_cmd.replace("{port}", str(args.port))))
    else:
        rc, site = serve_cmd.bundle_gate(args)   # bundle mode only: install on first use, then the gate
        if rc:
            return rc
        launch = serve_cmd.launch_from_args(args, site)
    return smoke(launch, host, args.port, args.timeout, args.max_tokens, args.log, args.stop_grace)


if __name__ == "__main__":
    sys.exit(main())
