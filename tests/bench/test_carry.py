"""bench/airgapped/carry.py and bench/airgapped/carry_triton.py on the CPU: a payload installs only when every byte is as its
manifest says (else one line, nothing written), and the Triton packer's drop rules name files the real
release ships (its RECORD), so a release that moves a file fails the build instead of carrying it."""
from __future__ import annotations

import csv
import fnmatch
import json
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


def fake_wheel(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for n in names:
            zf.writestr(n, f"bytes of {n}")
    return path


def test_the_triton_packer_drops_by_rule_and_records_why(tmp_path, monkeypatch):
    monkeypatch.setattr(carry_triton, "STRIPPED", [])
    monkeypatch.setattr(carry_triton, "DROPPED", [("triton/_C/libproton.so", "profiler")])
    wheel = fake_wheel(tmp_path / "t.whl", ["triton/__init__.py", "triton/_C/libproton.so"])
    record = {"dropped": [], "stripped": []}
    kept = [name for name, _, _ in carry_triton.wheel_entries(wheel, record)]
    assert kept == ["triton/__init__.py"]
    assert record["dropped"] == [{"path": "triton/_C/libproton.so", "size": len("bytes of triton/_C/libproton.so"),
                                  "why": "profiler"}]


def test_a_drop_rule_that_matches_nothing_fails_the_build(tmp_path, monkeypatch):
    monkeypatch.setattr(carry_triton, "STRIPPED", [])
    monkeypatch.setattr(carry_triton, "DROPPED", [("triton/plugins/*", "examples")])
    wheel = fake_wheel(tmp_path / "t.whl", ["triton/__init__.py"])
    with pytest.raises(carry.CarryError, match=r"found none for triton/plugins/\*"):
        list(carry_triton.wheel_entries(wheel, {"dropped": [], "stripped": []}))


def triton38_record() -> list[str]:
    found = sorted((REPO / ".venv-triton38").glob("lib/python3*/site-packages/triton-3.8.0.dist-info/RECORD"))
    if not found:
        pytest.skip("no .venv-triton38 (make test builds it): the real triton 3.8.0 file list")
    with open(found[0], newline="") as f:
        return [r[0] for r in csv.reader(f) if r]


def test_every_drop_and_strip_rule_names_files_triton_3_8_ships():
    """The real 3.8.0 RECORD (its cp311 wheel: the same file list as the cp312 one the box gets)."""
    names = triton38_record()
    for pattern, why in carry_triton.DROPPED:
        assert any(fnmatch.fnmatchcase(n, pattern) for n in names), (pattern, why)
    assert all(p in names for p in carry_triton.STRIPPED)
    kept = [n for n in names if not carry_triton.dropped_by(n)]
    # what a kernel launch on sm_90 needs is kept: the compiler library, ptxas for sm_90, libdevice, the driver stub
    for need in ("triton/_C/libtriton.so", "triton/backends/nvidia/bin/ptxas", "triton/backends/nvidia/driver.c",
                 "triton/backends/nvidia/lib/libdevice.10.bc", "triton/experimental/gluon/__init__.py"):
        assert need in kept, need
