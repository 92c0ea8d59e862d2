"""Issue 12 experiment: the warp-specialised Gluon decode kernel (bench/experiments/gluon_ws_decode.py; run on
the H200 since 2026-12-03, not shipped) compiles ahead of time for sm_120 and sm_90 on the CPU, as
tests/kernels/test_mma_aot.py gates the shipped configs: shared memory <= 101376 bytes (sm_120's per-block limit), no
register spills (ptxas -v), mma.sync and no wgmma, and really warp-specialised (setmaxnreg in the PTX, more warps
than the 4 it is launched with).

Gated, both: ws32g1 (one MMA group) and ws32g2 (two MMA groups on alternate tiles; spill-free only at the
136 / 192 loader / MMA register split: 144 / 184 spilled 8-16 bytes, bench/notes/mma_decode_notes.md).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.aot import compile_in_subprocess

REPO = Path(__file__).resolve().parents[2]
SM120_SHARED_LIMIT = 101376
ARCHS = (120, 90)
GATED = ("ws32g1", "ws32g2")
# The module fixture compiles every WS config for both archs: over a minute on the CI machine (make test starts it
# first, tests/long_setups_first.py).
pytestmark = pytest.mark.slow


def _compile_all() -> list[dict]:
    from bench.experiments.gluon_ws_decode import aot_rows

    return aot_rows(archs=ARCHS)


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    return compile_in_subprocess(__name__, REPO)


def test_every_ws_config_compiles_for_both_archs(compiled):
    from bench.experiments.gluon_ws_decode import WS_CONFIGS

    kinds = {(r["arch"], r["kernel"]) for r in compiled}
    for arch in ARCHS:
        for name in WS_CONFIGS:
            for split in (False, True):
                for suffix in ("", "/one-cache"):
                    assert (arch, f"ws/{name}/split={split}{suffix}") in kinds


def test_sm120_shared_memory_fits(compiled):
    rows = [r for r in compiled if r["arch"] == 120]
    assert rows
    for row in rows:
        assert 0 < row["shared"] <= SM120_SHARED_LIMIT, row


def test_mma_sync_only_and_warp_specialised(compiled):
    for row in compiled:
        assert row["mma_sync"] and not row["wgmma"], row
        assert row["setmaxnreg"] and row["num_warps"] > 4, row
        assert row["loop"]["mma"] > 0, row


@pytest.mark.parametrize("arch", ARCHS)
def test_gated_configs_do_not_spill(compiled, arch):
    rows = [r for r in compiled if r["arch"] == arch and r["kernel"].split("/")[1] in GATED]
    assert len(rows) == 4 * len(GATED)
    for row in rows:
        assert row["spill_stores"] == 0 and row["spill_loads"] == 0, row
        assert row["regs"] <= 255, row


if __name__ == "__main__":
    print(json.dumps(_compile_all()))
