"""Test double for the sglang server process, driven by tests/serving/test_serve_smoke.py.

    python tests/serve_fake_server.py MODE --port P [--pid-file F] [--event-gap-ms MS]

Modes:
  exit-early    print a load error and exit 3 (a server that dies while loading)
  never-healthy listen, answer /health with 503 forever, ignore SIGTERM, and fork a child
                that sleeps (so the driver must SIGKILL the whole process group)
  good          answer the endpoints the smoke test uses with the shapes sglang returns
  no-tokens     healthy and well-formed, but report zero generated tokens
  logprobs      `good`, and /generate with return_logprob answers sglang's logprob fields (a batch of
                input_ids lists: a list of answers), from a fixed pseudo-random table (FAKE_SHIFT adds to it);
                each such request logs the kernel check's line with the error FAKE_SHADOW, as
                serving/test_hooks/shadow_decode.py does in a real server
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
ACTIVE = [0]   # streaming /generate requests in flight (the "Decode batch" lines report it, as sglang's do)
ACTIVE_LOCK = __import__("threading").Lock()
SHADOW_CALLS = [0]
FAKE_KERNELS = [("_mma_sparse_decode_kernel", 30.0), ("_combine_splits_kernel", 10.0), ("fused_moe_kernel", 60.0)]


def _handler(mode: str, event_gap_s: float = 0.002):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            sys.stdout.write("fake: " + fmt % args + "\n")
            sys.stdout.flush()

        def _json(self, obj, code=200):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _events(self, events):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i, event in enumerate(events):
                if i % 8 == 7:
                    print(f"Decode batch, #running-req: {ACTIVE[0]}, #token: 0, gen throughput (token/s): 1000.00",
                          flush=True)
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()
                time.sleep(event_gap_s)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def do_GET(self):
            if self.path == "/health":
                self.send_response(503 if mode == "never-healthy" else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == "/v1/models":
                self._json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            else:
                self._json({"error": "not found"}, 404)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/v1/chat/completions":
                n = 0 if mode == "no-tokens" else body["max_tokens"]
                if body.get("stream"):
                    chunks = [{"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "x"}}]}
                              for _ in range(n)]
                    chunks.append({"object": "chat.completion.chunk", "choices": [],
                                   "usage": {"prompt_tokens": 5, "completion_tokens": n}})
                    self._events(chunks)
                else:
                    self._json({"object": "chat.completion",
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * n}}],
                                "usage": {"prompt_tokens": 5, "completion_tokens": n}})
            elif self.path == "/generate" and body.get("return_logprob"):
                ids = body["input_ids"]
                batch = ids if ids and isinstance(ids[0], list) else [ids]
                answers = [_logprob_answer(p, body["sampling_params"]["max_new_tokens"], body["top_logprobs_num"])
                           for p in batch]
                SHADOW_CALLS[0] += len(batch)
                if "FAKE_SHADOW" in os.environ:
                    print(f"[overlay-boxhooks] shadow decode: error {float(os.environ['FAKE_SHADOW']):.3e} over "
                          f"{SHADOW_CALLS[0]} calls (pid {os.getpid()})", file=sys.stderr, flush=True)
                self._json(answers if batch is ids else answers[0])
            elif self.path == "/start_profile":
                # sglang's answer is plain text; the trace comes a moment later, as the scheduler writes it
                folder, prefix = body["output_dir"], body.get("profile_prefix") or "profile"
                trace = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": n, "dur": d} for n, d in FAKE_KERNELS]}

                def write_later():
                    import gzip
                    time.sleep(0.3)
                    # written whole, then renamed: however loaded the machine, a reader that sees the file
                    # reads all of it (the driver waits for it to appear, under a hang guard)
                    final = os.path.join(folder, f"{prefix}-1-TP-0.trace.json.gz")
                    partial = os.path.join(folder, ".partial-trace")     # a name no trace glob matches
                    with gzip.open(partial, "wt") as fh:
                        json.dump(trace, fh)
                    os.replace(partial, final)
                __import__("threading").Thread(target=write_later, daemon=True).start()
                data = b"Start profiling.\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif self.path == "/generate":
                n = 0 if mode == "no-tokens" else body["sampling_params"]["max_new_tokens"]
                print(f"fake: /generate temperature {body['sampling_params'].get('temperature')}", file=sys.stderr,
                      flush=True)
                if body.get("stream"):
                    with ACTIVE_LOCK:
                        ACTIVE[0] += 1
                    try:
                        self._events([{"text": "x" * (i + 1), "meta_info": {"completion_tokens": i + 1}}
                                      for i in range(n)])
                    finally:
                        with ACTIVE_LOCK:
                            ACTIVE[0] -= 1
                else:
                    self._json({"text": "x" * n, "meta_info": {"completion_tokens": n}})
            else:
                self._json({"error": "not found"}, 404)

    return Handler


def _logprob_answer(prompt: list, n: int, k: int) -> dict:
    """Greedy steps over a 32-token vocabulary, logprobs from a table seeded by the prompt, shifted by FAKE_SHIFT."""
    import math
    import random
    rng = random.Random(sum(prompt) * 7919 + len(prompt))
    shift = float(os.environ.get("FAKE_SHIFT", "0"))
    tokens, tops = [], []
    for _ in range(n):
        logits = [rng.gauss(0, 3) + (shift * rng.uniform(-1, 1)) for _ in range(32)]
        z = math.log(sum(math.exp(x) for x in logits))
        ranked = sorted(((x - z, t) for t, x in enumerate(logits)), reverse=True)
        tokens.append([ranked[0][0], ranked[0][1], None])
        tops.append([[lp, t, None] for lp, t in ranked[:k]])
    return {"text": "x" * n, "meta_info": {"completion_tokens": n, "output_token_logprobs": tokens,
                                           "output_top_logprobs": tops}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["exit-early", "never-healthy", "good", "no-tokens", "logprobs"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid-file")
    # the pause between two streamed tokens: a driver whose steady window needs concurrent streams to overlap by
    # many tokens passes a longer one, so a request that starts late on a loaded machine still overlaps the others
    parser.add_argument("--event-gap-ms", type=float, default=2.0)
    args = parser.parse_args()
    if args.mode == "exit-early":
        print("fake: RuntimeError: cannot load model weights", flush=True)
        return 3
    pids = [os.getpid()]
    if args.mode == "never-healthy":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        pids.append(subprocess.Popen(["sleep", "600"]).pid)
    if args.pid_file:
        with open(args.pid_file + ".tmp", "w") as fh:
            fh.write(" ".join(map(str, pids)))
        os.replace(args.pid_file + ".tmp", args.pid_file)
    ThreadingHTTPServer(("127.0.0.1", args.port), _handler(args.mode, args.event_gap_ms / 1000)).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
