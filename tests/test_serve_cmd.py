"""The serve command line (serving/serve_cmd.py) against the pinned sglang's own parser and source."""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from serving import serve_cmd, tiny_model
from tests.serve_env import import_pinned
from tests.upstream import extract_functions

REPO = Path(__file__).resolve().parents[1]
REAL = dict(model="deepseek-ai/DeepSeek-V4-Flash", tp=4, port=31234, context=131072)


def parse_with_pinned_server_args(argv: list[str]) -> argparse.Namespace:
    server_args = import_pinned("sglang.srt.server_args")
    parser = argparse.ArgumentParser(prog="sglang serve")   # as prepare_server_args builds it
    server_args.ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)


def launch_args(launch: serve_cmd.Launch) -> list[str]:
    assert launch.argv[1:3] == ["-m", "sglang.launch_server"]
    return launch.argv[3:]


@pytest.mark.parametrize("case", ["tiny", "real"])
def test_command_parses_with_the_pinned_server_argument_parser(case, tmp_path):
    if case == "tiny":
        launch = serve_cmd.build(python="python", tiny_dir=tmp_path / "tiny")
        want = dict(model_path=str(tmp_path / "tiny"), tp_size=1, port=serve_cmd.DEFAULT_PORT,
                    context_length=serve_cmd.DEFAULT_TINY_CONTEXT, load_format="dummy",
                    served_model_name=tiny_model.SERVED_NAME)
    else:
        launch = serve_cmd.build(python="python", **REAL)
        want = dict(model_path=REAL["model"], tp_size=4, port=31234, context_length=131072, load_format="auto")
    ns = parse_with_pinned_server_args(launch_args(launch))
    for key, value in want.items():
        assert getattr(ns, key) == value, key
    assert ns.attention_backend == "dsv4" and ns.page_size == 256 and ns.kv_cache_dtype == "fp8_e4m3"
    assert ns.disable_cuda_graph is False                       # CUDA graphs on
    assert ns.chunked_prefill_size == ns.max_prefill_tokens == serve_cmd.PREFILL_CHUNK
    assert ns.chunked_prefill_size % ns.page_size == 0          # ServerArgs.check_server_args asserts it
    assert ns.host == "127.0.0.1"


def test_prefill_chunk_stays_on_the_sm120_decode_kernel(pristine_root):
    # Above this many query tokens the DSv4 backend leaves the sm_120 kernel for sgl_kernel.flash_mla.
    ns = extract_functions(pristine_root / "sglang/srt/layers/attention/dsv4/metadata.py",
                           ["_LARGE_INDEXER_QUERY_THRESHOLD"], {})
    assert serve_cmd.PREFILL_CHUNK <= ns["_LARGE_INDEXER_QUERY_THRESHOLD"] == 11673


def _sglang_env_names(root: Path) -> set[str]:
    names = set()
    for path in (root / "sglang").rglob("*.py"):
        names |= set(re.findall(r"\bSGLANG_[A-Z0-9_]+\b", path.read_text(errors="replace")))
    return names


def test_overlay_switches_name_every_switch_the_series_adds(pristine_root, patched_root):
    added = _sglang_env_names(patched_root) - _sglang_env_names(pristine_root)
    assert added, "the series adds no SGLANG_* switch: update this test"
    assert added <= set(serve_cmd.OVERLAY_ENV), f"serve_cmd.OVERLAY_ENV lacks {sorted(added - set(serve_cmd.OVERLAY_ENV))}"
    unknown = set(serve_cmd.OVERLAY_ENV) - _sglang_env_names(patched_root)
    assert not unknown, f"OVERLAY_ENV sets switches the patched sglang never reads: {sorted(unknown)}"


def test_print_only_prints_the_exact_command(tmp_path):
    out = subprocess.run([sys.executable, "-m", "serving.serve_cmd", "--print-only", "--python", "/x/python",
                          "--tp", "2", "--port", "30001"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    line = out.strip()
    expected = serve_cmd.build(python="/x/python", tp=2, port=30001)
    assert line == f"+ {expected.shell()}"
    assert line.startswith("+ SGLANG_SM120_") and " /x/python -m sglang.launch_server --model-path " in line
