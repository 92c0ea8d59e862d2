"""P7 red/green: at TP > 1 the sm_120 MMA decode call gets the rank's real query heads, not 64.

Runs the real `MQALayer.forward` compiled out of the pristine and the patched deepseek_v4.py (see
tests/unpadded_heads_cases.py for what is real and what stands in), for one rank at TP = 2 / 4 / 8
(32 / 16 / 8 heads), on a CPU: sm_120 is simulated, the attention is the patched tree's real
dispatcher running the MMA kernel under TRITON_INTERPRET=1 on a small window + c4 cache.

Red on the pristine tree: the decode call receives 64 heads. Green on the patched tree: it receives
n_local_heads, the sink it gets is the rank's slice, and the outputs equal the padded (pristine)
forward's up to rounding. The two calls round differently: the kernel's split count depends on the
number of head groups, and with 8 heads the rows of a 16-head tile that are not masked are the
padded call's junk heads, which move the tile's lazy-rescale points. Both are within the kernel's
bf16 error of the exact result (~2^-8 relative; tests/kernels/test_mma_decode.py), so real-head attention
outputs agree to 2^-7 of their norm (measured 2-3e-3) and the layer outputs, after two more bf16
matmuls, to 2^-6 (measured 4-7e-3).
Everything else keeps the padding: extend batches, a GPU other than sm_120, and the per-head
Triton / torch backends chosen with SGLANG_SM120_SPARSE_DECODE.
"""
from __future__ import annotations

import pytest
import torch

from tests import unpadded_heads_cases as P

ATTN_REL, LAYER_REL = 2.0 ** -7, 2.0 ** -6

# The padded call's junk heads (as the model builds them) overflow to inf and NaN in the interpreter's numpy
# arithmetic, which numpy reports at whichever operation meets them first (the matmul or the add, depending on
# the junk); only the real heads are compared. By name: numpy's floating-point reports from the interpreter.
pytestmark = [pytest.mark.filterwarnings(rf"ignore:{message}:RuntimeWarning:triton\.runtime\.interpreter")
              for message in ("(overflow|invalid value) encountered in ", "All-NaN slice encountered")]


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def check_decode_gets_real_heads(model_root, kernel_root, tp_size):
    local = P.N_HEADS // tp_size
    run = P.run_forward(model_root, kernel_root, tp_size=tp_size, mode="decode")
    (call,) = run.calls
    assert call.heads == local, f"expected {local} query heads in the decode call, found {call.heads}"
    return run


@pytest.mark.parametrize("tp_size", [2, 4, 8])
def test_pristine_decode_call_gets_64_heads(pristine_root, patched_root, tp_size):
    with pytest.raises(AssertionError, match=f"expected {64 // tp_size} query heads in the decode call, found 64"):
        check_decode_gets_real_heads(pristine_root, patched_root, tp_size)


@pytest.mark.parametrize("tp_size", [2, 4, 8])
def test_patched_decode_call_gets_real_heads_same_output(pristine_root, patched_root, tp_size):
    local = P.N_HEADS // tp_size
    mine = check_decode_gets_real_heads(patched_root, patched_root, tp_size)
    padded = P.run_forward(pristine_root, patched_root, tp_size=tp_size, mode="decode")
    assert padded.calls[0].heads == P.PADDED_HEADS
    # the sink: rank 1's slice of the model's sink, exactly the padded call's first `local` entries
    w = P.Weights.random(0)
    assert mine.calls[0].sink_heads == local
    assert torch.equal(mine.calls[0].sink, w.sink[local : 2 * local])
    assert torch.equal(padded.calls[0].sink[:local], mine.calls[0].sink)
    assert mine.out.shape == padded.out.shape == (3, P.HIDDEN)
    assert not mine.out.isnan().any()
    assert _rel(mine.calls[0].out, padded.calls[0].out[:, :local]) < ATTN_REL
    assert _rel(mine.out, padded.out) < LAYER_REL


def test_patched_second_step_reuses_the_sink_buffer(patched_root):
    """The sink is built once (a CUDA graph replays the same memory); the decode call reads a view of it."""
    run = P.run_forward(patched_root, patched_root, tp_size=8, mode="decode", steps=2)
    assert [c.heads for c in run.calls] == [8, 8]


@pytest.mark.parametrize(
    "mode,sm120,backend",
    [
        ("extend", True, "mma"),       # prefill may go to the sparse prefill kernel (64 / 128 heads only)
        ("decode", False, "mma"),      # FlashMLA on other GPUs
        ("decode", True, "triton"),    # the env switches back to the pinned kernels keep the pinned call
        ("decode", True, "torch"),
    ],
)
def test_patched_other_paths_keep_64_heads(patched_root, mode, sm120, backend):
    run = P.run_forward(patched_root, patched_root, tp_size=8, mode=mode, sm120=sm120, backend=backend)
    assert [(c.heads, c.sink_heads) for c in run.calls] == [(64, 64)]
    assert torch.equal(run.calls[0].sink[8:], torch.zeros(56))


def test_patched_tp1_is_unchanged(pristine_root, patched_root):
    mine = P.run_forward(patched_root, patched_root, tp_size=1, mode="decode", tp_rank=0)
    pinned = P.run_forward(pristine_root, patched_root, tp_size=1, mode="decode", tp_rank=0)
    assert [c.heads for c in mine.calls] == [c.heads for c in pinned.calls] == [64]
    assert torch.equal(mine.out, pinned.out)
