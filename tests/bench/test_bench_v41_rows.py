"""The V4.1-Flash row set of the P1 and P3 benches on a CPU (bench/kernels/v41_rows.py, bench_mma_decode --rows v41):
which rows are timed, the batch sweep's shapes unchanged beside it, and the float64 reference computed in row
slices (a prefill chunk's would not fit a GPU at once) equal to the one-slice result."""
from __future__ import annotations

import pytest
import torch

from bench.kernels import bench_mma_decode as bm
from bench.kernels import decode_timing
from bench.kernels import v41_rows as V41


def test_the_rows_are_decode_verify_and_prefill_each_once_in_ascending_order():
    rows = V41.v41_rows()
    counts = [n for n, _, _ in rows]
    assert counts == sorted(set(counts))
    verify = {b * t for b in V41.VERIFY_BATCHES for t in V41.VERIFY_TOKENS}
    assert set(counts) == set(V41.DECODE) | verify | set(V41.PREFILL)
    for n, label, kind in rows:
        if kind == "verify":
            b, t = map(int, label[1:].split("x"))
            assert b * t == n and b in V41.VERIFY_BATCHES and t in V41.VERIFY_TOKENS
        else:
            assert label == ("B" if kind == "decode" else "P") + str(n)
    assert {k for _, _, k in rows} == {"decode", "verify", "prefill"}
    assert max(V41.VERIFY_BATCHES) * max(V41.VERIFY_TOKENS) > 64   # verify batches past the decode kernel's 64 rows


def test_a_row_count_two_kinds_share_is_timed_once_under_the_first(monkeypatch):
    monkeypatch.setattr(V41, "DECODE", (1, 12))
    monkeypatch.setattr(V41, "VERIFY_BATCHES", (2,))
    monkeypatch.setattr(V41, "VERIFY_TOKENS", (6,))
    monkeypatch.setattr(V41, "PREFILL", (12, 2048))
    assert V41.v41_rows() == [(1, "B1", "decode"), (12, "B12", "decode"), (2048, "P2048", "prefill")]


def test_the_v41_set_times_every_row_at_every_head_count_and_width():
    shapes = bm.row_set_shapes("v41", [8, 16], [1, 4], [64], [512, 1024])
    rows = V41.v41_rows()
    assert len(shapes) == 2 * 2 * len(rows)
    assert len({s.name for s in shapes}) == len(shapes)
    assert {(s.H, s.topk, s.extra_topk) for s in shapes} == {(h, 128, k) for h in (8, 16) for k in (512, 1024)}
    assert [(s.B, s.label, s.kind) for s in shapes[: len(rows)]] == rows
    assert shapes[0].name == "H8/B1/win128+ex512" and shapes[-1].name == "H16/P8192/win128+ex1024"


def test_the_batch_sweep_keeps_its_shapes_and_names():
    """Saved runs are merged by shape name: the default set must name its rows as before."""
    names = [s.name for s in bm.row_set_shapes("flash", [8, 64], [1, 128], [8])]
    assert names == ["H8/B1/win128+ex512", "H8/B128/win128+ex512", "H64/B1/win128+ex512", "H64/B128/win128+ex512",
                     "H8/B1/topk2048", "H8/B16/topk2048", "H8/B64/topk2048", "H8/B128/topk2048"]


def test_an_unknown_row_set_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"expected a row set of flash, v41, found 'v5'"):
        bm.row_set_shapes("v5", [8], [1], [8])


def test_the_reference_in_row_slices_equals_the_reference_in_one(monkeypatch):
    gen = torch.Generator().manual_seed(3)
    pools = (bm.make_pool(4, 256, gen), bm.make_pool(8, 64, gen))
    inp = bm.Inputs(bm.Shape(14, 8, 128, 64, label="B2x7", kind="verify"), pools, gen)
    whole = bm.reference_f64(inp, 1)
    monkeypatch.setattr(decode_timing, "REF_TOKENS_PER_SLICE", 3 * (128 + 64))     # 3 rows per slice: 5 slices, the last of 2
    sliced = bm.reference_f64(inp, 1)
    assert whole.shape == sliced.shape == (14, 1, 8, 512) and whole.dtype == torch.float64
    assert torch.allclose(whole, sliced, rtol=1e-12, atol=0)
    assert whole.abs().sum() > 0


def test_long_calls_replay_less_and_the_batch_sweep_as_before():
    flash = bm.row_set_shapes("flash", [8, 16, 32, 64], [1, 2, 4, 8, 16, 32, 64, 128], [8, 64])
    assert {bm.replays_for(s) for s in flash} == {20}
    v41 = {s.label: bm.replays_for(s) for s in bm.row_set_shapes("v41", [8], [], [], [1024])}
    assert v41["B128"] == 20 and v41["P8192"] == 3 and 3 <= v41["P2048"] < v41["B64x7"] <= 20
