"""bench/kernels/v41_candidate_cost.py --computed on a CPU: every printed MB and ms of the decode table against
per-position byte counts written out here independently (the same sources read again, summed per position rather
than per op), the prefill FLOPs against their closed form, and the GPU mode's shape list importable without a
GPU."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BW = 1.8e12
STEP_MS = 9.0
KEY = 128 // 2 + 128 // 32          # fp4 index key: 64 e2m1 bytes + 4 e8m0 scales
SPAN = 2048 * 8                     # positions a consumer reads among its published blocks
CONSUMERS = 4                       # layers 24, 28, 32, 36 after the source 20 (index sources from 20 on)


def expected_mb_and_ms(W: int, L: int, N: int, R: int) -> tuple[list[float], list[float]]:
    """(per-layer MB: generic src, generic cons, real src, real cons, sparse cons; per-step ms: generic, real,
    sparse), counted per position."""
    topk_out = 12                                       # fp32 value + int64 index
    C = min(SPAN, W)
    # generic: W-wide vectors once (arange 8, compare reads 8, j*ratio 16, gather index 8), per row and column
    # bool 1 + int32 gather 4 + 4 + int64 cast 12 + floor-divide 16 + not 2 + masked_fill 17 + fp32 logit 4,
    # per visible position 8 (slot) and per request 68 (key)
    scores = 40 * W + 60 * R * W + 8 * R * L + KEY * N * L
    # source: block max 4 + 4/8, eq 1/8, fill 9/8, top-k 4/8 of the keys, top-k of the logits 4: per row and column
    g_src = scores + 10.25 * R * W + R * 2048 * topk_out + R * 512 * topk_out
    among = 25 * R * C + R * 512 * topk_out             # gather 8, mask 4, fill 9, top-k read 4
    g_cons = scores + among
    # real length: keys per request, page table, fp32 logits per row; source: two reads of the logits, keys of
    # the blocks written and read, int32 outputs
    logits = KEY * N * L + 4 * N * -(-L // 64) + 4 * R * L
    nb = -(-L // 8)
    r_src = logits + 8 * R * L + 8 * R * nb + 4 * R * 512 + 4 * R * min(2048, nb)
    r_cons = logits + among
    Cs = min(SPAN, L)
    s_cons = (KEY + 8) * R * Cs + 4 * R * 512
    mb = [x / 1e6 for x in (g_src, g_cons, r_src, r_cons, s_cons)]
    step = [g_src + CONSUMERS * g_cons, r_src + CONSUMERS * r_cons, r_src + CONSUMERS * s_cons]
    return mb, [b / BW * 1e3 for b in step]


@pytest.fixture(scope="module")
def printed():
    run = subprocess.run([sys.executable, "-m", "bench.kernels.v41_candidate_cost", "--computed"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def _tokens(text: str) -> int:
    n = int(text[:-1])
    return n << (20 if text.endswith("M") else 10)


def test_every_decode_row_matches_the_per_position_count(printed):
    assert printed.startswith("COMPUTED, NOT MEASURED: ")
    assert "assumption: candidate layers: source 20, consumers [24, 28, 32, 36]" in printed
    rows = [line for line in printed.splitlines() if re.match(r"\| \d+[KM]", line) and line.count("|") == 15]
    assert len(rows) == 2 * 16 + 16          # 128K and 1M, 8 decode + 8 verify batches each; then 1M at 128K real
    seen = set()
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        m = re.fullmatch(r"(\d+[KM])(?: \(real (\d+[KM])\))?", cells[0])
        W = _tokens(m.group(1))
        L = _tokens(m.group(2)) if m.group(2) else W
        b = re.fullmatch(r"B(\d+)(?:x(\d+))?", cells[1])
        N, per = int(b.group(1)), int(b.group(2) or 1)
        R = int(cells[2])
        assert R == N * per and per in (1, 7)
        seen.add((W, L, N, per))
        mb, step = expected_mb_and_ms(W, L, N, R)
        got_mb = [float(c.replace(",", "")) for c in cells[3:8]]
        got_ms = [float(c) for c in cells[8:11]]
        got_pct = [float(c) for c in cells[11:14]]
        assert got_mb == pytest.approx(mb, abs=0.051), line
        assert got_ms == pytest.approx(step, abs=0.0006), line
        assert got_pct == pytest.approx([100 * t / STEP_MS for t in step], abs=0.051), line
    assert {n for _, _, n, _ in seen} == {1, 2, 4, 8, 16, 32, 48, 64}


def test_the_prefill_flops_match_their_closed_form(printed):
    per_pos = 2 * 32 * 128
    for P, label in ((131072, "128K"), (1048576, "1M")):
        row = next(line for line in printed.splitlines() if line.startswith(f"| {label} | ") and line.count("|") == 8)
        cells = [float(c.replace(",", "")) for c in row.strip("|").split("|")[1:]]
        pairs = P * (P + 1) // 2                                   # each row i sees i + 1 positions
        sparse = SPAN * (SPAN + 1) // 2 + (P - SPAN) * SPAN        # a consumer row sees at most SPAN
        assert cells[0] == pytest.approx((1 + CONSUMERS) * per_pos * pairs / 1e15, abs=0.006)
        assert cells[3] == pytest.approx(per_pos * (pairs + CONSUMERS * sparse) / 1e15, abs=0.006)


def test_the_gpu_modes_shapes_import_without_a_gpu():
    from bench.kernels import v41_candidate_gpu as G

    shapes = G.gpu_shapes()
    assert {(s["width"], s["real"]) for s in shapes} == {(131072, 131072), (1048576, 1048576), (1048576, 131072)}
    assert {s["rows"] for s in shapes} == {1, 2, 4, 8, 16, 32, 48, 64} | {7 * b for b in (1, 2, 4, 8, 16, 32, 48, 64)}
    assert all(s["rows"] == s["requests"] * (7 if s["kind"] == "verify" else 1) for s in shapes)
    assert max(s["width"] * s["rows"] for s in shapes) == 1048576 * 448
    assert set(G.TREE_FILES) <= set(__import__("bench.airgapped.tree_slice", fromlist=["FILES"]).FILES)


def test_the_gpu_mode_without_a_gpu_says_so_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "bench.kernels.v41_candidate_gpu", str(tmp_path / "out")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip() == "v41_candidate_gpu: expected a CUDA GPU, found none"
    assert not (tmp_path / "out").exists()
