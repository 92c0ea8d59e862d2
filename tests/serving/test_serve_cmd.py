"""The serve command line (serving/serve_cmd.py) against the pinned sglang's own parser and source."""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from serving import serve_cmd, tiny_model
from tests.serve_env import import_pinned
from harness.upstream import extract_functions

REPO = Path(__file__).resolve().parents[2]
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
                    served_model_name=tiny_model.SERVED_NAME, disable_overlap_schedule=True)
    else:
        launch = serve_cmd.build(python="python", **REAL)
        want = dict(model_path=REAL["model"], tp_size=4, port=31234, context_length=131072, load_format="auto",
                    disable_overlap_schedule=False)
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


def test_host_reaches_the_server_so_others_can_connect():
    out = subprocess.run([sys.executable, "-m", "serving.serve_cmd", "--print-only", "--python", "/x/python",
                          "--host", "0.0.0.0"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    argv = out.split()
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    out = subprocess.run([sys.executable, "-m", "serving.serve_cmd", "--print-only", "--python", "/x/python"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert out[out.index("--host") + 1] == "127.0.0.1"      # only this machine unless asked


# -- bundle mode (serve from an offline bundle on the GPU box) ---------------------------------------

def installed_site(tmp_path: Path, pristine_root: Path, patched_root: Path) -> Path:
    """The layout `python3 -m serving.bundle install` leaves (serving/bundle.py), with the real trees."""
    site = tmp_path / "site"
    (site / "trees").mkdir(parents=True)
    (site / "trees" / "pinned").symlink_to(pristine_root)
    (site / "trees" / "patched").symlink_to(patched_root)
    (site / "common").mkdir()
    (site / "stubs").mkdir()
    return site


@pytest.mark.parametrize("tree", ["pinned", "patched"])
def test_bundle_command_parses_and_runs_the_chosen_tree_with_the_box_harness(tree, tmp_path, pristine_root,
                                                                               patched_root, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/already/there")
    monkeypatch.setenv("OVERLAY_EMULATE_SM120", "1")
    site = installed_site(tmp_path, pristine_root, patched_root)
    launch = serve_cmd.build(python="python3", tiny_dir=tmp_path / "tiny", bundle_site=site, tree=tree)
    ns = parse_with_pinned_server_args(launch_args(launch))
    assert ns.moe_runner_backend == "marlin" and ns.grammar_backend == "none"
    assert ns.disable_cuda_graph is False                       # CUDA graphs stay on
    path = launch.env["PYTHONPATH"].split(":")
    assert path == [str(serve_cmd.HOOKS_DIR), str(site.resolve() / "trees" / tree), str(site.resolve() / "common"),
                    str(site.resolve() / "stubs"), "/already/there"]
    assert (serve_cmd.HOOKS_DIR / "sitecustomize.py").is_file()
    assert launch.env["TVM_FFI_CACHE_DIR"] == str(site.resolve() / "jit-cache")
    assert launch.env["OVERLAY_EMULATE_SM120"] == "1"
    for name, value in {**serve_cmd.BOX_ENV, **serve_cmd.MULTI_GPU_ENV}.items():
        assert launch.env[name] == value
    eager = serve_cmd.build(python="python3", tiny_dir=tmp_path / "tiny", bundle_site=site, tree=tree, eager=True)
    assert parse_with_pinned_server_args(launch_args(eager)).disable_cuda_graph is True


def test_box_switches_exist_upstream_and_route_where_the_docs_say(pristine_root):
    environ = (pristine_root / "sglang/srt/environ.py").read_text()
    for name, value in serve_cmd.BOX_ENV.items():
        m = re.search(rf"^\s+{name} = EnvBool\((True|False)\)", environ, re.M)
        assert m, f"{name} is not an EnvBool of the pinned environ.py"
        assert (m.group(1) == "True") != (value == "1"), f"{name}={value} is already the pinned default"
    # The sm_120 branch of the pinned ServerArgs sets all but MHC_POST itself (docs/serving.md).
    server_args = (pristine_root / "sglang/srt/server_args.py").read_text()
    start = server_args.index("validate_deepseek_v4_cp(self)")
    branch = server_args[start:server_args.index("elif is_hip():", start)]
    assert "if is_sm120_supported():" in branch
    for name in set(serve_cmd.BOX_ENV) - {"SGLANG_OPT_USE_TILELANG_MHC_POST"}:
        assert f"envs.{name}.set(" in branch, name


def test_print_only_with_an_installed_bundle(tmp_path, pristine_root, patched_root):
    site = installed_site(tmp_path, pristine_root, patched_root)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OVERLAY_EMULATE_SM120")}
    out = subprocess.run([sys.executable, "-m", "serving.serve_cmd", "--print-only", "--bundle", str(site),
                          "--tree", "pinned", "--python", "python3"], cwd=REPO, capture_output=True, text=True,
                         env=env, check=True).stdout
    line = out.strip()
    assert f"PYTHONPATH={serve_cmd.HOOKS_DIR}:{site.resolve()}/trees/pinned:" in line
    assert line.endswith("--moe-runner-backend marlin --grammar-backend none")
    graphs = subprocess.run([sys.executable, "-m", "serving.serve_cmd", "--print-only", "--bundle", str(site),
                             "--graph-max-bs", "8", "--sglang-args", "--max-total-tokens 65536", "--python", "python3"], cwd=REPO,
                            capture_output=True, text=True, env=env, check=True).stdout.strip()
    ns = parse_with_pinned_server_args(shlex.split(graphs.split(" python3 ", 1)[1])[2:])
    assert ns.cuda_graph_max_bs_decode == 8 and ns.disable_cuda_graph is False
    assert ns.max_total_tokens == 65536
    missing = subprocess.run([sys.executable, "-m", "serving.serve_cmd", "--print-only", "--bundle",
                              str(tmp_path / "nothing")], cwd=REPO, capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and "is not installed yet" in missing.stdout


def test_a_directory_that_is_no_bundle_is_refused_in_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected a bundle \\(manifest.json\\) or an installed SITE_ROOT"):
        serve_cmd.prepare_bundle(tmp_path, site_root=tmp_path / "site")
    assert not (tmp_path / "site").exists()
