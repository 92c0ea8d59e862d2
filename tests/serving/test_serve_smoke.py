"""The smoke driver (serving/smoke.py) against fake server processes that fail in known ways.

Each case runs the real driver as `make smoke` does (a subprocess) with --server-cmd pointing at
tests/serve_fake_server.py, and checks: the message, the exit code, and that no process of the
fake server is left behind.
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parents[1] / "serve_fake_server.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def alive(pid: int) -> bool:
    """True while pid is a running process (a zombie is already dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def smoke_argv(mode: str, port: int, tmp_path: Path, *extra: str) -> list[str]:
    server = f"{sys.executable} {FAKE} {mode} --port {{port}} --pid-file {tmp_path / 'pids'}"
    return [sys.executable, "-m", "serving.smoke", "--port", str(port), "--server-cmd", server,
            "--log", str(tmp_path / "server.log"), "--max-tokens", "8", *extra]


def run_smoke(mode: str, tmp_path: Path, *extra: str, port: int | None = None,
              hang_guard: float = 120) -> subprocess.CompletedProcess:
    """The smoke driver against the fake server; `hang_guard`: seconds far above any run's need, after which
    the run counts as hung (TimeoutExpired), never a measured result."""
    return subprocess.run(smoke_argv(mode, port or free_port(), tmp_path, *extra), cwd=REPO,
                          capture_output=True, text=True, timeout=hang_guard)


def fake_pids(tmp_path: Path) -> list[int]:
    pid_file = tmp_path / "pids"
    return [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []


def assert_nothing_left(tmp_path: Path) -> None:
    left = [pid for pid in fake_pids(tmp_path) if alive(pid)]
    assert not left, f"fake server processes still running: {left}"


def test_server_that_exits_early_fails_with_its_log(tmp_path):
    result = run_smoke("exit-early", tmp_path, "--timeout", "60")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL: server exited with code 3 before it became healthy" in result.stdout
    assert "cannot load model weights" in result.stdout     # the tail of the server log
    assert "PASS" not in result.stdout


def test_server_that_never_becomes_healthy_times_out_and_is_killed(tmp_path):
    # The fake ignores SIGTERM and has a child: only a SIGKILL of the whole group stops both. A driver that
    # ignored its --timeout would run into the hang guard (60 s, twenty times the 3 s it is given).
    result = run_smoke("never-healthy", tmp_path, "--timeout", "3", "--stop-grace", "1", hang_guard=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL: server not healthy after 3 s" in result.stdout
    assert "smoke: server stopped" in result.stdout
    assert len(fake_pids(tmp_path)) == 2
    assert_nothing_left(tmp_path)


def test_busy_port_fails_before_starting_anything(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_smoke("good", tmp_path, port=port)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"FAIL: port {port} on 127.0.0.1 is busy" in result.stdout
    assert "starting:" not in result.stdout
    assert not (tmp_path / "pids").exists(), "the server was started although the port was busy"


def test_healthy_server_passes_and_reports_ttft_and_decode_rate(tmp_path):
    result = run_smoke("good", tmp_path, "--timeout", "60")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for line in ("GET /v1/models: ok (fake-model)", "chat completion: ok, 8 tokens",
                 "chat completion (stream): ok, 8 tokens", "generate: ok, 8 tokens",
                 "generate (stream): ok, 8 tokens", "smoke: PASS"):
        assert line in out, out
    assert "time to first token" in out and "tokens/s (7 tokens after the first" in out
    assert_nothing_left(tmp_path)


def test_server_returning_no_tokens_fails_the_shape_check(tmp_path):
    result = run_smoke("no-tokens", tmp_path, "--timeout", "60")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL: chat: expected 1..8 generated tokens, found 0" in result.stdout
    assert_nothing_left(tmp_path)


def test_sigterm_to_the_driver_stops_the_server(tmp_path):
    proc = subprocess.Popen(smoke_argv("never-healthy", free_port(), tmp_path, "--timeout", "600",
                                       "--stop-grace", "1"),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not fake_pids(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fake_pids(tmp_path), "the fake server did not start"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert "smoke: interrupted" in out and "smoke: server stopped" in out
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize("missing", ["/nonexistent/python"])
def test_server_command_that_cannot_start(tmp_path, missing):
    result = subprocess.run([sys.executable, "-m", "serving.smoke", "--port", str(free_port()),
                             "--server-cmd", f"{missing} -m sglang.launch_server",
                             "--log", str(tmp_path / "server.log")],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "FAIL: cannot start the server:" in result.stdout
