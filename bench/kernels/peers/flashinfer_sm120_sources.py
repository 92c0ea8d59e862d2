"""Lay out the sources of the FlashInfer sm_120 decode peer (0.7.2, or --flashinfer VERSION), patched for sm_90a.

    python3 -m bench.kernels.peers.flashinfer_sm120_sources [--flashinfer 0.7.4] [--out build/peer-flashinfer[-VERSION]]

Each wheel named in flashinfer_sm120.json comes through pip's configuration (patchkit's fetch, into
the shared artifact cache) and must hash as that file says. From them OUT gets: FlashInfer's kernel
headers, the sparse_mla_sm120 sources, its bundled CCCL and its sm_120 sparse-MLA Python policy
(OUT/flashinfer/...); SGLang 0.5.23's flash_mla_sm120.py (OUT/sglang/...); the apache-tvm-ffi
wheel the GPU box's python3 (3.12) loads the module with (OUT/site/tvm_ffi). Then the one source
patch, flashinfer_sm120_sm90a.patch, takes out what sm_90a lacks: the block-scaled FP8 MMA (the DSV4
decode's QK) becomes its exact equivalent (unscaled e4m3 MMA, then the power-of-two scales); the
cvt .e2m1x2 / .ue8m0x2 conversions of the DSV4.1 kernels become exact tables; the 8-bit ldmatrix /
stmatrix of the swapAB prefill (DSV3.2 family only; FlashInfer never picks it for DSV4) trap. OUT is
written only whole: the tree is built beside it and renamed into place.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from bench.airgapped.carry import written_whole
from patchkit import PatchkitError
from patchkit.fetch import fetch
from patchkit.lockfile import Upstream
from serving import REPO

HERE = Path(__file__).resolve().parent
SPEC = HERE / "flashinfer_sm120.json"
DEFAULT_OUT = REPO / "build" / "peer-flashinfer"
STAMP = "SOURCES.json"  # what OUT was laid from: the spec's wheels and the patch's bytes


def load_spec(path: Path = SPEC, flashinfer: str | None = None) -> dict:
    """The spec, with its FlashInfer wheel swapped for release `flashinfer` (one of flashinfer_releases)."""
    spec = json.loads(path.read_text())
    default = spec["wheels"]["flashinfer"]["version"]
    if flashinfer and flashinfer != default:
        known = {k: v for k, v in spec.get("flashinfer_releases", {}).items() if not k.startswith("_")}
        if flashinfer not in known:
            raise PatchkitError(f"--flashinfer {flashinfer}: expected one of {', '.join([default, *known])} "
                                f"({path.name} flashinfer_releases), found no such entry")
        spec["wheels"]["flashinfer"] = {**spec["wheels"]["flashinfer"], "version": flashinfer, **known[flashinfer]}
    return spec


def default_out(flashinfer: str | None = None) -> Path:
    """build/peer-flashinfer for the spec's own release, build/peer-flashinfer-VERSION for another."""
    if not flashinfer or flashinfer == load_spec()["wheels"]["flashinfer"]["version"]:
        return DEFAULT_OUT
    return DEFAULT_OUT.with_name(f"{DEFAULT_OUT.name}-{flashinfer}")


def upstream(spec: dict, name: str) -> Upstream:
    w = spec["wheels"][name]
    return Upstream(name=name, package=w["package"], version=w["version"], artifact=w["artifact"],
                    sha256=w["sha256"], root=w["package"])


def extract(wheel: Path, prefixes: list[str], dest: Path) -> int:
    """Every member of `wheel` under one of `prefixes` (a path ending in / is a folder), into dest."""
    count = 0
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if not n.endswith("/")]
        for prefix in prefixes:
            hits = [n for n in names if (n.startswith(prefix) if prefix.endswith("/") else n == prefix)]
            if not hits:
                raise PatchkitError(f"{wheel.name}: expected members under {prefix!r}, found none")
            for n in hits:
                zf.extract(n, dest)
            count += len(hits)
    return count


def apply_patch(tree: Path, patch: Path) -> None:
    """git apply `patch` (paths relative to the wheel root) in `tree`; checked first, so a patch that
    does not fit leaves the tree untouched. A file it names that is not there is an error, not a skip."""
    # Inside a git checkout (build/ is one's), git apply would read the paths from that repository's root
    # and skip every file outside it without a word: the ceiling keeps git from finding the checkout.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(Path(tree).resolve().parent)
    for args in (["--check"], []):
        proc = subprocess.run(["git", "apply", *args, "-p1", str(patch)],
                              cwd=tree, capture_output=True, text=True, env=env)
        if proc.returncode:
            reason = (proc.stderr.strip().splitlines() or [f"git apply exited {proc.returncode}"])[0]
            raise PatchkitError(f"{patch.name} does not apply to the {tree.name} sources: {reason}")


def stamp(spec: dict) -> dict:
    patch = HERE / spec["patch"]
    return {"wheels": {k: v["sha256"] for k, v in spec["wheels"].items()},
            "flashinfer": spec["wheels"]["flashinfer"]["version"], "patch": patch.read_text()}


def prepare(out: Path, spec: dict | None = None, log=print) -> Path:
    """OUT laid out from the checked wheels with the patch applied; an OUT already laid from the same
    wheels and patch is kept as it is."""
    spec = spec or load_spec()
    want = stamp(spec)
    if (out / STAMP).exists() and json.loads((out / STAMP).read_text()) == want:
        log(f"{out}: already laid from these wheels and this patch")
        return out
    if out.exists() and not (out / STAMP).exists():
        raise PatchkitError(f"{out}: expected a folder this command made (with {STAMP}), found another")
    wheels = {name: fetch(upstream(spec, name), log=log) for name in spec["wheels"]}
    with written_whole(out) as tmp:
        n = extract(wheels["flashinfer"], spec["flashinfer_members"], tmp)
        n += extract(wheels["sglang"], spec["sglang_members"], tmp)
        with zipfile.ZipFile(wheels["tvm_ffi"]) as zf:  # the whole package: the box's python3 imports it
            zf.extractall(tmp / "site")
        apply_patch(tmp, HERE / spec["patch"])
        (tmp / STAMP).write_text(json.dumps(want, indent=1))
    log(f"{out}: {n} upstream files, {spec['patch']} applied")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashinfer", help="the FlashInfer release (default: the spec's own, 0.7.2)")
    ap.add_argument("--out", type=Path, help="where the sources go (default: build/peer-flashinfer[-VERSION])")
    args = ap.parse_args(argv)
    try:
        prepare(args.out or default_out(args.flashinfer), load_spec(flashinfer=args.flashinfer))
    except PatchkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
