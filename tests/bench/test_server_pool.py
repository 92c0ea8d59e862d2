"""bench/server/server_pool.py's one-at-a-time runner, against tests/serve_fake_server.py."""
from __future__ import annotations

import sys
from pathlib import Path

from bench.server import server_pool
from serving import serve_cmd

FAKE = Path(__file__).resolve().parents[1] / "serve_fake_server.py"


def test_each_alone_runs_one_server_at_a_time_and_goes_on_past_one_that_fails(tmp_path):
    modes = {"first": "good", "broken": "exit-early", "last": "good"}
    variants = [server_pool.Variant(name, "patched") for name in modes]
    servers = server_pool.build(variants, None, sys.executable, tmp_path, port_base=32300)
    for s in servers:
        s.launch = serve_cmd.Launch(argv=[sys.executable, str(FAKE), modes[s.variant.name], "--port", str(s.port)])
    seen = []

    def work(server):
        seen.append((server.variant.name, [s.variant.name for s in servers if s.proc is not None and s.proc.poll() is None]))

    server_pool.each_alone(servers, 30.0, lambda msg: None, work)
    assert seen == [("first", ["first"]), ("last", ["last"])]
    assert [s.variant.name for s in servers if s.error] == ["broken"]
    assert all(s.proc is None for s in servers)


def test_a_server_whose_port_was_taken_meanwhile_moves_to_a_free_one(tmp_path):
    import socket

    servers = server_pool.build([server_pool.Variant("late", "patched")], None, sys.executable, tmp_path,
                                port_base=32700)
    s = servers[0]
    s.launch = serve_cmd.Launch(argv=[sys.executable, str(FAKE), "good", "--port", str(s.port)])
    taken = s.port
    with socket.socket() as other:      # another process's server on the port picked at build time
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", taken))
        other.listen()
        said = []
        server_pool.each_alone(servers, 30.0, said.append, lambda server: said.append(f"work on {server.port}"))
    assert s.port != taken and s.launch.argv[-1] == str(s.port)
    assert f"work on {s.port}" in said and not s.error
