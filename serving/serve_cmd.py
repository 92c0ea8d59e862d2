"""Build (and run) the `sglang.launch_server` command for DeepSeek-V4-Flash on sm_120.

    python -m serving.serve_cmd [--model PATH] [--tp N] [--port P] [--context N] [--print-only]

With no --model it serves the tiny generated model (serving/tiny_model.py) with random weights.
The command is printed before it runs, so it can be copied and edited.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from serving import tiny_model

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PYTHON = REPO / ".venv-sglang" / "bin" / "python"
DEFAULT_PORT = 30000
DEFAULT_CONTEXT = 65536          # real model: the indexer's CUDA-graph work scales with this
DEFAULT_TINY_CONTEXT = 4096      # tiny model: small pools, quick CUDA-graph capture

# Prefill chunks above sglang's _LARGE_INDEXER_QUERY_THRESHOLD (11673 query tokens) leave the
# sm_120 decode kernel for sgl_kernel.flash_mla's sparse prefill, which has no sm_120 build.
PREFILL_CHUNK = 8192

# The switches of the sm_120 paths the patches live on, each set to the value that keeps the
# patched code in use, so a stale shell variable cannot route around it. Every SGLANG_* name the
# series adds must be listed here (tests/test_serve_cmd.py checks it against the patched tree).
OVERLAY_ENV = {
    # P1: the head-tiled MMA sparse-decode kernel (triton = upstream per-head kernel, torch = fallback)
    "SGLANG_SM120_SPARSE_DECODE": "mma",
    # P3: the fused bf16 MHC-pre Triton kernel (0 = the same bf16 math as torch ops)
    "SGLANG_SM120_MHC_PRE_TRITON": "1",
    # P4: the length-bounded Triton indexer (0 = upstream torch fallback)
    "SGLANG_SM120_INDEXER_TRITON": "1",
    # P4 debug aid: also write -inf past each row's length (the consumer never reads it)
    "SGLANG_SM120_INDEXER_FILL_TAIL": "0",
}


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)   # set on top of the caller's environment

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.argv)}".strip()


def build(
    model: str | None = None,
    tp: int = 1,
    port: int = DEFAULT_PORT,
    context: int | None = None,
    host: str = "127.0.0.1",
    python: str | os.PathLike = DEFAULT_PYTHON,
    tiny_dir: Path = tiny_model.DEFAULT_DIR,
) -> Launch:
    """The launch command; with model=None the tiny model is generated into tiny_dir."""
    tiny = not model
    if tiny:
        model = str(tiny_model.generate(tiny_dir))
    if context is None:
        context = DEFAULT_TINY_CONTEXT if tiny else DEFAULT_CONTEXT
    argv = [
        str(python), "-m", "sglang.launch_server",
        "--model-path", str(model),
        "--tp-size", str(tp),
        "--host", host,
        "--port", str(port),
        # Bounds MAX_SEQ_LEN_FOR_CAPTURE, i.e. the page-table width the indexer sees under
        # CUDA graphs (P4 makes its work follow the real lengths, not this ceiling).
        "--context-length", str(context),
        "--attention-backend", "dsv4",     # the only DSv4 backend; it owns the sm_120 branch
        "--page-size", "256",
        "--kv-cache-dtype", "fp8_e4m3",
        "--chunked-prefill-size", str(PREFILL_CHUNK),
        "--max-prefill-tokens", str(PREFILL_CHUNK),
        # CUDA graphs stay on (no --disable-cuda-graph): the patched kernels are graph-safe.
    ]
    if tiny:
        argv += ["--load-format", "dummy", "--served-model-name", tiny_model.SERVED_NAME]
    return Launch(argv=argv, env=dict(OVERLAY_ENV))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="", help="model dir or hub id (default: tiny model)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (GPUs)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--context", type=int, default=None,
                        help=f"context length (default {DEFAULT_CONTEXT}, tiny {DEFAULT_TINY_CONTEXT})")
    parser.add_argument("--python", default=str(DEFAULT_PYTHON), help="interpreter of the sglang venv")


def launch_from_args(args: argparse.Namespace) -> Launch:
    return build(model=args.model or None, tp=args.tp, port=args.port,
                 context=args.context, python=args.python)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.serve_cmd", description=__doc__.split("\n")[1])
    add_arguments(parser)
    parser.add_argument("--print-only", action="store_true", help="print the command, do not run it")
    args = parser.parse_args(argv)
    launch = launch_from_args(args)
    print(f"+ {launch.shell()}", flush=True)
    if args.print_only:
        return 0
    os.execvpe(launch.argv[0], launch.argv, {**os.environ, **launch.env})


if __name__ == "__main__":
    sys.exit(main())
