"""Every kernel bench resolves the files it reads on every release line of pin.lock: the line's path of each
(harness/line_files.py), present in the line's overlay or pinned wheel, or "not on this line" with the reason the
line's retired.toml gives. Imports every bench/kernels/bench_*.py (red before: bench_mma_decode.load_upstream
raised KeyError 'There is no item named sglang/srt/layers/attention/flash_mla_sm120_triton.py' on 0.5.23, and the
benches read 0.5.14's overlay paths whatever the line)."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from harness.line_files import KINDS, NotOnLine, line_file, line_tables
from patchkit.engine import Engine
from patchkit.lockfile import load_lock, lock_lines
from patchkit.pr.retired import load_records
from tests.conftest import REPO

BENCHES = sorted(p.stem for p in (REPO / "bench" / "kernels").glob("bench_*.py"))
LINES = lock_lines(REPO / "pin.lock")


def _present(engine: Engine, name: str) -> None:
    """The resolved file is where the line keeps it: the checkout's overlay/LINE/, or the line's pinned wheel."""
    f = line_file(engine, name)
    if f.kind == "overlay":
        assert f.overlay().is_file(), f"{name} on {engine.lock.line}: expected {f.overlay()}, found no file"
    else:
        assert engine.pristine("sglang").read(f.path), f"{name} on {engine.lock.line}: {f.path} is empty"


def _retired_reasons(line: str) -> list[str]:
    """What each of the line's retired.toml records says: its reason, or the upstream definitions that replaced it."""
    return [r.reason if r.status == "retired" else ", ".join(b.text() for b in r.by)
            for up in load_lock(REPO / "pin.lock", line).upstreams
            for r in load_records(REPO / "patches", up) if r.line == line]


@pytest.mark.parametrize("line", LINES)
def test_the_p1_bench_loads_the_pinned_per_head_kernel_of_every_line(line):
    from bench.kernels import bench_mma_decode

    upstream = bench_mma_decode.load_upstream(load_lock(REPO / "pin.lock", line))
    assert callable(upstream.flash_mla_sparse_decode_triton)
    # The extracted file lies in the checkout's build/, read again by the next run: no folder left in the system's
    # temporary directory per call.
    assert Path(upstream.__file__).is_relative_to(REPO / "build" / "upstream" / line), upstream.__file__


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("bench", BENCHES)
def test_every_kernel_bench_resolves_its_files_on_every_line(bench, line):
    module = importlib.import_module(f"bench.kernels.{bench}")
    engine = Engine.from_repo(REPO, line=line)
    assert module.LINE_FILES, f"{bench}: expected LINE_FILES to name the files it reads, found none"
    for name in module.LINE_FILES:
        try:
            _present(engine, name)
        except NotOnLine as exc:
            assert f"not on line {line}: retired" in str(exc), exc
            assert any(reason in str(exc) for reason in _retired_reasons(line)), exc


def test_every_line_names_every_file_once_and_each_entry_resolves():
    """The data is symmetric: a file named for one line is named for every line, overlay, upstream or retired."""
    tables = {line: line_tables(line) for line in LINES}
    names = {n for t in tables.values() for kind in KINDS for n in t[kind]}
    for line, t in tables.items():
        counts = {n: sum(n in t[kind] for kind in KINDS) for n in names}
        assert {n: c for n, c in counts.items() if c != 1} == {}, f"line {line}: each file once, in one table"
        engine = Engine.from_repo(REPO, line=line)
        for name in t["overlay"] | t["upstream"]:
            _present(engine, name)
        for name in t["retired"]:
            with pytest.raises(NotOnLine, match=f"not on line {line}: retired"):
                line_file(engine, name)


def test_a_retired_file_says_why_in_the_words_of_the_lines_retired_toml():
    lock = load_lock(REPO / "pin.lock", "0.5.23") if "0.5.23" in LINES else pytest.skip("no 0.5.23 line")
    with pytest.raises(NotOnLine) as exc:
        line_file(lock, "mhc_pre_triton.py")
    assert str(exc.value).startswith("mhc_pre_triton.py: not on line 0.5.23: retired (P3): on a base that fuses "
                                     "each MHC post with the next pre"), exc.value


@pytest.mark.parametrize("bench", ["bench_mhc_pre", "bench_indexer"])
def test_a_bench_whose_patch_the_line_retired_says_why_and_exits_3(bench, monkeypatch, capsys):
    """`make bench LINE=...` goes on past such a bench (exit 3); nothing is built or timed before."""
    if "0.5.23" not in LINES:
        pytest.skip("no 0.5.23 line")
    module = importlib.import_module(f"bench.kernels.{bench}")
    monkeypatch.setattr("sys.argv", [bench, "--line", "0.5.23"])
    with pytest.raises(SystemExit) as exc:
        module.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 3 and len(err) == 1 and err[0].startswith(f"{bench}: ") \
        and "not on line 0.5.23: retired (P" in err[0], err


@pytest.mark.parametrize("bench", BENCHES)
def test_a_line_pin_lock_lacks_is_one_line_and_exit_2_before_anything_is_made(bench, monkeypatch, capsys, tmp_path):
    module = importlib.import_module(f"bench.kernels.{bench}")
    monkeypatch.setattr("sys.argv", [bench, "--line", "0.4.0", *(["--out", str(tmp_path / "o")]
                                                                  if bench in ("bench_mma_decode", "bench_unpadded_heads") else [])])
    with pytest.raises(SystemExit) as exc:
        module.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "expected a release line of" in err[0] \
        and "found --line '0.4.0'" in err[0], err
    assert not (tmp_path / "o").exists()
