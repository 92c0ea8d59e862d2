"""Build (and run) the `sglang.launch_server` command for DeepSeek-V4-Flash on sm_120.

    python -m serving.serve_cmd [--model PATH] [--tp N] [--port P] [--context N] [--print-only]
                                [--bundle DIR --tree pinned|patched] [--eager]

With no --model it serves the tiny generated model (serving/tiny_model.py) with random weights.
The command is printed before it runs, so it can be copied and edited.

--bundle serves from an offline bundle (serving/bundle.py, docs/gpu_box.md) with this machine's
python3/torch/triton instead of the .venv-sglang of `make install`: DIR is the bundle directory
(installed on first use into build/bundle-site) or an already installed SITE_ROOT. --tree picks
the patched tree (default) or the pinned baseline. The server then also gets the GPU-box harness:
serving/test_hooks/boxhooks first on PYTHONPATH (OVERLAY_EMULATE_SM120=1 if set; hc_split_sinkhorn without
tilelang) and BOX_ENV, the upstream switches that route around tilelang and DeepGEMM.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from patchkit.report import printable_streams

from . import tiny_model
from . import REPO

DEFAULT_PYTHON = REPO / ".venv-sglang" / "bin" / "python"
DEFAULT_PORT = 30000
DEFAULT_CONTEXT = 65536          # real model: the indexer's CUDA-graph work scales with this
DEFAULT_TINY_CONTEXT = 4096      # tiny model: small pools, quick CUDA-graph capture

# Prefill chunks above sglang's _LARGE_INDEXER_QUERY_THRESHOLD (11673 query tokens) leave the
# sm_120 decode kernel for sgl_kernel.flash_mla's sparse prefill, which has no sm_120 build.
PREFILL_CHUNK = 8192

# The switches of the sm_120 paths the patches live on, each set to the value that keeps the
# patched code in use, so a stale shell variable cannot route around it. Every SGLANG_* name the
# series adds must be listed here (tests/serving/test_serve_cmd.py checks it against the patched tree).
OVERLAY_ENV = {
    # P1: the head-tiled MMA sparse-decode kernel (triton = upstream per-head kernel, torch = fallback)
    "SGLANG_SM120_SPARSE_DECODE": "mma",
    # P3 (0.5.14 line; retired on 0.5.23): the fused bf16 MHC-pre Triton kernel (0 = the same bf16 math as torch ops)
    "SGLANG_SM120_MHC_PRE_TRITON": "1",
    # P4: the length-bounded Triton indexer (0 = upstream torch fallback)
    "SGLANG_SM120_INDEXER_TRITON": "1",
    # P4 debug aid: also write -inf past each row's length (the consumer never reads it)
    "SGLANG_SM120_INDEXER_FILL_TAIL": "0",
}


# Bundle mode: the upstream switches that keep the server off tilelang and DeepGEMM (neither can be
# carried to the offline box). On a real sm_120 the pinned ServerArgs sets the first five itself
# (server_args.py, the DeepseekV4ForCausalLM + is_sm120_supported branch); MHC_POST it does not.
BOX_ENV = {
    "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": "1",   # indexer logits: torch (sm_120: the P2/P4 path), not deep_gemm
    "SGLANG_OPT_DEEPGEMM_HC_PRENORM": "0",      # hc_pre mixes: torch (P3), not deep_gemm.tf32_hc_prenorm_gemm
    "SGLANG_OPT_FP8_WO_A_GEMM": "0",            # attention output wo_a: FP8 linear, not deep_gemm.fp8_einsum
    "SGLANG_OPT_USE_TILELANG_MHC_PRE": "0",     # hc_pre: torch + hc_split_sinkhorn, not tilelang mhc_pre
    "SGLANG_OPT_USE_TOPK_V2": "0",              # indexer top-k: topk_transform_512 (v2 needs > 99 KB smem)
    "SGLANG_OPT_USE_TILELANG_MHC_POST": "0",    # hc_post: torch, not tilelang mhc_post
}
# Several GPUs on one host: no NVLink multicast (NCCL's multicast setup fails on some hosts; harmless on one GPU).
MULTI_GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
HOOKS_DIR = Path(__file__).resolve().parent / "test_hooks" / "boxhooks"
DEFAULT_SITE = REPO / "build" / "bundle-site"
TREES = ("pinned", "patched")


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
    bundle_site: Path | None = None,
    tree: str = "patched",
    eager: bool = False,
    extra_args: list[str] | None = None,
    served_name: str | None = None,
) -> Launch:
    """The launch command; with model=None the tiny model is generated into tiny_dir.

    bundle_site: an installed bundle (bundle mode, see the module doc); tree: which of its trees.
    eager: no CUDA graphs. extra_args: appended to sglang's arguments (the bench's sizes).
    """
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
        argv += ["--load-format", "dummy", "--served-model-name", served_name or tiny_model.SERVED_NAME,
                 # The tiny model's decode step is so short that, with CUDA graphs and the overlap scheduler,
                 # both trees hit an intermittent "illegal instruction" on the H200 (OVERLAY_EMULATE_SM120;
                 # not eager, not without overlap, not with Flash-sized layers: BENCHMARKS.md "Live smoke").
                 # The tiny model is a functional check, so it runs without the overlap; real models keep it.
                 "--disable-overlap-schedule"]
    elif served_name:
        argv += ["--served-model-name", served_name]
    env = dict(OVERLAY_ENV)
    if bundle_site is not None:
        env.update(bundle_env(bundle_site, tree))
        # Marlin is what sm_120 runs for the FP4 experts (triton fails on the fp4-expert config);
        # xgrammar is not in the bundle, so no grammar backend.
        argv += ["--moe-runner-backend", "marlin", "--grammar-backend", "none"]
    if eager:
        argv += ["--disable-cuda-graph"]
    argv += list(extra_args or [])
    return Launch(argv=argv, env=env)


def bundle_env(site_root: Path, tree: str, environ=os.environ) -> dict[str, str]:
    """Environment of a server run from an installed bundle: the tree, the hooks, the box switches."""
    from . import bundle

    if tree not in TREES:
        raise ValueError(f"tree: expected one of {', '.join(TREES)}, found {tree!r}")
    path = [str(HOOKS_DIR), *bundle.tree_pythonpath(Path(site_root), tree)]
    if environ.get("PYTHONPATH"):
        path.append(environ["PYTHONPATH"])
    env = {"PYTHONPATH": os.pathsep.join(path),
           "TVM_FFI_CACHE_DIR": str(bundle.jit_cache_dir(Path(site_root))),
           "PYTHONUNBUFFERED": "1",
           **BOX_ENV, **MULTI_GPU_ENV}
    if environ.get("OVERLAY_EMULATE_SM120"):
        env["OVERLAY_EMULATE_SM120"] = environ["OVERLAY_EMULATE_SM120"]   # shown in the printed command
    return env


def is_installed_site(path: Path) -> bool:
    return (path / "trees").is_dir() and (path / "common").is_dir()


def prepare_bundle(bundle_dir: Path, site_root: Path = DEFAULT_SITE, log=print) -> Path:
    """The SITE_ROOT to serve from: bundle_dir itself if it is installed already, else bundle_dir
    installed into site_root (again only when its manifest differs from the installed one)."""
    bundle_dir = Path(bundle_dir).resolve()
    if is_installed_site(bundle_dir):
        return bundle_dir
    manifest = bundle_dir / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"BUNDLE={bundle_dir}: expected a bundle (manifest.json) or an installed "
                                "SITE_ROOT (trees/, common/), found neither")
    key = install_key(manifest)
    stamp = site_root / ".serve-install-key"
    if is_installed_site(site_root) and stamp.is_file() and stamp.read_text().strip() == key:
        return site_root
    log(f"installing the bundle {bundle_dir} into {site_root} (first use)")
    import subprocess
    done = subprocess.run([sys.executable, "-m", "serving.bundle", "install", str(bundle_dir), "--into", str(site_root)],
                          cwd=REPO)
    if done.returncode:
        raise RuntimeError(f"python3 -m serving.bundle install {bundle_dir} --into {site_root}: exit {done.returncode}")
    stamp.write_text(key + "\n")
    return site_root


def install_key(manifest: Path) -> str:
    """What an install depends on: the bundle (its manifest) and this checkout's series (patches/,
    overlay/: install applies them to trees/patched). A change in either reinstalls."""
    import hashlib
    h = hashlib.sha256(Path(manifest).read_bytes())
    for top in ("patches", "overlay"):
        for f in sorted((REPO / top).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="", help="model dir or hub id (default: tiny model)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (GPUs)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address the server listens on (0.0.0.0: every interface, to serve other machines)")
    parser.add_argument("--context", type=int, default=None,
                        help=f"context length (default {DEFAULT_CONTEXT}, tiny {DEFAULT_TINY_CONTEXT})")
    parser.add_argument("--python", default=None,
                        help=f"interpreter that runs sglang (default {DEFAULT_PYTHON}; with --bundle: this python)")
    parser.add_argument("--bundle", type=Path, default=None,
                        help="serve from an offline bundle dir (installed on first use into build/bundle-site) "
                             "or an installed bundle SITE_ROOT")
    parser.add_argument("--tree", choices=TREES, default="patched",
                        help="with --bundle: the patched tree (default) or the pinned baseline")
    parser.add_argument("--eager", action="store_true", help="no CUDA graphs (--disable-cuda-graph)")
    parser.add_argument("--graph-max-bs", type=int, default=None,
                        help="largest decode batch captured in a CUDA graph (sglang's --cuda-graph-max-bs-decode; "
                             "default: sglang's, 256 on an H200): fewer graphs start faster")
    parser.add_argument("--sglang-args", default="", metavar="ARGS",
                        help="more sglang.launch_server flags, one shell-quoted string, appended last (e.g. "
                             "'--max-total-tokens 65536' so two servers share one GPU)")


def launch_from_args(args: argparse.Namespace, site_root: Path | None = None) -> Launch:
    python = args.python or (sys.executable if args.bundle else str(DEFAULT_PYTHON))
    extra = ["--cuda-graph-max-bs-decode", str(args.graph_max_bs)] if getattr(args, "graph_max_bs", None) else []
    try:
        extra += shlex.split(getattr(args, "sglang_args", "") or "")
    except ValueError as exc:
        raise SystemExit(f"--sglang-args: expected shell-quoted flags, found {args.sglang_args!r} ({exc})") from None
    return build(model=args.model or None, tp=args.tp, port=args.port, context=args.context, python=python,
                 host=getattr(args, "host", "127.0.0.1"),
                 bundle_site=site_root, tree=args.tree, eager=args.eager, extra_args=extra)


def bundle_gate(args: argparse.Namespace, log=print) -> tuple[int, Path | None]:
    """Bundle mode: install if needed, then doctor's gate on this python + the chosen tree.
    (0, site_root) to go on; (1, None) after printing one line saying why not."""
    if not args.bundle:
        return 0, None
    from . import doctor
    try:
        site = prepare_bundle(args.bundle, log=log)
    except (OSError, RuntimeError) as exc:
        log(f"doctor: {exc}")
        return 1, None
    rc = doctor.gate_bundle(Path(args.python or sys.executable), site, args.tree, log=log)
    return rc, (site if rc == 0 else None)


def main(argv: list[str] | None = None) -> int:
    printable_streams()   # a terminal that cannot encode a character gets it escaped
    parser = argparse.ArgumentParser(prog="python -m serving.serve_cmd", description=__doc__.split("\n")[1])
    add_arguments(parser)
    parser.add_argument("--print-only", action="store_true", help="print the command, do not run it")
    parser.add_argument("--install-only", action="store_true",
                        help="with --bundle: install it (if needed) and run the gate, then stop")
    args = parser.parse_args(argv)
    if args.install_only:
        if not args.bundle:
            parser.error("--install-only needs --bundle")
        rc, site = bundle_gate(args)
        print(f"serve_cmd: {'ready: ' + str(site) if rc == 0 else 'not ready'} (tree {args.tree})")
        return rc
    site = None
    if args.bundle and args.print_only:
        # No install and no gate: an installed SITE_ROOT given directly, or the default one.
        site = next((p for p in (args.bundle, DEFAULT_SITE) if is_installed_site(Path(p))), None)
        if site is None:
            print(f"serve_cmd: {args.bundle} is not installed yet; run without --print-only to install it")
            return 1
    elif args.bundle:
        rc, site = bundle_gate(args)
        if rc:
            return rc
    launch = launch_from_args(args, site)
    print(f"+ {launch.shell()}", flush=True)
    if args.print_only:
        return 0
    os.execvpe(launch.argv[0], launch.argv, {**os.environ, **launch.env})


if __name__ == "__main__":
    sys.exit(main())
