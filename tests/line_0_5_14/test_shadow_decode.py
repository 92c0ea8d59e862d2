"""serving/test_hooks/shadow_decode.py (OVERLAY_TEST_SHADOW_DECODE=1) on the patched tree's real sm_120 dispatcher, on a CPU
(its torch backend): a correct dispatcher reads error 0, every deliberate break of OVERLAY_TEST_BREAK_DECODE
(wrapped inside the check, as the server stacks them) reads far above a correct kernel's rounding, a NaN
output reads infinite, and the logged line is what bench/server/live_compare.py parses.
"""
from __future__ import annotations

import pytest
import torch

from harness.upstream import load_module, tree_package
from serving.test_hooks import emulate_sm120, shadow_decode
from serving.mma_decode_cases import make_case

DISPATCHER = "sglang/srt/layers/attention/flash_mla_sm120.py"
ENTRY = "flash_mla_with_kvcache_sm120"
# A correct bf16 kernel's error against float64 is ~2e-3 (BENCHMARKS.md, "MMA sparse decode"); the live
# tolerance is 2x the pinned kernel's reading. A break must read well above that.
CORRECT_REL = 2e-3
BROKEN_MIN = 2e-2


def shadowed(patched_root, monkeypatch, mode: str | None, tag: str):
    monkeypatch.setenv("SGLANG_SM120_SPARSE_DECODE", "torch")
    with tree_package(patched_root, "sglang"):
        module = load_module(patched_root / DISPATCHER, f"_flash_mla_sm120_shadow_{tag}")
    if mode:
        monkeypatch.setenv(emulate_sm120.BREAK_ENV, mode)
        emulate_sm120._break_decode(module)
    lines = []
    assert shadow_decode.wrap(module, ENTRY, emulate_sm120.graph_safe(module), lines.append,
                              emulate_sm120._compiling)
    assert not shadow_decode.wrap(module, ENTRY, emulate_sm120.graph_safe(module), lines.append,
                                  emulate_sm120._compiling)   # once
    return module, lines


@pytest.fixture(scope="module")
def case():
    # short rows (few valid keys) too: there the sink carries most of the softmax mass
    return make_case(B=6, H=16, topk=64, extra_topk=32, seed=5)


def reading(lines):
    return shadow_decode.last_reading("\n".join(lines))


def test_a_correct_dispatcher_reads_zero_and_counts_its_calls(patched_root, monkeypatch, case):
    # the clock is stepped by hand: how long a CPU decode call takes (a loaded machine) must not matter
    now = [1000.0]
    monkeypatch.setattr(shadow_decode, "_clock", lambda: now[0])
    module, lines = shadowed(patched_root, monkeypatch, None, "good")
    getattr(module, ENTRY)(**case.kwargs())
    now[0] += 0.5
    getattr(module, ENTRY)(**case.kwargs())
    assert reading(lines) == (0.0, 1)      # the second call came within a second: not logged yet
    now[0] += 1.0
    getattr(module, ENTRY)(**case.kwargs())
    assert reading(lines) == (0.0, 3)


@pytest.mark.parametrize("mode", ["zero-attn", "no-sink", "drop-split"])
def test_every_deliberate_break_reads_far_above_rounding(patched_root, monkeypatch, case, mode):
    module, lines = shadowed(patched_root, monkeypatch, mode, mode)
    getattr(module, ENTRY)(**case.kwargs())
    error, calls = reading(lines)
    print(f"{mode}: {error:.3e}")
    assert calls == 1 and error >= BROKEN_MIN


def test_rounding_of_a_correct_kernel_reads_small(patched_root, monkeypatch, case):
    module, lines = shadowed(patched_root, monkeypatch, None, "noisy")
    inner = getattr(module, ENTRY).__wrapped__
    g = torch.Generator().manual_seed(0)

    def noisy(**kw):     # a correct kernel: the reference's output with bf16-sized relative noise
        out, lse = inner(**kw)
        return (out.float() * (1 + CORRECT_REL * torch.randn(out.shape, generator=g))).to(out.dtype), lse

    monkeypatch.setattr(module, ENTRY, noisy)
    shadow_decode.wrap(module, ENTRY, emulate_sm120.graph_safe(module), lines.append, emulate_sm120._compiling)
    getattr(module, ENTRY)(**case.kwargs())
    error, _ = reading(lines)
    print(f"2e-3 noise: {error:.3e}")
    assert 0 < error < BROKEN_MIN / 2


def test_row_error_nan_output_is_infinite_and_nonfinite_reference_rows_are_skipped():
    ref = torch.ones(2, 1, 4, 8)
    out = ref.clone()
    out[1, 0, 2, 3] = float("nan")
    assert shadow_decode.row_error(out, ref) == float("inf")
    ref_bad = ref.clone()
    ref_bad[1, 0, 0, 0] = float("nan")                 # that row is skipped, the other agrees
    assert shadow_decode.row_error(out, ref_bad) == 0.0
    off = ref.clone()
    off[0] *= 1.1                                       # one row 10 % off: its error over the RMS row norm
    assert float(shadow_decode.row_error(off, ref)) == pytest.approx(0.1, rel=1e-5)


def test_last_reading_parses_the_logged_line():
    log = ("noise\n[overlay-boxhooks] shadow decode: error 1.000e-03 over 5 calls (pid 7)\n"
           "[overlay-boxhooks] shadow decode: error 2.500e-03 over 12 calls (pid 7)\nmore")
    assert shadow_decode.last_reading(log) == (2.5e-3, 12)
    assert shadow_decode.last_reading("nothing here") is None


def test_the_switch_registers_outside_the_break_and_refuses_unknown_values():
    env = {"OVERLAY_HC_SINKHORN": "off", emulate_sm120.BREAK_ENV: "no-sink", emulate_sm120.SHADOW_ENV: "1"}
    got = emulate_sm120.patches_for(env)[emulate_sm120.DECODE]
    assert got.index(emulate_sm120._shadow_decode) > got.index(emulate_sm120._break_decode)
    with pytest.raises(ValueError, match="OVERLAY_TEST_SHADOW_DECODE: expected 1 or 0, found 'yes'"):
        emulate_sm120.patches_for({**env, emulate_sm120.SHADOW_ENV: "yes"})
