"""The DeepGEMM sm_120 AOT record (bench/kernels/deepgemm_sm120_aot.py, bench/runs/2026-12-07-deepgemm-sm120-aot-v41-rows)
stays what the script makes: every instantiation it covers (DeepSeek-V4.1-Flash's 64 index heads at next_n 1 with
1-D and 2-D lengths, the 2-row atom, the verify rows of DSPARK block 5 and 6) is recorded as the script writes it,
and, where nvcc and the pinned sgl-deep-gemm wheel are here, the next_n 7 one compiles again to the recorded
registers and spills (skipped, with the reason, where either is missing)."""
from __future__ import annotations

import re
import shutil

import pytest

from bench.kernels import deepgemm_sm120_aot as aot
from serving import REPO

RUN = REPO / "bench/runs/2026-12-07-deepgemm-sm120-aot-v41-rows"


def _name(next_n, ctx2d):
    return f"{aot.KERNEL}_n{next_n}_{'2d' if ctx2d == 'true' else '1d'}"


def _ptxas(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if "registers" in ln or "spill" in ln]


def test_the_record_covers_v41_rows_and_each_source_is_the_script_s():
    assert {(1, "true"), (6, "true"), (7, "true")} <= set(aot.SHAPES)
    summary = (RUN / "summary.txt").read_text()
    for next_n, ctx2d in [(1, "false"), (1, "true"), (6, "true"), (7, "true")]:
        name = _name(next_n, ctx2d)
        assert (RUN / f"{name}.cu").read_text() == aot.source(next_n, ctx2d), name
        assert f"{name}: rc 0" in summary, name
        assert "0 bytes spill stores, 0 bytes spill loads" in (RUN / f"{name}.log").read_text(), name


def test_next_n_7_compiles_again_to_the_recorded_registers(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on PATH")
    from harness.deep_gemm_wheel import wheel
    from patchkit import PatchkitError
    try:
        path = wheel()
    except PatchkitError as e:
        pytest.skip(f"the pinned sgl-deep-gemm wheel is not reachable: {e}")
    assert aot.main(["--wheel", str(path), "--next-n", "7", str(tmp_path)]) == 0
    name = _name(7, "true")
    assert _ptxas((tmp_path / f"{name}.log").read_text()) == _ptxas((RUN / f"{name}.log").read_text())
    assert re.search(r"Used \d+ registers", (tmp_path / f"{name}.log").read_text())
