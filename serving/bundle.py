"""Serving on an offline GPU machine: one self-contained bundle, built here, installed there without a network.

    python3 -m serving.bundle build [--out build/bundle] [--jit-cache DIR] [--gpu-cc 90]     # `make bundle`
    python3 -m serving.bundle install BUNDLE_DIR --into SITE_ROOT                           # on the GPU machine
    python3 -m serving.bundle env SITE_ROOT pinned|patched                                  # export lines for a shell
    python3 -m serving.bundle budget [--bundle build/bundle | --limit-only]   # within budget? (`make bundle-budget`)
    python3 -m serving.bundle prebuild-jit --arch 9.0 --out build/jit-cache                 # serving/bundle_jit.py

The GPU machine must already have the pinned runtime (pin.lock [runtime]: torch 2.11.0, triton 3.6.0) on
CPython 3.12, x86_64. The bundle carries everything else the DeepSeek-V4 server imports (docs/gpu_box.md):
the pinned sglang / flashinfer wheels (exactly the files `make apply` verifies; split into the payload and rebuilt
byte for byte by install, serving/bundle_rezip.py), the wheel closure of serving/bundle_requirements.txt,
sglang-kernel 0.4.4 and transformers 5.8.1 without what the server never loads (serving/bundle_slim.py),
stand-ins for IPython, soundfile and datasets, and optionally a prebuilt tvm-ffi JIT cache. manifest.json lists every file
with size, sha256 and why it is there, and every member removed from sglang-kernel.

`install` checks every file against the manifest before it writes anything, then lays out SITE_ROOT:

    SITE_ROOT/artifacts/       the pinned wheels, rebuilt and sha256-checked: a patchkit cache (PATCHKIT_CACHE=SITE_ROOT)
    SITE_ROOT/common/          the closure wheels + slim sglang-kernel (pip install --no-index --no-deps --target)
    SITE_ROOT/stubs/           the stand-ins the machine lacks
    SITE_ROOT/trees/pinned/    sglang + flashinfer unpacked from the pinned wheels (pristine)
    SITE_ROOT/trees/patched/   a copy of pinned with this patch set applied by `apply.py apply --target`
    SITE_ROOT/jit-cache/       TVM_FFI_CACHE_DIR: seeded from the bundle's cache, kept across installs

Interface for the serving harness (serve / smoke / bench with BUNDLE= and TREE=):

    tree_pythonpath(site_root: Path, tree: str) -> list[str]
        PYTHONPATH entries, in order, that make `import sglang, flashinfer, sgl_kernel, transformers, ...`
        resolve to that tree ("pinned" or "patched") plus the common deps: [trees/<tree>, common, stubs].
    jit_cache_dir(site_root: Path) -> Path
        where TVM_FFI_CACHE_DIR should point (created if missing).

The slimmed packages (sglang-kernel; the stand-ins) are outside the pinned-release guarantees of `apply`, which
covers the sglang and flashinfer trees only; they carry their own manifest.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from patchkit import PatchkitError
from patchkit.hashing import sha256_file
from patchkit.lockfile import load_lock
from patchkit.names import canonical_name
from patchkit.report import printable_streams

from . import REPO, bundle_rezip, bundle_slim, tree_copy
from .bundle_closure import REQUIREMENTS, closure_runtime, read_requirements
from .bundle_manifest import (FORMAT, MANIFEST, MIB, PAYLOAD, BundleError, check_size, entry,
                                     extract_payload, read_manifest, size_report, verify_files, verify_payload,
                                     write_manifest, write_payload)


TREES = ("pinned", "patched")
STUBS = REPO / "serving" / "bundle_stubs"
DEFAULT_OUT = REPO / "build" / "bundle"
DOWNLOADS = REPO / "build" / "bundle-downloads"
# The bundle's budget: the checkout and the bundle, copied together to a machine without network, stay within
# BUDGET_MIB, so one small copy serves the box; a Triton or FlashInfer payload (bench/airgapped/) is copied beside
# them when a run needs it, and states its own size.
BUDGET_MIB = 48
LIMIT_MIB = 40     # the bundle make bundle builds at most; the tree may then take BUDGET - LIMIT = 8 MiB
TARGET_PYTHON = "3.12"
# pip matches manylinux tags exactly: every tag a wheel of the closure carries is listed (x86_64 only).
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64"]
SLIMMED = {"sglang-kernel", "transformers"}   # closure entries re-packed by serving/bundle_slim.py, not carried whole


def say(msg: str) -> None:
    print(f"bundle: {msg}", flush=True)


# ---- interface for the serving harness ---------------------------------------------------------------------------
def tree_pythonpath(site_root: Path, tree: str) -> list[str]:
    """PYTHONPATH entries (in order) that run the `tree` ("pinned" or "patched") of an installed bundle."""
    if tree not in TREES:
        raise BundleError(f"tree: expected one of {', '.join(TREES)}, found {tree!r}")
    site_root = Path(site_root).resolve()
    tree_dir = site_root / "trees" / tree
    if not (tree_dir / "sglang").is_dir() or not (site_root / "common").is_dir():
        raise BundleError(f"{site_root}: expected a bundle installed by 'python3 -m serving.bundle install' "
                          f"(trees/{tree}/sglang and common/), found none")
    return [str(tree_dir), str(site_root / "common"), str(site_root / "stubs")]


def jit_cache_dir(site_root: Path) -> Path:
    """TVM_FFI_CACHE_DIR for an installed bundle: seeded from the bundle's prebuilt cache, kept across installs."""
    path = Path(site_root).resolve() / "jit-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


def env_lines(site_root: Path, tree: str) -> list[str]:
    path = ":".join(tree_pythonpath(site_root, tree))
    return [f'export PYTHONPATH={shlex.quote(path)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
            f"export TVM_FFI_CACHE_DIR={shlex.quote(str(jit_cache_dir(site_root)))}"]


# ---- build -------------------------------------------------------------------------------------------------------
def find_wheel(folder: Path, name: str, version: str) -> Path:
    found = [p for p in sorted(Path(folder).glob("*.whl"))
             if canonical_name(p.name.split("-")[0]) == canonical_name(name) and p.name.split("-")[1] == version]
    if len(found) != 1:
        raise BundleError(f"{folder}: expected one wheel of {name}=={version}, found "
                          f"{', '.join(p.name for p in found) or 'none'}")
    return found[0]


def pip_download(requirements: Path, dest: Path, python_version: str) -> None:
    """The closure for the GPU machine's Python, with the user's own pip configuration (index, certificates)."""
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
            *[a for p in PLATFORMS for a in ("--platform", p)], "-d", str(dest), "-r", str(requirements)]
    say(f"downloading the wheel closure into {dest} (pip download, your pip configuration)")
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def bundle_engine(line: str | None, path: Path = REQUIREMENTS):
    """The engine of the release line a bundle is built for: the one whose pinned runtime is the closure's (no LINE
    given), or LINE if its runtime is the closure's; else one line saying which line would do. The build's one
    reading of its line: everything after takes this engine."""
    from patchkit.engine import Engine
    from patchkit.lines import line_for_runtime, runtime_line
    from patchkit.lockfile import load_locks

    torch_v, triton_v = closure_runtime(path)
    if line is None:
        return Engine.for_lock(REPO, runtime_line(load_locks(REPO / "pin.lock"), torch_v, triton_v))
    engine = Engine.from_repo(REPO, line=line)
    runtime = engine.lock.runtime
    if (runtime.get("torch"), runtime.get("triton")) != (torch_v, triton_v):
        fits = line_for_runtime(REPO / "pin.lock", torch_v, triton_v)
        raise BundleError(f"line {line}: expected a line whose runtime is the closure's ({path.name}: torch {torch_v}, "
                          f"triton {triton_v}), found torch {runtime.get('torch')}, triton {runtime.get('triton')}; "
                          f"line {fits} has it (make bundle LINE={fits})")
    return engine


def pinned_artifacts(engine, log=say) -> list[tuple[Path, str]]:
    """[(verified wheel path, why)] — the same files `make apply` fetches and checks (patchkit's fetch)."""
    out = []
    for name, up in engine.lock.upstreams.items():
        wheel = engine.pristine(name, log).wheel
        out.append((wheel, f"pinned {up.label} (pin.lock, sha256 verified); install unpacks it "
                           f"into trees/pinned and applies the patch set to a copy in trees/patched"))
    return out


def _doc_line(path: Path) -> str:
    text = path.read_text()
    m = re.match(r'\s*"""(.+?)(?:\n|""")', text)
    return m.group(1).strip() if m else f"stand-in module {path.name}"


def jit_cache_members(caches, gpu_cc: int | None = None, log=say) -> list[Path]:
    """The compiled modules of tvm-ffi caches: <build dir>/<module>.so, which sglang's load_jit loads directly.

    sglang names each build dir ..._arch_<major.minor>__tvmffi_<version>; with gpu_cc, modules built for another
    arch are left out (the GPU machine never loads them). A build dir found in several caches is taken from the first.
    """
    found: dict[str, Path] = {}
    other = 0
    for cache in [caches] if isinstance(caches, (str, Path)) else caches:
        cache = Path(cache)
        if not cache.is_dir():
            raise BundleError(f"--jit-cache {cache}: expected a tvm-ffi cache directory, found none")
        modules = [p for p in sorted(cache.glob("*/*.so")) if p.parent.name.startswith(p.stem)]
        if not modules:
            raise BundleError(f"--jit-cache {cache}: expected <build dir>/<module>.so files, found none")
        for so in modules:
            m = re.search(r"__arch_(\d+)\.(\d+)", so.parent.name)
            if gpu_cc is not None and m and int(m.group(1)) * 10 + int(m.group(2)) != gpu_cc:
                other += 1
                continue
            found.setdefault(so.parent.name, so)
    if other:
        log(f"left out {other} JIT module(s) built for another arch than compute capability {gpu_cc}")
    if not found:
        raise BundleError(f"--jit-cache {', '.join(map(str, [caches] if isinstance(caches, (str, Path)) else caches))}: "
                          f"expected modules for compute capability {gpu_cc}, found only other archs")
    return [found[name] for name in sorted(found)]


def assemble(out: Path, artifacts: list[tuple[Path, str]], wheels: list[tuple[Path, str]], *, gpu_cc: int,
             python_version: str = TARGET_PYTHON, jit_cache=None, limit_mib: float = LIMIT_MIB,
             stubs: Path = STUBS, lock=None, whole_wheels: bool = False) -> dict:
    """Write the bundle directory `out` (replacing it only on success) and return its manifest.

    `wheels` are the closure as downloaded; names in SLIMMED are slimmed, the rest re-packed stored. The pinned
    `artifacts` travel split inside the payload (serving/bundle_rezip.py; install rebuilds them byte for byte)
    unless `whole_wheels` or this zlib cannot reproduce them: then they are files of the bundle as they are.
    `lock`: the line it is built for (build's one reading of pin.lock); None: the newest line.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".bundle-", dir=out.parent))   # beside out: the final rename stays on one disk
    try:
        staged = work / "bundle"
        payload = work / "payload"
        staged.mkdir(parents=True)
        files, members, removed, rebuilt = [], [], {}, []
        for path, why in artifacts:
            split = None if whole_wheels else bundle_rezip.split(path, payload / "artifacts")
            if split is None:
                dest = staged / "artifacts" / path.name
                dest.parent.mkdir(exist_ok=True)
                shutil.copy2(path, dest)
                files.append(entry(dest, f"artifacts/{path.name}", why))
                continue
            rebuilt.append(entry(path, f"artifacts/{path.name}", f"{why}; rebuilt byte for byte by install from "
                                 f"the payload's artifacts/{path.name}.* (serving/bundle_rezip.py)"))
            for suffix in bundle_rezip.SUFFIXES:
                members.append(entry(payload / "artifacts" / f"{path.name}{suffix}", f"artifacts/{path.name}{suffix}",
                                     f"part of the pinned {path.name}, split to compress with the payload "
                                     f"({len(split['streams'])} deflate streams at zlib level(s) "
                                     f"{sorted({s[3] for s in split['streams']})}, zlib {split['zlib']})"))
        for path, why in wheels:
            dist = canonical_name(path.name.split("-")[0])
            source = {"file": path.name, "sha256": entry(path, path.name, "")["sha256"]}
            if dist in SLIMMED:
                if dist == "sglang-kernel":
                    dest, dropped = bundle_slim.slim_kernel_wheel(path, payload / "wheels", gpu_cc)
                    how = f"slimmed for compute capability {gpu_cc}"
                else:
                    dest, dropped = bundle_slim.slim_transformers_wheel(path, payload / "wheels")
                    how = "slimmed to the model code the DeepSeek-V4 server path imports"
                removed[dist] = dropped
                why = (f"{why}; {how}: {len(dropped)} member(s) removed "
                       f"({sum(d['size'] for d in dropped) / MIB:.0f} MiB unpacked), see 'removed'")
            else:
                dest = payload / "wheels" / path.name
                bundle_slim.repack(path, dest)
                why = f"{why} (re-packed stored; same files and RECORD as the index's wheel)"
            members.append(entry(dest, f"wheels/{dest.name}", why, source=source))
        for path in sorted(p for p in Path(stubs).rglob("*.py")):
            rel = path.relative_to(stubs).as_posix()
            dest = payload / "stubs" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
            members.append(entry(dest, f"stubs/{rel}", "stand-in: " + _doc_line(path)))
        if jit_cache:
            for so in jit_cache_members(jit_cache, gpu_cc):
                rel = f"{so.parent.name}/{so.name}"
                dest = payload / "jit-cache" / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(so, dest)
                members.append(entry(dest, f"jit-cache/{rel}", "prebuilt sglang jit_kernel module (tvm-ffi cache; "
                                     "its directory name carries module, source hash, CUDA arch and tvm-ffi version)"))
        say(f"compressing {len(members)} payload members into {PAYLOAD}")
        write_payload(payload, staged / PAYLOAD)
        files.append(entry(staged / PAYLOAD, PAYLOAD, "one xz stream of everything under 'payload' (wheels stored "
                           "inside compress about twice as well as their own deflate)"))
        lock = lock or load_lock(REPO / "pin.lock")
        manifest = {
            "format": FORMAT,
            "built_by": "python3 -m serving.bundle build",
            "target": {"python": python_version, "implementation": "cp", "platform": "manylinux x86_64",
                       "gpu_compute_capability": gpu_cc, "line": lock.line, **{k: lock.runtime[k] for k in ("torch", "triton")
                                                             if k in lock.runtime}},
            "limit_mib": limit_mib,
            "note": ("artifacts/ are the pinned releases apply.py verifies; the slimmed sglang-kernel and the "
                     "stand-ins are outside apply's pinned-release guarantees and are vouched for by this manifest"),
            "files": files,
            "payload": members,
            "artifacts": rebuilt,
            "removed": removed,
        }
        write_manifest(staged, manifest)
        check_size(staged, manifest, limit_mib)
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def carried_tree_bytes(repo: Path = REPO) -> int:
    """Bytes of the checkout's files that are copied to the GPU machine (serving/tree_copy.py: tracked, and untracked
    but not ignored, less the recorded raw output of bench/runs/)."""
    return sum((Path(repo) / rel).stat().st_size for rel in tree_copy.carried_files(repo))


def check_budget(bundle: Path | None, repo: Path = REPO, limit_mib: float = LIMIT_MIB) -> int:
    """Whether the tree and a bundle, copied together, stay within BUDGET_MIB; 1 when they do not.

    With a built `bundle` its real size counts; with bundle=None (CI, which cannot build one) the most `make bundle`
    builds (`limit_mib`: assemble refuses a bigger bundle), so the check holds for any bundle built from this tree.
    """
    tree = carried_tree_bytes(repo)
    if bundle is None:
        packed, what = limit_mib * MIB, f"the largest bundle make bundle builds ({limit_mib:g} MiB, its limit)"
    else:
        files = [f for f in bundle.rglob("*") if f.is_file()] if bundle.is_dir() else []
        if not files:
            raise BundleError(f"expected a built bundle at {bundle}, found no files there (make bundle; or "
                              f"--limit-only to check the tree against the bundle's size limit)")
        packed = sum(f.stat().st_size for f in files)
        what = f"{os.path.relpath(bundle, repo)} ({packed / MIB:.2f} MiB)"
    left = BUDGET_MIB * MIB - tree - packed
    say(f"copied to the GPU machine: the tree ({tree / MIB:.2f} MiB) and {what}: {(tree + packed) / MIB:.2f} MiB, "
        f"expected at most the bundle's budget of {BUDGET_MIB} MiB ({left / MIB:.2f} MiB left)")
    if left < 0:
        say(f"over by {-left / MIB:.2f} MiB: slim the bundle or the checkout (recorded raw output under bench/runs/ "
            "is not copied and counts nothing)")
        return 1
    return 0


def build(out: Path, jit_cache: list[Path] | None, gpu_cc: int, limit_mib: float, python_version: str = TARGET_PYTHON,
          downloads: Path = DOWNLOADS, line: str | None = None, whole_wheels: bool = False) -> int:
    reqs = read_requirements()
    engine = bundle_engine(line)   # the closure is one runtime's: a line of another runtime fails before any download
    if jit_cache:
        jit_cache_members(jit_cache, gpu_cc, log=lambda *_: None)   # a wrong --jit-cache fails before any download
    artifacts = pinned_artifacts(engine)
    wheels_dir = downloads / f"cp{python_version.replace('.', '')}"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    pip_download(REQUIREMENTS, wheels_dir, python_version)
    wheels = [(find_wheel(wheels_dir, name, version), why) for name, version, why in reqs]
    out.parent.mkdir(parents=True, exist_ok=True)
    manifest = assemble(out, artifacts, wheels, gpu_cc=gpu_cc, python_version=python_version, jit_cache=jit_cache,
                        limit_mib=limit_mib, lock=engine.lock, whole_wheels=whole_wheels)
    total, items = size_report(out, manifest, limit_mib)
    say(f"{out}: {total / MIB:.1f} MiB (limit {limit_mib:g} MiB), {len(manifest['files'])} files, "
        f"{len(manifest['payload'])} payload members; biggest items:")
    for name, size in items[:10]:
        print(f"  {size / MIB:7.1f} MiB  {name}")
    for dist, dropped in manifest["removed"].items():
        reasons: dict[str, list[dict]] = {}
        for d in dropped:
            reasons.setdefault(d["why"], []).append(d)
        for why, ds in reasons.items():
            what = ds[0]["path"] if len(ds) == 1 else f"{len(ds)} files"
            print(f"  removed from {dist}: {what} ({sum(d['size'] for d in ds) / MIB:.1f} MiB): {why}")
    say(f"install on the GPU machine: python3 -m serving.bundle install {os.path.relpath(out, REPO)} --into SITE_ROOT")
    return check_budget(out)


# ---- install -----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _patchkit_cache(cache: Path):
    """patchkit's fetch() looks in $PATCHKIT_CACHE/artifacts and checks sha256 (SITE_ROOT is such a cache)."""
    old = os.environ.get("PATCHKIT_CACHE")
    os.environ["PATCHKIT_CACHE"] = str(cache)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PATCHKIT_CACHE", None)
        else:
            os.environ["PATCHKIT_CACHE"] = old


def _have_module(name: str, besides: Path) -> bool:
    """Whether this Python finds `name` anywhere but under `besides` (an earlier install's stubs on PYTHONPATH)."""
    import importlib.util
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return spec is not None and not str(spec.origin or "").startswith(str(besides) + os.sep)


def make_trees(cache: Path, trees: Path, engine) -> None:
    """trees/pinned: the pinned wheels (cache/artifacts) unpacked; trees/patched: a copy with `apply.py apply
    --target` run on it."""
    pinned, patched = trees / "pinned", trees / "patched"
    pinned.mkdir(parents=True)
    with _patchkit_cache(cache):
        for name, up in engine.lock.upstreams.items():
            engine.pristine(name).unpack(pinned, root=up.root)
    shutil.copytree(pinned, patched)
    env = {**os.environ, "PATCHKIT_CACHE": str(cache)}
    say("applying the patch set to trees/patched (apply.py apply --target, artifacts from the bundle)")
    done = subprocess.run([sys.executable, str(REPO / "apply.py"), "apply", "--line", engine.lock.line,
                           "--target", str(patched)], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise BundleError(f"apply.py apply --target {patched}: expected success, found exit {done.returncode}: "
                          f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def rebuild_artifacts(bundle: Path, unpacked: Path, manifest: dict, dest: Path) -> None:
    """dest: the pinned wheels, byte for byte: rebuilt from the payload's split parts, or copied whole from the
    bundle. A patchkit cache folder (SITE_ROOT/artifacts), so the GPU suite needs no other copy of them."""
    dest.mkdir(parents=True)
    for art in manifest.get("artifacts", []):
        name = Path(art["path"]).name
        try:
            built = bundle_rezip.join(unpacked / "artifacts", name, dest)
        except bundle_rezip.RezipError as exc:
            raise BundleError(f"{exc}; nothing installed") from None
        if sha256_file(built) != art["sha256"]:
            raise BundleError(f"{name}: expected sha256 {art['sha256'][:16]} (the manifest's) after rebuilding, found "
                              f"{sha256_file(built)[:16]}; nothing installed")
    for f in manifest["files"]:
        if f["path"].startswith("artifacts/"):
            shutil.copy2(bundle / f["path"], dest / Path(f["path"]).name)


def install(bundle: Path, site_root: Path) -> int:
    bundle, site_root = Path(bundle).resolve(), Path(site_root).resolve()
    manifest = read_manifest(bundle)
    want = manifest["target"]["python"]
    found = f"{sys.version_info.major}.{sys.version_info.minor}"
    if found != want:
        raise BundleError(f"{bundle}: built for Python {want}, found Python {found} running the install")
    verify_files(bundle, manifest)
    site_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".install-", dir=site_root))
    try:
        unpacked = work / "payload"
        extract_payload(bundle / PAYLOAD, unpacked)
        verify_payload(unpacked, manifest)
        say(f"{bundle}: every file matches its manifest ({len(manifest['files'])} files, "
            f"{len(manifest['payload'])} payload members)")
        wheels = sorted(str(p) for p in (unpacked / "wheels").glob("*.whl"))
        new = work / "new"
        rebuild_artifacts(bundle, unpacked, manifest, new / "artifacts")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                        "--no-deps", "--no-compile", "--no-cache-dir", "--target", str(new / "common"), *wheels],
                       check=True)
        (new / "stubs").mkdir(parents=True)
        for top in sorted((unpacked / "stubs").iterdir()) if (unpacked / "stubs").is_dir() else []:
            name = top.stem if top.is_file() else top.name
            if _have_module(name, besides=site_root):
                say(f"stand-in for {name} not installed: this machine has {name}")
                continue
            (shutil.copytree if top.is_dir() else shutil.copy2)(top, new / "stubs" / top.name)
        from patchkit.engine import Engine
        engine = Engine.from_repo(REPO, line=manifest["target"].get("line"))   # the line it was built for
        make_trees(new, new / "trees", engine)
        for part in ("artifacts", "common", "stubs", "trees"):   # swapped in only now: a failed install left SITE_ROOT as it was
            if (site_root / part).exists():
                shutil.rmtree(site_root / part)
            (new / part).rename(site_root / part)
        cache = jit_cache_dir(site_root)
        seeded = 0
        for so in sorted((unpacked / "jit-cache").glob("*/*.so")) if (unpacked / "jit-cache").is_dir() else []:
            dest = cache / so.parent.name / so.name
            if not dest.exists():                       # a module the machine built itself stays
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(so, dest)
                seeded += 1
        shutil.copy2(bundle / MANIFEST, site_root / "bundle-manifest.json")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"installed into {site_root}: trees/pinned, trees/patched, common/, stubs/, artifacts/ "
        f"(PATCHKIT_CACHE={site_root}); jit-cache/ (+{seeded} prebuilt)")
    say(f"use: eval \"$(python3 -m serving.bundle env {site_root} patched)\"   (or pinned)")
    return 0


# ---- command line ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    printable_streams()   # a terminal that cannot encode a character gets it escaped
    parser = argparse.ArgumentParser(prog="python3 -m serving.bundle", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the offline bundle (needs the package index)")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT)
    b.add_argument("--jit-cache", type=Path, action="append", metavar="DIR",
                   help="a tvm-ffi cache (prebuild-jit --out, or ~/.cache/tvm-ffi from a GPU run); repeatable")
    b.add_argument("--gpu-cc", type=int, default=90,
                   help="compute capability of the GPU machine: 90 keeps sgl_kernel's sm90 ops (H100/H200), any other "
                        "value its sm100 ops (what sgl_kernel loads on sm_100 / sm_120); default 90")
    b.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    b.add_argument("--whole-wheels", action="store_true",
                   help="carry the pinned wheels as files, not split into the payload (for a GPU machine whose "
                        "zlib does not rebuild them: install says so)")
    b.add_argument("--line", help="the release line to bundle (pin.lock; default: the line whose runtime is the "
                                  "closure's, bundle_requirements.txt '# runtime:')")
    b.add_argument("--python-version", default=TARGET_PYTHON,
                   help=f"the GPU machine's Python (major.minor); default {TARGET_PYTHON}")
    i = sub.add_parser("install", help="install a bundle on the GPU machine (offline)")
    i.add_argument("bundle", type=Path)
    i.add_argument("--into", type=Path, required=True, metavar="SITE_ROOT")
    e = sub.add_parser("env", help="print export lines (PYTHONPATH, TVM_FFI_CACHE_DIR) for one tree")
    e.add_argument("site_root", type=Path)
    e.add_argument("tree", choices=TREES)
    c = sub.add_parser("budget", help=f"do the tree and the bundle, copied together, stay within "
                                      f"the bundle's budget of {BUDGET_MIB} MiB?")
    c.add_argument("--bundle", type=Path, default=DEFAULT_OUT)
    c.add_argument("--limit-only", action="store_true",
                   help="no bundle built (CI): count the bundle at its size limit, the most make bundle builds")
    t = sub.add_parser("tree-copy", help="write the checkout as it is copied to the GPU machine (no recorded raw output)")
    t.add_argument("--out", type=Path, required=True, help="an absent or empty folder")
    t.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    p = sub.add_parser("prebuild-jit", help="compile sglang's jit_kernel modules into a tvm-ffi cache (needs nvcc)")
    from . import bundle_jit
    bundle_jit.add_arguments(p)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            return build(args.out.resolve(), args.jit_cache, args.gpu_cc, args.limit_mib, args.python_version,
                         line=args.line, whole_wheels=args.whole_wheels)
        if args.command == "budget":
            return check_budget(None if args.limit_only else args.bundle.resolve())
        if args.command == "tree-copy":
            files = tree_copy.write_copy(args.repo, args.out)
            say(f"{args.out}: {len(files)} files, {carried_tree_bytes(args.repo) / MIB:.2f} MiB (the checkout as "
                "copied to the GPU machine, without the recorded raw output of bench/runs/)")
            return 0
        if args.command == "install":
            return install(args.bundle, args.into)
        if args.command == "env":
            print("\n".join(env_lines(args.site_root, args.tree)))
            return 0
        return bundle_jit.run(args)
    except (BundleError, PatchkitError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"error: {' '.join(map(str, exc.cmd[:4]))} ... exited with {exc.returncode}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
