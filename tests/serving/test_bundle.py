"""The offline bundle (serving/bundle*.py): selection rules, manifest, size limit, install verification.

sglang-kernel is 615 MB, so these tests build a small stand-in wheel with the same layout (sgl_kernel/flash_ops,
sm90/ and sm100/ common_ops, flashmla_ops) in tmp_path. The pinned sglang / flashinfer wheels are the real ones
(patchkit's verified cache, as every test here uses), so the install test makes real pinned and patched trees.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from patchkit.engine import Engine
from patchkit.hashing import record_digest, sha256_bytes
from patchkit.names import canonical_name
from patchkit.lockfile import load_lock
from patchkit.state import APPLIED, PRISTINE
from serving import bundle, bundle_rezip, bundle_slim
from serving.bundle_manifest import MANIFEST, PAYLOAD, BundleError, sha256_file
from tests.conftest import pristine_wheel

REPO = Path(__file__).resolve().parents[2]

HERE_PY = f"{sys.version_info.major}.{sys.version_info.minor}"
KERNEL_MEMBERS = {
    "sgl_kernel/__init__.py": b"from sgl_kernel.version import __version__\n",
    "sgl_kernel/version.py": b'__version__ = "0.4.4"\n',
    "sgl_kernel/flash_attn.py": b"from sgl_kernel import flash_ops\n",
    "sgl_kernel/flash_ops.abi3.so": b"\x7fELF fa3" * 4000,
    "sgl_kernel/flashmla_ops.abi3.so": b"\x7fELF mla" * 300,
    "sgl_kernel/spatial_ops.abi3.so": b"\x7fELF spatial",
    "sgl_kernel/sm90/common_ops.abi3.so": b"\x7fELF sm90" * 500,
    "sgl_kernel/sm100/common_ops.abi3.so": b"\x7fELF sm100" * 500,
    "triton_kernels/__init__.py": b"",
}


def _record_line(name: str, data: bytes) -> str:
    return f"{name},{record_digest(data)},{len(data)}"


def make_wheel(folder: Path, dist: str, version: str, tag: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD) with deflated members, like the index's."""
    info = f"{dist}-{version}.dist-info"
    files = dict(members)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n".encode()
    files[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    path = Path(folder) / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture
def kernel_wheel(tmp_path) -> Path:
    (tmp_path / "dl").mkdir()
    return make_wheel(tmp_path / "dl", "sglang_kernel", "0.4.4", "cp310-abi3-manylinux2014_x86_64", KERNEL_MEMBERS)


@pytest.fixture
def tiny_wheel(tmp_path) -> Path:
    (tmp_path / "dl").mkdir(exist_ok=True)
    return make_wheel(tmp_path / "dl", "tinydep", "1.0", "py3-none-any", {"tinydep/__init__.py": b"VALUE = 7\n"})


def standin_artifact(tmp_path) -> Path:
    path = tmp_path / "upstream-1.0-py3-none-any.whl"
    path.write_bytes(b"pinned artifact stand-in" * 100)
    return path


def build_standin(tmp_path, kernel_wheel, tiny_wheel, artifacts=None, **kw) -> tuple[Path, dict]:
    out = tmp_path / "bundle"
    artifacts = artifacts if artifacts is not None else [(standin_artifact(tmp_path), "pinned stand-in")]
    manifest = bundle.assemble(out, artifacts, [(kernel_wheel, "the kernels"), (tiny_wheel, "a dependency")],
                               gpu_cc=kw.pop("gpu_cc", 90), python_version=HERE_PY, **kw)
    return out, manifest


# ---- selection rules -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu_cc, kept_ops, dropped_ops", [(90, "sm90", "sm100"), (120, "sm100", "sm90"),
                                                           (100, "sm100", "sm90")])
def test_slim_kernel_keeps_the_ops_the_gpu_loads_and_drops_fa3(tmp_path, kernel_wheel, gpu_cc, kept_ops, dropped_ops):
    slim, removed = bundle_slim.slim_kernel_wheel(kernel_wheel, tmp_path / "out", gpu_cc)
    names = set(zipfile.ZipFile(slim).namelist())
    assert {r["path"] for r in removed} == {"sgl_kernel/flash_ops.abi3.so", f"sgl_kernel/{dropped_ops}/common_ops.abi3.so"}
    assert f"sgl_kernel/{kept_ops}/common_ops.abi3.so" in names
    assert {"sgl_kernel/flashmla_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so", "sgl_kernel/flash_attn.py",
            "sgl_kernel/__init__.py", "triton_kernels/__init__.py"} <= names
    assert all(r["why"] and r["size"] == len(KERNEL_MEMBERS[r["path"]]) for r in removed)
    assert slim.name == f"sglang_kernel-0.4.4-1slim{kept_ops}-cp310-abi3-manylinux2014_x86_64.whl"
    # RECORD lists exactly the kept files, with their real hashes; everything is stored uncompressed.
    zf = zipfile.ZipFile(slim)
    record = zf.read("sglang_kernel-0.4.4.dist-info/RECORD").decode().split()
    listed = {line.split(",")[0] for line in record}
    assert listed == names
    for line in record:
        name, digest, size = line.split(",")
        if digest:
            assert line == _record_line(name, zf.read(name))
    assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}


def test_slim_kernel_wheel_installs_with_pip(tmp_path, kernel_wheel):
    slim, _ = bundle_slim.slim_kernel_wheel(kernel_wheel, tmp_path / "out", 90)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--no-deps", "--target", str(target), str(slim)], check=True)
    assert (target / "sgl_kernel" / "sm90" / "common_ops.abi3.so").read_bytes() == KERNEL_MEMBERS["sgl_kernel/sm90/common_ops.abi3.so"]
    assert not (target / "sgl_kernel" / "flash_ops.abi3.so").exists()
    assert not (target / "sgl_kernel" / "sm100").exists()


def test_other_closure_wheels_keep_every_file(tmp_path, tiny_wheel):
    dest = tmp_path / "stored.whl"
    assert bundle_slim.repack(tiny_wheel, dest) == []
    src, out = zipfile.ZipFile(tiny_wheel), zipfile.ZipFile(dest)
    assert sorted(src.namelist()) == sorted(out.namelist())
    for name in src.namelist():
        assert src.read(name) == out.read(name)


# ---- requirements data ---------------------------------------------------------------------------------------------
def test_requirements_are_exact_and_agree_with_the_pinned_sglang():
    reqs = bundle.read_requirements()
    names = [canonical_name(n) for n, _, _ in reqs]
    assert len(names) == len(set(names)), "one version of each wheel: two stop the whole install"
    assert all(why for _, _, why in reqs)
    ours = {canonical_name(n): v for n, v, _ in reqs}
    meta = pristine_wheel("sglang").read("sglang-0.5.14.dist-info/METADATA").decode()
    pins = {}
    for line in meta.splitlines():
        if line.startswith("Requires-Dist:") and "==" in line and ";" not in line:
            name, version = line[len("Requires-Dist:"):].strip().split("==")
            pins[canonical_name(name.split("[")[0])] = version.strip()
    # Every sglang ==pin we carry is carried at that version, except tvm-ffi (the file says why).
    for name, version in ours.items():
        if name in pins and name != "apache-tvm-ffi":
            assert version == pins[name], f"{name}: sglang 0.5.14 pins {pins[name]}, bundle has {version}"
    assert {"transformers", "openai", "sglang-kernel"} <= set(ours) & set(pins)


def test_bad_requirement_line_is_one_line_error(tmp_path):
    path = tmp_path / "req.txt"
    path.write_text("fastapi>=0.1  # why\n")
    with pytest.raises(BundleError, match=r"req.txt:1: expected 'name==version  # why', found 'fastapi>=0.1  # why'"):
        bundle.read_requirements(path)


# ---- manifest and size ---------------------------------------------------------------------------------------------
def test_manifest_lists_every_file_and_member_with_size_sha_and_why(tmp_path, kernel_wheel, tiny_wheel):
    out, manifest = build_standin(tmp_path, kernel_wheel, tiny_wheel)
    assert json.loads((out / MANIFEST).read_text()) == manifest
    on_disk = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != MANIFEST)
    assert sorted(f["path"] for f in manifest["files"]) == on_disk == sorted(["artifacts/" + standin_artifact(tmp_path).name, PAYLOAD])
    for f in manifest["files"]:
        assert f["size"] == (out / f["path"]).stat().st_size and f["sha256"] == sha256_file(out / f["path"]) and f["why"]
    with tarfile.open(out / PAYLOAD, "r:xz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert sorted(members) == sorted(m["path"] for m in manifest["payload"])
    for m in manifest["payload"]:
        assert m["size"] == len(members[m["path"]]) and m["sha256"] == sha256_bytes(members[m["path"]])
        assert m["why"]
    paths = set(members)
    assert {"wheels/sglang_kernel-0.4.4-1slimsm90-cp310-abi3-manylinux2014_x86_64.whl",
            "wheels/tinydep-1.0-py3-none-any.whl", "stubs/IPython/__init__.py", "stubs/IPython/display.py",
            "stubs/soundfile.py", "stubs/datasets.py"} == paths
    kernel = next(m for m in manifest["payload"] if "sglang_kernel" in m["path"])
    assert kernel["source"] == {"file": kernel_wheel.name, "sha256": sha256_file(kernel_wheel)}
    assert [r["path"] for r in manifest["removed"]["sglang-kernel"]] == ["sgl_kernel/flash_ops.abi3.so",
                                                                         "sgl_kernel/sm100/common_ops.abi3.so"]
    assert manifest["target"]["gpu_compute_capability"] == 90 and manifest["target"]["torch"] == "2.11.0"


def test_size_limit_fails_naming_size_and_biggest_item(tmp_path, kernel_wheel, tiny_wheel):
    big = tmp_path / "big-1.0-py3-none-any.whl"
    big.write_bytes(bytes(range(256)) * 8192)             # 2 MiB
    with pytest.raises(BundleError) as err:
        build_standin(tmp_path, kernel_wheel, tiny_wheel, artifacts=[(big, "too big")], limit_mib=1)
    msg = str(err.value)
    assert "\n" not in msg
    assert "MiB, expected at most 1 MiB; biggest: artifacts/big-1.0-py3-none-any.whl 2.0 MiB" in msg
    assert not (tmp_path / "bundle").exists()
    assert not list(tmp_path.glob(".bundle-*")), "no half-built bundle is left behind"


def test_jit_cache_is_carried_as_its_module_files_only(tmp_path, kernel_wheel, tiny_wheel):
    cache = tmp_path / "cache"
    build_dir = cache / "sgl_kernel_jit_x_0123__arch_9.0__tvmffi_0.1.15.post2"
    build_dir.mkdir(parents=True)
    (build_dir / "sgl_kernel_jit_x_0123.so").write_bytes(b"\x7fELF jit")
    (build_dir / "cuda_0.o").write_bytes(b"object file")
    (build_dir / "build.ninja").write_text("rule")
    _, manifest = build_standin(tmp_path, kernel_wheel, tiny_wheel, jit_cache=[cache])
    jit = [m["path"] for m in manifest["payload"] if m["path"].startswith("jit-cache/")]
    assert jit == [f"jit-cache/{build_dir.name}/sgl_kernel_jit_x_0123.so"]
    with pytest.raises(BundleError, match="expected <build dir>/<module>.so files, found none"):
        bundle.jit_cache_members(tmp_path / "dl")
    with pytest.raises(BundleError, match="expected modules for compute capability 120, found only other archs"):
        build_standin(tmp_path, kernel_wheel, tiny_wheel, jit_cache=[cache], gpu_cc=120)
    # Several caches merge; a module of another arch is left out; the first cache wins for a module in both.
    other = tmp_path / "from-gpu-run"
    for name, data in [(build_dir.name, b"second copy"), ("sgl_kernel_jit_z_89__arch_9.0__tvmffi_0.1.15.post2", b"z"),
                       ("sgl_kernel_jit_w_77__arch_12.0__tvmffi_0.1.15.post2", b"w")]:
        (other / name).mkdir(parents=True)
        (other / name / (name.split("__")[0] + ".so")).write_bytes(data)
    members = bundle.jit_cache_members([cache, other], 90, log=lambda *_: None)
    assert [p.parent.name for p in members] == [build_dir.name, "sgl_kernel_jit_z_89__arch_9.0__tvmffi_0.1.15.post2"]
    assert members[0].read_bytes() == b"\x7fELF jit"


# ---- install -------------------------------------------------------------------------------------------------------
def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def site_with_content(tmp_path) -> Path:
    site = tmp_path / "site"
    (site / "common").mkdir(parents=True)
    (site / "common" / "keep.txt").write_text("an earlier install")
    return site


def test_install_refuses_a_tampered_artifact_and_writes_nothing(tmp_path, kernel_wheel, tiny_wheel, site_with_content):
    out, manifest = build_standin(tmp_path, kernel_wheel, tiny_wheel)
    artifact = out / manifest["files"][0]["path"]
    data = bytearray(artifact.read_bytes())
    data[10] ^= 1
    artifact.write_bytes(bytes(data))
    before = _snapshot(site_with_content)
    with pytest.raises(BundleError, match=rf"{artifact.name}: expected sha256 {manifest['files'][0]['sha256'][:16]} .*nothing installed"):
        bundle.install(out, site_with_content)
    assert _snapshot(site_with_content) == before


def test_install_refuses_a_tampered_payload_member(tmp_path, kernel_wheel, tiny_wheel, site_with_content):
    """A payload re-made with a changed wheel (and the manifest's payload line updated) still fails on the member."""
    out, manifest = build_standin(tmp_path, kernel_wheel, tiny_wheel)
    unpacked = tmp_path / "unpacked"
    with tarfile.open(out / PAYLOAD, "r:xz") as tar:
        tar.extractall(unpacked)
    (unpacked / "stubs" / "soundfile.py").write_text("import os; os.system('echo hi')\n")
    from serving.bundle_manifest import entry, write_manifest, write_payload
    write_payload(unpacked, out / PAYLOAD)
    manifest["files"] = [f if f["path"] != PAYLOAD else entry(out / PAYLOAD, PAYLOAD, f["why"]) for f in manifest["files"]]
    write_manifest(out, manifest)
    before = _snapshot(site_with_content)
    with pytest.raises(BundleError, match=r"payload.tar.xz:stubs/soundfile.py: expected sha256 .*nothing installed"):
        bundle.install(out, site_with_content)
    assert _snapshot(site_with_content) == before


def test_install_refuses_unlisted_files_and_other_pythons(tmp_path, kernel_wheel, tiny_wheel, site_with_content):
    out, manifest = build_standin(tmp_path, kernel_wheel, tiny_wheel)
    (out / "artifacts" / "extra.whl").write_bytes(b"x")
    with pytest.raises(BundleError, match=r"expected only the files its manifest lists, found also artifacts/extra.whl"):
        bundle.install(out, site_with_content)
    (out / "artifacts" / "extra.whl").unlink()
    manifest["target"]["python"] = "3.99"
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=rf"built for Python 3.99, found Python {HERE_PY}"):
        bundle.install(out, site_with_content)
    with pytest.raises(BundleError, match="expected a bundle made by 'make bundle'"):
        bundle.install(tmp_path / "dl", site_with_content)


def test_install_makes_pinned_and_patched_trees_from_the_bundle_alone(tmp_path, kernel_wheel, tiny_wheel, monkeypatch):
    """Real pinned wheels in the bundle; the patch set applied by apply.py with PATCHKIT_CACHE = the bundle."""
    lock = load_lock(REPO / "pin.lock")
    artifacts = [(pristine_wheel(name).wheel, f"pinned {name}") for name in lock.upstreams]
    cache = tmp_path / "cache"
    built = cache / "sgl_kernel_jit_x_0123__arch_12.0__tvmffi_0.1.15.post2"
    built.mkdir(parents=True)
    (built / "sgl_kernel_jit_x_0123.so").write_bytes(b"prebuilt")
    # whole wheels: xz over the split pinned wheels costs minutes here (the split path: the two tests below)
    out, manifest = build_standin(tmp_path, kernel_wheel, tiny_wheel, artifacts=artifacts, gpu_cc=120, jit_cache=[cache],
                                  whole_wheels=True)
    site = tmp_path / "site"
    mine = site / "jit-cache" / "sgl_kernel_jit_y_4567__arch_12.0__tvmffi_0.1.15.post2" / "sgl_kernel_jit_y_4567.so"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"built on the machine")
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "no-cache-here"))   # only the bundle may serve artifacts
    assert bundle.install(out, site) == 0

    engine = Engine.from_repo(REPO)
    assert engine.status(site / "trees" / "pinned").summary == PRISTINE
    assert engine.status(site / "trees" / "patched").summary == APPLIED
    assert (site / "common" / "tinydep" / "__init__.py").read_text() == "VALUE = 7\n"
    assert (site / "common" / "sgl_kernel" / "sm100" / "common_ops.abi3.so").exists()
    assert not (site / "common" / "sgl_kernel" / "flash_ops.abi3.so").exists()
    assert (site / "jit-cache" / built.name / "sgl_kernel_jit_x_0123.so").read_bytes() == b"prebuilt"
    assert mine.read_bytes() == b"built on the machine"
    assert bundle.jit_cache_dir(site) == (site / "jit-cache").resolve()
    assert sorted(p.name for p in (site / "artifacts").iterdir()) == sorted(p.name for p, _ in artifacts)

    path = bundle.tree_pythonpath(site, "patched")
    assert path == [str((site / p).resolve()) for p in ("trees/patched", "common", "stubs")]
    # find_spec: where the names resolve (importing sglang itself needs the GPU machine's packages)
    code = "import importlib.util as u, tinydep; print(u.find_spec('sglang').origin); print(u.find_spec('flashinfer').origin)"
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": ":".join(path)}, capture_output=True,
                          text=True, check=True)
    assert done.stdout.split() == [str((site / "trees/patched/sglang/__init__.py").resolve()),
                                   str((site / "trees/patched/flashinfer/__init__.py").resolve())]
    lines = bundle.env_lines(site, "pinned")
    assert lines[0].startswith(f"export PYTHONPATH={(site / 'trees/pinned').resolve()}:")
    assert lines[1] == f"export TVM_FFI_CACHE_DIR={(site / 'jit-cache').resolve()}"


def test_stubs_are_real_modules_with_a_spec(tmp_path):
    code = ("import importlib.util, importlib.metadata as md\n"
            "from IPython.display import HTML, display\n"
            "import soundfile\n"
            "from datasets import load_dataset\n"
            "assert importlib.util.find_spec('IPython') and importlib.util.find_spec('soundfile')\n"
            "assert soundfile.__spec__ is not None and not hasattr(soundfile, '__path__')\n"
            "try:\n    soundfile.read('x.wav')\nexcept ImportError as e:\n    print('raised', e)\n"
            "try:\n    load_dataset('x')\nexcept ImportError as e:\n    print('raised', e)\n"
            "try:\n    from datasets import Dataset\nexcept ImportError as e:\n    print('raised', e)\n"
            "for name in ('IPython', 'soundfile', 'datasets'):\n"
            "    try:\n        md.version(name); print('has metadata', name)\n"
            "    except md.PackageNotFoundError:\n        pass\n")
    done = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": str(bundle.STUBS)},
                          capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("raised soundfile.read: the offline bundle carries a stand-in")
    assert lines[1].startswith("raised datasets.load_dataset: the offline bundle carries a stand-in for datasets")
    assert lines[2].startswith("raised datasets.Dataset: the offline bundle carries a stand-in for datasets")
    assert "has metadata" not in done.stdout


def test_tree_pythonpath_refuses_unknown_tree_and_missing_install(tmp_path):
    with pytest.raises(BundleError, match="tree: expected one of pinned, patched, found 'main'"):
        bundle.tree_pythonpath(tmp_path, "main")
    with pytest.raises(BundleError, match="expected a bundle installed by 'python3 -m serving.bundle install'"):
        bundle.tree_pythonpath(tmp_path, "pinned")


def test_prebuild_jit_refuses_a_line_without_jit_modules_in_one_line_and_writes_nothing(tmp_path, capsys):
    """prebuild-jit compiles one line's sglang/jit_kernel modules; a line that has none (0.5.23 moved its kernels)
    is refused before anything is unpacked or compiled (it used to unpack the newest line and fail on import)."""
    from serving import bundle_jit

    out = tmp_path / "cache"
    rc = bundle.main(["prebuild-jit", "--line", "0.5.23", "--arch", "9.0", "--out", str(out)])
    err = capsys.readouterr().out.strip().splitlines()
    assert rc == 1 and not out.exists()
    assert len(err) == 1 and "expected a line with jit_kernel modules" in err[0] and "found line 0.5.23" in err[0]
    assert not (bundle_jit.WORK / "tree-0.5.23").exists()
    assert "0.5.14" in bundle_jit.JIT_MODULES


def _repo_with(tmp_path: Path, files: dict) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for name, size in files.items():
        (repo / name).write_bytes(b"x" * size)
    return repo


def test_the_carried_tree_is_tracked_and_untracked_files_but_not_ignored_ones(tmp_path):
    repo = _repo_with(tmp_path, {"tracked.py": 1000, "new.md": 300, "big.bin": 5000, ".gitignore": 8})
    (repo / ".gitignore").write_text("big.bin\n")
    subprocess.run(["git", "-C", str(repo), "add", "tracked.py"], check=True)
    assert bundle.carried_tree_bytes(repo) == 1000 + 300 + len("big.bin\n")


def test_recorded_raw_output_stays_out_of_the_copy_and_the_budget_while_its_records_stay(tmp_path):
    """bench/runs/: a run's raw output is in git, not in what is copied to the GPU machine nor counted against the
    budget; RUN.md, INDEX.md and the probe scripts kept beside it are (red before: the raw file counted and was
    carried, so recording a run pressed the budget)."""
    repo = _repo_with(tmp_path, {"tracked.py": 1000})
    run = repo / "bench" / "runs" / "2026-12-07-demo"
    run.mkdir(parents=True)
    for name, size in {"RUN.md": 200, "probe.py": 50, "raw.txt": 40_000, "rows.json": 9_000}.items():
        (run / name).write_bytes(b"r" * size)
    (repo / "bench" / "runs" / "INDEX.md").write_bytes(b"i" * 70)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    assert bundle.carried_tree_bytes(repo) == 1000 + 200 + 50 + 70
    out = tmp_path / "copy"
    assert bundle.main(["tree-copy", "--repo", str(repo), "--out", str(out)]) == 0
    assert sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file()) == [
        "bench/runs/2026-12-07-demo/RUN.md", "bench/runs/2026-12-07-demo/probe.py", "bench/runs/INDEX.md",
        "tracked.py"]
    assert (out / "tracked.py").read_bytes() == (repo / "tracked.py").read_bytes()
    listed = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True).stdout.split()
    assert "bench/runs/2026-12-07-demo/raw.txt" in listed          # the record stays in git
    again = bundle.main(["tree-copy", "--repo", str(repo), "--out", str(out)])
    assert again == 1                                             # an existing copy is not written over


def test_the_budget_check_fails_when_the_spare_is_short_with_a_bundle_and_with_the_bundle_limit(tmp_path, monkeypatch, capsys):
    repo = _repo_with(tmp_path, {"tracked.py": 300_000})
    packed = tmp_path / "bundle"
    packed.mkdir()
    (packed / "payload.tar.xz").write_bytes(b"y" * 600_000)
    monkeypatch.setattr(bundle, "BUDGET_MIB", 1)
    assert bundle.check_budget(packed, repo) == 0           # 0.9e6 bytes of 1 MiB: 0.14 MiB left
    (packed / "more.whl").write_bytes(b"z" * 200_000)     # 1.1e6 bytes: 0.05 MiB over the 1 MiB budget
    assert bundle.check_budget(packed, repo) == 1
    assert "over by 0.05 MiB" in capsys.readouterr().out
    # No bundle built (CI): the bundle counts at the most make bundle builds, its limit.
    assert bundle.check_budget(None, repo, limit_mib=0.5) == 0     # 0.3e6 bytes + 0.5 MiB: 0.21 MiB left
    assert bundle.check_budget(None, repo, limit_mib=0.8) == 1     # 0.09 MiB over
    assert "the largest bundle make bundle builds (0.8 MiB, its limit)" in capsys.readouterr().out
    with pytest.raises(BundleError, match="expected a built bundle at .*nope, found no files there"):
        bundle.check_budget(tmp_path / "nope", repo)


# ---- pinned wheels split into the payload (serving/bundle_rezip.py) ---------------------------------------------------
@pytest.fixture(scope="module")
def split_sglang(tmp_path_factory):
    """The real pinned sglang 0.5.14 wheel, split as make bundle splits it (no xz: the rebuild is what is tested)."""
    wheel = pristine_wheel("sglang", "0.5.14").wheel
    parts = tmp_path_factory.mktemp("split") / "artifacts"
    info = bundle_rezip.split(wheel, parts)
    assert info is not None, "this zlib reproduces every stream of the pinned wheel"
    return wheel, parts, info


def test_a_split_pinned_wheel_is_rebuilt_byte_for_byte_and_a_changed_byte_refused(tmp_path, split_sglang):
    wheel, parts, info = split_sglang
    assert info["sha256"] == sha256_file(wheel) and len(info["streams"]) > 1000
    assert (parts / f"{wheel.name}.members").stat().st_size > 3 * wheel.stat().st_size   # what xz then compresses
    manifest = {"files": [], "artifacts": [{"path": f"artifacts/{wheel.name}", "size": info["size"],
                                            "sha256": info["sha256"], "why": "pinned"}]}
    bundle.rebuild_artifacts(tmp_path / "bundle", parts.parent, manifest, tmp_path / "site" / "artifacts")
    assert (tmp_path / "site" / "artifacts" / wheel.name).read_bytes() == wheel.read_bytes()
    # A machine whose zlib deflates a member differently (here: one member's bytes changed) is refused in one line.
    changed = tmp_path / "changed" / "artifacts"
    changed.mkdir(parents=True)
    for suffix in bundle_rezip.SUFFIXES:
        (changed / f"{wheel.name}{suffix}").write_bytes((parts / f"{wheel.name}{suffix}").read_bytes())
    members = bytearray((changed / f"{wheel.name}.members").read_bytes())
    members[100] ^= 0x20
    (changed / f"{wheel.name}.members").write_bytes(bytes(members))
    with pytest.raises(BundleError) as err:
        bundle.rebuild_artifacts(tmp_path / "bundle", changed.parent, manifest, tmp_path / "site2" / "artifacts")
    assert "\n" not in str(err.value) and str(err.value).startswith(wheel.name)
    assert "--whole-wheels" in str(err.value) and str(err.value).endswith("nothing installed")
    assert not (tmp_path / "site2" / "artifacts" / wheel.name).exists()


def one_member_zip(path: Path, name: str, data: bytes, stream: bytes) -> Path:
    """A zip of one deflated member whose compressed bytes are `stream` (written by hand: zipfile picks its own)."""
    import struct
    import zlib
    crc, fname = zlib.crc32(data), name.encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(stream), len(data), len(fname), 0) + fname
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, len(stream), len(data),
                          len(fname), 0, 0, 0, 0, 0, 0) + fname
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(stream), 0)
    path.write_bytes(local + stream + central + end)
    assert zipfile.ZipFile(path).read(name) == data
    return path


def test_assemble_splits_a_deflated_wheel_into_the_payload_and_keeps_one_it_cannot_reproduce(tmp_path, kernel_wheel,
                                                                                            tiny_wheel):
    """A wheel deflated as zipfile and pip deflate travels split; one deflated otherwise (zlib's filtered strategy
    here, which no level of the default strategy reproduces) travels whole, as before."""
    import zlib
    data = bytes(range(256)) * 64 + b"VALUE = 7\n" * 500
    c = zlib.compressobj(6, zlib.DEFLATED, -15, 8, zlib.Z_HUFFMAN_ONLY)
    odd = one_member_zip(tmp_path / "odd-1.0-py3-none-any.whl", "odd/__init__.py", data, c.compress(data) + c.flush())
    assert bundle_rezip.split(odd, tmp_path / "probe") is None and not (tmp_path / "probe").exists()
    out, manifest = build_standin(tmp_path, kernel_wheel, tiny_wheel,
                                  artifacts=[(tiny_wheel, "pinned, deflated as pip does"), (odd, "pinned, odd")])
    assert [a["path"] for a in manifest["artifacts"]] == [f"artifacts/{tiny_wheel.name}"]
    assert manifest["artifacts"][0]["sha256"] == sha256_file(tiny_wheel)
    assert {m["path"] for m in manifest["payload"] if m["path"].startswith("artifacts/")} == \
        {f"artifacts/{tiny_wheel.name}{s}" for s in bundle_rezip.SUFFIXES}
    assert [f["path"] for f in manifest["files"] if f["path"].startswith("artifacts/")] == [f"artifacts/{odd.name}"]
    # --whole-wheels: every pinned wheel is a file of the bundle, nothing split
    _, manifest = build_standin(tmp_path, kernel_wheel, tiny_wheel, artifacts=[(tiny_wheel, "pinned")], whole_wheels=True)
    assert manifest["artifacts"] == [] and [f["path"] for f in manifest["files"]][0] == f"artifacts/{tiny_wheel.name}"


def test_slim_transformers_drops_model_code_the_server_never_imports_and_keeps_the_rest(tmp_path):
    members = {"transformers/__init__.py": b"", "transformers/modeling_utils.py": b"",
               "transformers/models/llama/modeling_llama.py": b"kept: imported on the server path",
               "transformers/models/llama/configuration_llama.py": b"", "transformers/models/auto/modeling_auto.py": b"",
               "transformers/models/bert/modeling_bert.py": b"not imported", "transformers/models/bert/modular_bert.py": b"",
               "transformers/models/bert/convert_bert_checkpoint.py": b"", "transformers/models/bert/configuration_bert.py": b"",
               "transformers/models/bert/tokenization_bert.py": b"", "transformers/models/bert/__init__.py": b""}
    (tmp_path / "dl").mkdir()
    wheel = make_wheel(tmp_path / "dl", "transformers", "5.8.1", "py3-none-any", members)
    slim, removed = bundle_slim.slim_transformers_wheel(wheel, tmp_path / "out")
    assert slim.name == "transformers-5.8.1-1slimdsv4-py3-none-any.whl"
    assert sorted(r["path"] for r in removed) == ["transformers/models/bert/convert_bert_checkpoint.py",
                                                  "transformers/models/bert/modeling_bert.py",
                                                  "transformers/models/bert/modular_bert.py"]
    names = set(zipfile.ZipFile(slim).namelist())
    assert set(members) - {r["path"] for r in removed} <= names and all(r["why"] for r in removed)


def test_the_bundle_is_built_for_the_line_whose_runtime_is_the_closures(tmp_path, capsys, monkeypatch):
    """The closure is one runtime's (its '# runtime:' line): without LINE the bundle takes the line pinned to that
    runtime, not the newest; a line of another runtime is refused before any download, naming the one that fits."""
    torch_v, triton_v = bundle.closure_runtime()
    fits = [n for n in ("0.5.14", "0.5.23") if load_lock(bundle.REPO / "pin.lock", n).runtime.get("torch") == torch_v
            and load_lock(bundle.REPO / "pin.lock", n).runtime.get("triton") == triton_v]
    assert fits == ["0.5.14"] and bundle.bundle_engine(None).lock.line == "0.5.14"
    assert bundle.bundle_engine("0.5.14").lock.line == "0.5.14"
    out = tmp_path / "bundle"
    monkeypatch.setattr(bundle, "pip_download", lambda *a, **k: pytest.fail("downloaded for a refused line"))
    monkeypatch.setattr(bundle, "pinned_artifacts", lambda *a, **k: pytest.fail("fetched for a refused line"))
    rc = bundle.main(["build", "--line", "0.5.23", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and not out.exists()
    assert err.startswith("error: line 0.5.23: expected a line whose runtime is the closure's") and "\n" not in err
    assert err.endswith("line 0.5.14 has it (make bundle LINE=0.5.14)")
