"""bench/kernels/mhc_pre_share.py: P3's share of a forward, computed from the raw files BENCHMARKS.md cites (the per-call bench
under triton 3.8 and the patched 0.5.14 server's step), with the keep/retire rule."""
from __future__ import annotations

from bench.kernels import mhc_pre_share as p3_share
from tests.conftest import REPO

MHC = REPO / "bench/runs/2026-12-05-p3-triton38-gpu/mhc-bench-3.8.txt"
STEPS = REPO / "bench/runs/2026-12-01-e2e-run2/compare.txt"
ONE_TREE = REPO / "bench/runs/2026-12-01-e2e-run2/e2e-patched.txt"


def test_the_raw_tables_read_as_the_benchmarks_section_states_them():
    saving = p3_share.saving_us(MHC.read_text())
    assert round(saving[1], 1) == round(16.7 - 5.7, 1) and set(saving) >= {1, 16, 64}
    assert p3_share.step_ms(STEPS.read_text()) == {1: 1.43, 16: 1.88, 64: 3.50}
    assert p3_share.step_ms(ONE_TREE.read_text()) == p3_share.step_ms(STEPS.read_text())
    assert p3_share.layers_of(STEPS.read_text()) == 4


def test_the_bracket_and_the_verdict():
    rows = p3_share.share_rows({1: 10.0}, {1: 1.0}, layers=4)
    [(c, s, step, upper, lower, est)] = rows
    assert (upper, est) == (1.0, None) and abs(lower - 100 * 10 / (1000 * 43 / 4)) < 1e-9
    assert p3_share.verdict(rows).startswith("undecided")
    assert p3_share.verdict(p3_share.share_rows({1: 1.0}, {1: 1.0}, 4)).startswith("retire")
    # a second depth splits the step: 4 layers 1.0 ms, 12 layers 2.0 ms -> 43 layers 5.875 ms
    [row] = p3_share.share_rows({1: 30.0}, {1: 1.0}, 4, {1: 2.0}, 12)
    assert abs(row[5] - 100 * 30 / 5875) < 1e-9 and p3_share.verdict([row]).startswith("keep")


def test_a_missing_file_is_one_line_and_exit_2(tmp_path, capsys):
    assert p3_share.main(["--mhc", str(tmp_path / "none.txt"), "--steps", str(STEPS)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected a raw file" in err[0]


def test_the_per_layer_share_of_a_profiled_step():
    kernels = {"alone/mma-1M-c1-p4096/x.trace.json.gz": {"kernel_us": 100.0, "top": [
        {"name": "head", "us": 10.0, "launches": 7},          # once a step: fixed
        {"name": "moe", "us": 40.0, "launches": 56},          # 8 a step over 4 layers: per-layer
        {"name": "gemm", "us": 22.0, "launches": 154}]}}      # 22 a step: 20 of them per layer
    assert abs(p3_share.per_layer_fraction(kernels, 1, 4) - (40 + 22 * 20 / 22) / 100) < 1e-9
    assert p3_share.per_layer_fraction(kernels, 16, 4) is None
    [row] = p3_share.share_rows({1: 10.0}, {1: 1.0}, 4, kernels=kernels)
    f = 0.6
    assert abs(row[5] - 100 * 10 / (1000 * ((1 - f) + f * 43 / 4))) < 1e-9
    real = REPO / "bench/runs/2026-12-03-p1-share-run3/kernels.json"
    import json
    for c in (1, 16, 64):
        assert 0.5 < p3_share.per_layer_fraction(json.loads(real.read_text()), c, 4) < 1
