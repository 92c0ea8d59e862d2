"""The DeepGEMM sm_120 AOT records (bench/kernels/deepgemm_sm120_aot.py; bench/runs/2026-12-07-deepgemm-sm120-aot-heads32,
the current one, at DeepSeek-V4.1-Flash's published 32 index heads; 2026-12-05-deepgemm-sm120-aot and
2026-12-07-deepgemm-sm120-aot-v41-rows, the earlier ones at 64 heads) stay what the script makes: every instantiation
each covers (next_n 1 with 1-D and 2-D lengths, the 2-row atom, the verify rows of DSPARK block 5 and 6) is recorded
as the script writes it at that record's head count, the script's default is the published config's count, and,
where nvcc and the pinned sgl-deep-gemm wheel are here, the 32-head next_n 7 one compiles again to the recorded
registers and spills (skipped, with the reason, where either is missing)."""
from __future__ import annotations

import re
import shutil

import pytest

from bench.kernels import deepgemm_sm120_aot as aot
from serving import REPO
from tests.line_0_5_23.test_v41_startup import PUBLISHED_TEXT

RUNS = REPO / "bench/runs"
CURRENT = RUNS / "2026-12-07-deepgemm-sm120-aot-heads32"
V41_ROWS = [(1, "false"), (1, "true"), (6, "true"), (7, "true")]
# record -> (its index heads, the (next_n, context_lens_2d) it holds)
RECORDS = {
    "2026-12-07-deepgemm-sm120-aot-heads32": (32, V41_ROWS),
    "2026-12-07-deepgemm-sm120-aot-v41-rows": (64, V41_ROWS),
    "2026-12-05-deepgemm-sm120-aot": (64, [(1, "false"), (2, "true")]),
}


def _name(next_n, ctx2d):
    return f"{aot.KERNEL}_n{next_n}_{'2d' if ctx2d == 'true' else '1d'}"


def _ptxas(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if "registers" in ln or "spill" in ln]


def test_the_default_heads_are_v41_flash_s_published_index_heads():
    assert aot.V41_INDEX_HEADS == PUBLISHED_TEXT["index_n_heads"] == 32
    assert set(aot.HEADS) == {32, 64}


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_each_record_s_sources_are_the_script_s_at_its_heads(record):
    heads, rows = RECORDS[record]
    run = RUNS / record
    assert set(rows) <= set(aot.SHAPES)
    summary = (run / "summary.txt").read_text()
    for next_n, ctx2d in rows:
        name = _name(next_n, ctx2d)
        assert (run / f"{name}.cu").read_text() == aot.source(next_n, ctx2d, heads), name
        assert f"{name}: rc 0" in summary, name
        assert "0 bytes spill stores, 0 bytes spill loads" in (run / f"{name}.log").read_text(), name
        # the mangled name ptxas compiled carries the heads (template argument 2: Lj<heads>E)
        assert f"ILj{next_n}ELj{heads}ELj128E" in (run / f"{name}.log").read_text(), name


def test_the_current_record_says_its_heads_in_its_header():
    assert "heads: 32 (index_n_heads)" in (CURRENT / "summary.txt").read_text().splitlines()[2]


def test_heads_other_than_deepgemm_s_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        aot.main(["--wheel", str(tmp_path / "none.whl"), "--heads", "48", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert "invalid choice: 48 (choose from 32, 64)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_next_n_7_compiles_again_to_the_recorded_registers(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on PATH")
    from harness.deep_gemm_wheel import wheel
    from patchkit import PatchkitError
    try:
        path = wheel()
    except PatchkitError as e:
        pytest.skip(f"the pinned sgl-deep-gemm wheel is not reachable: {e}")
    assert aot.main(["--wheel", str(path), "--next-n", "7", str(tmp_path)]) == 0      # the default: 32 heads
    name = _name(7, "true")
    assert (tmp_path / f"{name}.cu").read_text() == (CURRENT / f"{name}.cu").read_text()
    assert _ptxas((tmp_path / f"{name}.log").read_text()) == _ptxas((CURRENT / f"{name}.log").read_text())
    assert re.search(r"Used \d+ registers", (tmp_path / f"{name}.log").read_text())
