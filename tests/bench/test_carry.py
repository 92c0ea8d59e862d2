"""bench/airgapped/carry.py and bench/airgapped/carry_triton.py on the CPU: a payload installs only when every byte is as its
manifest says (else one line, nothing written), and the Triton packer's drop rules name files the real
release ships (its RECORD), so a release that moves a file fails the build instead of carrying it."""
from __future__ import annotations

import csv
import fnmatch
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bench.airgapped import carry, carry_triton

REPO = Path(__file__).resolve().parents[2]


def snapshot(root: Path) -> list:
    return sorted((str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*") if p.is_file())


@pytest.fixture()
def packed(tmp_path) -> Path:
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "a.so").write_bytes(b"\x7fELF" + bytes(range(256)) * 64)
    (src / "SOURCES.json").write_text('{"flashinfer": "0.7.4"}')
    (src / "left-out.txt").write_text("not kept")
    out = tmp_path / "carry"
    carry.pack(carry.dir_entries(src, ["lib", "SOURCES.json"]), out, {"source": "src"})
    return out


def test_pack_then_install_gives_back_the_kept_files_byte_for_byte(packed, tmp_path):
    into = tmp_path / "there" / "peer"
    manifest = carry.install(packed, into)
    assert sorted(m["path"] for m in manifest["members"]) == ["SOURCES.json", "lib/a.so"]
    assert (into / "lib" / "a.so").read_bytes() == b"\x7fELF" + bytes(range(256)) * 64
    assert not (into / "left-out.txt").exists()


def test_packing_is_deterministic(packed, tmp_path):
    again = tmp_path / "again"
    carry.pack(carry.dir_entries(tmp_path / "src", ["SOURCES.json", "lib"]), again, {"source": "src"})
    assert (again / carry.PAYLOAD).read_bytes() == (packed / carry.PAYLOAD).read_bytes()


def test_a_changed_payload_is_refused_and_nothing_is_written(packed, tmp_path):
    into = tmp_path / "there" / "peer"
    into.mkdir(parents=True)
    (into / "mine.txt").write_text("a user's file")
    data = bytearray((packed / carry.PAYLOAD).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (packed / carry.PAYLOAD).write_bytes(bytes(data))
    before = snapshot(tmp_path / "there")
    with pytest.raises(carry.CarryError, match=r"payload.tar.xz: expected sha256 [0-9a-f]{16}, found [0-9a-f]{16}; nothing written"):
        carry.install(packed, into)
    assert snapshot(tmp_path / "there") == before
    assert sorted(p.name for p in (tmp_path / "there").iterdir()) == ["peer"]   # no half-made folder beside it


def test_a_member_that_does_not_hash_as_listed_is_refused(packed, tmp_path):
    manifest = json.loads((packed / carry.MANIFEST).read_text())
    manifest["members"][0]["sha256"] = "0" * 64
    (packed / carry.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(carry.CarryError, match="expected sha256 0000000000000000, found"):
        carry.install(packed, tmp_path / "into")
    assert not (tmp_path / "into").exists()


def test_cli_says_one_line_for_a_folder_no_packer_made(tmp_path, capsys):
    assert carry.main(["install", str(tmp_path), "--into", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: expected ") and "manifest.json as a packer writes it" in err and "\n" not in err


# The least a release must say for the packer to read it: its tools, its ptxas rule, its launcher's files.
MINIMAL_RELEASE = {
    "triton/knobs.py": 'class nvidia_knobs:\n    ptxas: env_nvidia_tool = env_nvidia_tool("ptxas")\n',
    "triton/backends/nvidia/compiler.py": "def get_ptxas(arch: int):\n    return knobs.nvidia.ptxas\n",
    "triton/backends/nvidia/driver.py": 'include_dirs = [os.path.join(dirname, "include")]\n'
                                        'compile_module_from_file(src_path=os.path.join(dirname, "driver.c"), '
                                        'include_dirs=include_dirs)\n',
    "triton/backends/nvidia/bin/ptxas": "ptxas",
}


def fake_wheel(path: Path, names: list[str]) -> Path:
    """A wheel of triton 3.8.0 holding NAMES (stand-in bytes) beside MINIMAL_RELEASE."""
    path = path.with_name("triton-3.8.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    with zipfile.ZipFile(path, "w") as zf:
        for n in names:
            zf.writestr(n, f"bytes of {n}")
        for n, text in MINIMAL_RELEASE.items():
            zf.writestr(n, text)
    return path


def test_the_triton_packer_drops_by_rule_and_records_why(tmp_path, monkeypatch):
    monkeypatch.setattr(carry_triton, "STRIPPED", [])
    monkeypatch.setattr(carry_triton, "DROPPED", [("triton/_C/libproton.so", "profiler")])
    wheel = fake_wheel(tmp_path / "t.whl", ["triton/__init__.py", "triton/_C/libproton.so"])
    record = {"dropped": [], "stripped": []}
    kept = [name for name, _, _ in carry_triton.wheel_entries(wheel, record)]
    assert [k for k in kept if k not in MINIMAL_RELEASE] == ["triton/__init__.py"]
    assert record["dropped"] == [{"path": "triton/_C/libproton.so", "size": len("bytes of triton/_C/libproton.so"),
                                  "why": "profiler"}]


def test_a_drop_rule_that_matches_nothing_fails_the_build(tmp_path, monkeypatch):
    monkeypatch.setattr(carry_triton, "STRIPPED", [])
    monkeypatch.setattr(carry_triton, "DROPPED", [("triton/plugins/*", "examples")])
    wheel = fake_wheel(tmp_path / "t.whl", ["triton/__init__.py"])
    with pytest.raises(carry.CarryError, match=r"found none for triton/plugins/\*"):
        list(carry_triton.wheel_entries(wheel, {"dropped": [], "stripped": []}))


def release_site(release: str) -> Path:
    """The site-packages of `.venv-tritonXY` (make test builds it): the real release's files."""
    found = sorted((REPO / f".venv-triton{release.replace('.', '')}").glob(
        f"lib/python3*/site-packages/triton-{release}.0.dist-info/RECORD"))
    if not found:
        pytest.skip(f"no .venv-triton{release.replace('.', '')} (make test builds it): the real triton {release}.0 files")
    return found[0].parents[1]


def release_record(release: str) -> list[str]:
    site = release_site(release)
    with open(site / f"triton-{release}.0.dist-info" / "RECORD", newline="") as f:
        return [r[0] for r in csv.reader(f) if r]


def triton38_record() -> list[str]:
    return release_record("3.8")


# The wheel file names each release ships for CPython 3.12 on x86_64 Linux (3.9 moved to the stable ABI).
WHEEL_NAMES = {"3.8": "triton-3.8.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
               "3.9": "triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"}


def release_wheel(release: str, dest: Path, edit=None) -> Path:
    """A wheel of the real release's file list (its RECORD) with its real Python sources and stand-in bytes for
    everything else (the packer reads the sources: compiler.py, knobs.py, driver.py). `edit(name, text)` may
    change a source."""
    site = release_site(release)
    wheel = dest / WHEEL_NAMES[release]
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in release_record(release):
            if name.startswith("triton/") and name.endswith(".py"):
                text = (site / name).read_text()
                zf.writestr(name, edit(name, text) if edit else text)
            elif name.startswith("triton/") and "__pycache__" not in name:
                zf.writestr(name, f"bytes of {name}")
    return wheel


def kept_and_record(wheel: Path, monkeypatch, **kw) -> tuple[list[str], dict]:
    monkeypatch.setattr(carry_triton, "strip_bytes", lambda data, name: data)   # stand-in bytes are no ELF file
    record = {"dropped": [], "stripped": []}
    return [name for name, _, _ in carry_triton.wheel_entries(wheel, record, **kw)], record


PTXAS = "triton/backends/nvidia/bin/ptxas"
BLACKWELL = "triton/backends/nvidia/bin/ptxas-blackwell"


@pytest.mark.parametrize("release", ["3.8", "3.9"])
def test_every_drop_and_strip_rule_names_files_the_release_ships(release):
    """The real RECORD of each release (its cp311 wheel: the same file list as the cp312 one the machine gets);
    a rule applies from the release that first ships its file."""
    names = release_record(release)
    for rule in carry_triton.DROPPED:
        if carry_triton.release_key(release) >= carry_triton.release_key(rule.since):
            assert any(fnmatch.fnmatchcase(n, rule.pattern) for n in names), rule
    assert all(p in names for p in carry_triton.STRIPPED)
    kept = [n for n in names if not carry_triton.dropped_by(n, release)]
    # what a kernel launch needs is kept: the compiler library, libdevice, the launcher's source, Gluon
    for need in ("triton/_C/libtriton.so", "triton/backends/nvidia/driver.c",
                 "triton/backends/nvidia/lib/libdevice.10.bc", "triton/experimental/gluon/__init__.py"):
        assert need in kept, need


@pytest.mark.parametrize("release, for_sm90, for_sm120, left_out", [
    ("3.8", PTXAS, BLACKWELL, None),        # get_ptxas: ptxas-blackwell from sm_100 on
    ("3.9", BLACKWELL, BLACKWELL, PTXAS),   # get_ptxas: ptxas-blackwell from sm_90 on
])
def test_the_ptxas_the_releases_own_get_ptxas_picks_for_sm_90_and_sm_120_is_kept(
        release, for_sm90, for_sm120, left_out, tmp_path, monkeypatch):
    kept, record = kept_and_record(release_wheel(release, tmp_path), monkeypatch)
    assert for_sm90 in kept and for_sm120 in kept
    assert record["ptxas"] == {"sm_90": for_sm90, "sm_120": for_sm120}
    if left_out:
        assert left_out not in kept
        (why,) = [d["why"] for d in record["dropped"] if d["path"] == left_out]
        assert "sm_89 only" in why and "ptxas-blackwell" in why


def test_a_release_that_moves_its_ptxas_rule_is_followed(tmp_path, monkeypatch):
    """Not 3.9's rule written down here: a release whose get_ptxas picks the legacy ptxas up to sm_119 keeps it
    for sm_90."""
    def edit(name, text):
        if name == carry_triton.COMPILER:
            return text.replace("if arch < 90:", "if arch < 120:")
        return text
    kept, record = kept_and_record(release_wheel("3.9", tmp_path, edit), monkeypatch)
    assert record["ptxas"] == {"sm_90": PTXAS, "sm_120": BLACKWELL} and PTXAS in kept and BLACKWELL in kept


def test_a_release_without_get_ptxas_is_refused_naming_the_file(tmp_path, monkeypatch):
    def edit(name, text):
        return text.replace("def get_ptxas(", "def renamed_get_ptxas(") if name == carry_triton.COMPILER else text
    with pytest.raises(carry.CarryError, match=r"triton/backends/nvidia/compiler.py to define get_ptxas\(arch\)"):
        kept_and_record(release_wheel("3.9", tmp_path, edit), monkeypatch)


def test_a_rule_that_would_drop_what_the_launcher_includes_fails_the_build(tmp_path, monkeypatch):
    """driver.py compiles its launcher from driver.c with include/ (cuda.h): a rule reaching in there fails the
    build, naming the file and why it is needed."""
    monkeypatch.setattr(carry_triton, "DROPPED", carry_triton.DROPPED + [
        ("triton/backends/nvidia/include/cuda.h", "a header nobody needs")])
    with pytest.raises(carry.CarryError, match=r"dropping triton/backends/nvidia/include/cuda.h "
                                               r"\(triton/backends/nvidia/driver.py builds its launcher from "
                                               r"triton/backends/nvidia/include\)"):
        kept_and_record(release_wheel("3.9", tmp_path), monkeypatch)


def test_the_launcher_files_are_read_from_the_release(tmp_path, monkeypatch):
    kept, record = kept_and_record(release_wheel("3.9", tmp_path), monkeypatch)
    assert record["launcher"] == ["triton/backends/nvidia/driver.c", "triton/backends/nvidia/include"]
    headers = [n for n in release_record("3.9") if n.startswith("triton/backends/nvidia/include/")]
    assert headers and set(headers) <= set(kept)


def fake_pip(monkeypatch, saves: list[str], rc: int = 0, stderr: str = ""):
    """subprocess.run standing in for `pip download -d DEST`: saves SAVES into DEST, exits RC with STDERR."""
    def run(cmd, **kw):
        assert cmd[1:4] == ["-m", "pip", "download"]
        dest = Path(cmd[cmd.index("-d") + 1])
        for name in saves:
            (dest / name).write_bytes(b"wheel")
        return subprocess.CompletedProcess(cmd, rc, "", stderr)
    monkeypatch.setattr(carry_triton.subprocess, "run", run)


INDEX_WARNING = "WARNING: Location 'file:///somewhere/simple/triton/' is ignored: it is neither a file nor a directory."


def test_the_stable_abi_wheel_pip_downloads_for_3_9_is_taken(tmp_path, monkeypatch):
    fake_pip(monkeypatch, [WHEEL_NAMES["3.9"]], stderr=INDEX_WARNING)
    assert carry_triton.download_wheel("3.9.0", "3.12", tmp_path).name == WHEEL_NAMES["3.9"]


def test_the_best_tag_wins_and_another_pythons_wheel_is_never_taken(tmp_path):
    names = ["triton-3.9.0-cp313-cp313-manylinux_2_28_x86_64.whl", "triton-3.9.0-cp311-abi3-manylinux_2_28_x86_64.whl",
             "triton-3.9.0-cp312-cp312-manylinux_2_28_x86_64.whl", "triton-3.9.0-cp312-abi3-manylinux_2_28_x86_64.whl"]
    paths = [tmp_path / n for n in names]
    assert carry_triton.pick_wheel(paths, "3.9.0", "3.12").name == names[2]       # cp312-cp312 before abi3
    assert carry_triton.pick_wheel(paths[:2], "3.9.0", "3.12").name == names[1]   # cp311-abi3 runs on 3.12
    assert carry_triton.pick_wheel(paths[:1], "3.9.0", "3.12") is None
    assert carry_triton.pick_wheel(paths, "3.8.0", "3.12") is None


def test_a_wheel_for_another_python_is_refused_naming_what_pip_brought(tmp_path, monkeypatch):
    other = "triton-3.9.0-cp313-cp313-manylinux_2_28_x86_64.whl"
    fake_pip(monkeypatch, [other], stderr=INDEX_WARNING)
    with pytest.raises(carry.CarryError) as err:
        carry_triton.download_wheel("3.9.0", "3.12", tmp_path)
    msg = str(err.value)
    assert "CPython 3.12" in msg and other in msg and "WARNING" not in msg, msg


def test_a_pip_failure_names_pips_error_not_its_last_line(tmp_path, monkeypatch):
    stderr = ("ERROR: Could not find a version that satisfies the requirement triton==9.9.9 (from versions: 3.8.0, 3.9.0)\n"
              "ERROR: No matching distribution found for triton==9.9.9\n" + INDEX_WARNING)
    fake_pip(monkeypatch, [], rc=1, stderr=stderr)
    with pytest.raises(carry.CarryError) as err:
        carry_triton.download_wheel("9.9.9", "3.12", tmp_path)
    msg = str(err.value)
    assert "No matching distribution found for triton==9.9.9" in msg and "WARNING" not in msg, msg
    assert "\n" not in msg


def test_cli_refuses_archs_that_are_not_numbers(capsys):
    assert carry_triton.main(["build", "--version", "3.9.0", "--archs", "hopper"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: expected --archs as compute capabilities such as 90,120, found 'hopper'"


def test_the_manifest_says_which_ptxas_each_arch_uses_and_what_the_launcher_needs(tmp_path, monkeypatch):
    wheel = release_wheel("3.9", tmp_path)
    monkeypatch.setattr(carry_triton, "download_wheel", lambda version, python, dest: wheel)
    monkeypatch.setattr(carry_triton, "strip_bytes", lambda data, name: data)
    carry_triton.build("3.9.0", "3.12", tmp_path / "out", tmp_path, log=lambda line: None)
    manifest = json.loads((tmp_path / "out" / carry.MANIFEST).read_text())
    assert manifest["archs"] == [90, 120] and manifest["wheel"] == WHEEL_NAMES["3.9"]
    assert manifest["ptxas"] == {"sm_90": BLACKWELL, "sm_120": BLACKWELL}
    assert manifest["launcher"] == ["triton/backends/nvidia/driver.c", "triton/backends/nvidia/include"]
    assert BLACKWELL in {m["path"] for m in manifest["members"]}


def test_carry_triton_writes_into_the_checkouts_build_folder():
    """`make carry-triton` packs into the checkout's build/ (ignored, what docs/gpu_box.md copies from), not into a
    build/ beside the module (bench/build/, which git does not ignore): the module moved to bench/airgapped/ and a
    REPO of its own, one folder too shallow, sent the payload and its downloads there."""
    assert carry_triton.REPO == REPO, f"expected the checkout {REPO}, found {carry_triton.REPO}"
