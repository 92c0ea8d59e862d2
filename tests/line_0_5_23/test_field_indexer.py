"""field-check's indexer stage (serving/field_indexer.py) on the CPU, through 0.5.23's own functions out of the
patched tree (tests/line_0_5_23/indexer_tree.py): the line's fp4 quantiser and index-K store kernel (Triton's
interpreter, tests/conftest.py), the pool's dequantisation, the release's torch scoring, the candidate layers'
paged_topk_block_ids / topk_among_blocks / pool slots. Small sizes (4 heads, 16-slot pages, 3 blocks of 8 kept, top-k
8) so that a block selection keeps fewer blocks than a row has.

Stand-ins: the card's capability (a hardware query), amax8_varlen (a JIT CUDA kernel: its documented contract,
tests/line_0_5_23/v41_tree.py), and DeepGEMM's logits kernel, reached through the pinned sgl-deep-gemm wheel's own
package over its op schemas (harness/deep_gemm_wheel.py) and answered by the release's torch scoring of the packed
inputs it is handed, garbage past each row's length as DeepGEMM leaves it."""
from __future__ import annotations

import types

import pytest
import torch

from harness import deep_gemm_wheel
from serving import field_indexer as FI, field_kernels as K, field_rows as R
from tests.line_0_5_23 import indexer_tree as T

SHAPES = [R.IndexerShape("decode B2 ctx 40", "decode", 2, 1, 40),
          R.IndexerShape("verify B2x7 ctx 40", "verify", 2, R.VERIFY_TOKENS, 40)]
GEO = FI.Geometry(heads=4, page=16, topk=8, topk_blocks=3)
SMS = 188


@pytest.fixture(autouse=True)
def _on_cpu(monkeypatch):
    monkeypatch.setattr(K, "DEVICE", "cpu")


@pytest.fixture(scope="module")
def parts(patched_root):
    return T.parts(patched_root)


def run(parts, cc="9.0"):
    said = []
    rows = FI.stage_indexer(types.SimpleNamespace(indexer_parts=lambda: parts), {"cc": cc, "sm": f"sm_{cc[:-2]}{cc[-1]}"},
                            K.Budget(600), said.append, shapes=SHAPES, geo=GEO)
    assert len(said) == len(rows) == len(SHAPES) * len(R.INDEXER_KINDS)
    return {kind: [r for r in rows if r["kind"] == kind] for kind in R.INDEXER_KINDS}


def test_on_sm90_the_reference_and_candidate_rows_run_and_pass(parts):
    rows = run(parts, "9.0")
    ref, dg, cand = (rows[k] for k in R.INDEXER_KINDS)
    assert all(r["status"] == "pass" and r["err_f64"] < FI.REF_F64_TOL and r["ms"] > 0 for r in ref), ref
    assert all(r["status"] == "skipped" and r["reason"] == R.deepgemm_fp4_reason("9.0") for r in dg)
    assert all(r["status"] == "pass" and r["mismatched_rows"] == 0 and r["slots_match"] for r in cand), cand
    assert all(r["logits"].startswith("the float32 torch reference") and r["amax8_varlen"] == T.STAND_IN_AMAX8
               for r in cand)
    assert [r["rows"] for r in ref] == [2, 14]


@pytest.mark.parametrize("broken", ["block ids read past each row's length", "top-k reads past each row's length"])
def test_a_selection_that_reads_past_a_rows_length_fails_its_row(parts, broken):
    """The check is not vacuous: the line's functions handed the logits' full width as every row's length pick the
    garbage DeepGEMM leaves past it, and the float64 sparse-table set says so."""
    def full(lens, logits):
        return torch.full_like(lens, logits.shape[1])
    bad = types.SimpleNamespace(**vars(parts))
    if broken.startswith("block ids"):
        bad.block_ids = lambda logits, lens, n: parts.block_ids(logits, full(lens, logits), n)
    else:
        bad.among_blocks = lambda s, lens, blocks, k, block_size: parts.among_blocks(s, full(lens, s), blocks, k,
                                                                                       block_size=block_size)
    cand = run(FI.IndexerParts(**vars(bad)))["candidate blocks"]
    assert all(r["status"] == "fail" and r["mismatched_rows"] > 0 for r in cand), cand


def test_the_pristine_release_has_no_candidate_rows_and_says_why(pristine_root):
    rows = run(T.parts(pristine_root))
    assert all(r["status"] == "pass" for r in rows["torch reference"])
    assert all(r["status"] == "skipped" and r["reason"] == FI.NO_CANDIDATE for r in rows["candidate blocks"])


def _packed_dequant(parts, fp4, sf, page):
    """Packed fp4 rows (int8 [n, 64], int32 [n]) through the pool's own dequantisation: laid out as a page's
    slots are (payload, then the four scale bytes of each slot)."""
    n = fp4.shape[0]
    buf = torch.zeros(-(-n // page), page * 68, dtype=torch.uint8)
    slot = torch.arange(n)
    page_of, off = (slot // page)[:, None], (slot % page)[:, None]
    buf[page_of, off * 64 + torch.arange(64)] = fp4.view(torch.uint8)
    buf[page_of, page * 64 + off * 4 + torch.arange(4)] = sf.contiguous().view(torch.uint8).view(n, 4)
    return parts.dequant(buf, slot, page)


def _stand_in_logits(parts, weight_scale):
    """DeepGEMM's fp8_fp4_paged_mqa_logits by what it computes: the release's torch scoring of the packed queries
    and the paged keys it is handed, each row up to its own length, garbage past it."""
    def kernel(q, q_sf, kv, w, lens, table, schedule, width, clean, dtype, indices):
        b_count, n, heads, _ = q.shape
        page = kv.shape[1]
        cache = kv.view(kv.shape[0], -1)
        qd = _packed_dequant(parts, q.reshape(-1, 64), q_sf.reshape(-1), page).float().view(b_count * n, heads, -1)
        out = torch.full((b_count * n, width), FI.GARBAGE)
        for b in range(b_count):
            length = int(lens[b].max())
            pos = torch.arange(length)
            k = parts.dequant(cache, table[b, pos // page].long() * page + pos % page, page).float()
            rows = slice(b * n, (b + 1) * n)
            out[rows, :length] = parts.scores(qd[rows], k, w[rows] * weight_scale)
        past = torch.arange(width)[None, :] >= lens.reshape(-1, 1)
        return out.masked_fill(past, FI.GARBAGE).to(dtype)
    return kernel


@pytest.mark.parametrize("weight_scale,status", [(1.0, "pass"), (2.0, "fail")], ids=["as computed", "weights x2"])
def test_on_sm120_deepgemm_gets_its_own_schedule_and_is_judged_against_the_reference(parts, tmp_path, weight_scale,
                                                                                    status):
    recorder = deep_gemm_wheel.Recorder()
    recorder.answers.update({
        "get_num_sms": lambda: SMS,
        # each schedule holds the index of the call that made it
        "get_paged_mqa_logits_metadata": lambda lens, block, sms, idx: torch.full(
            (sms + 1, 2), len(recorder.calls) - 1, dtype=torch.int32),
        "fp8_fp4_paged_mqa_logits": _stand_in_logits(parts, weight_scale)})
    with deep_gemm_wheel.deep_gemm(tmp_path, recorder):
        rows = run(parts, "12.0")
    dg = rows["DeepGEMM fp4 paged MQA logits"]
    assert all(r["status"] == status and r["logits_dtype"] == "float32" for r in dg), dg
    if status == "pass":
        assert all(r["err_f32_ref"] < FI.DEEPGEMM_TOL["torch.float32"] for r in dg)
        cand = rows["candidate blocks"]
        assert all(r["status"] == "pass" and r["logits"] == "DeepGEMM's logits" for r in cand), cand
    else:
        assert all(r["err_f32_ref"] > 0.3 for r in dg)
    # every logits call got the schedule DeepGEMM's get_paged_mqa_logits_metadata made for its batch, at the
    # index pool's page, from each request's row lengths
    schedules = [(i, args) for i, (name, args) in enumerate(recorder.calls) if name == "get_paged_mqa_logits_metadata"]
    logits = [args for name, args in recorder.calls if name == "fp8_fp4_paged_mqa_logits"]
    assert schedules and logits
    for i, args in schedules:
        assert args[1] == GEO.page and args[2] == SMS and args[0].dtype == torch.int32
    made = {int(args[6][0, 0]) for args in logits}
    assert made <= {i for i, _ in schedules}
    verify = [args for args in logits if args[0].shape[1] == R.VERIFY_TOKENS]
    assert verify and all(a[4].shape == (2, R.VERIFY_TOKENS) for a in verify)   # one length per verify row


def test_the_gpu_machines_slice_carries_the_indexer_stage(patched_root, tmp_path):
    """field_check_slice's call (a GPU machine without 0.5.23's runtime) finds every indexer function in the tree
    slice p1_tree.write_slice makes, and its rows run as the tree's do."""
    from tests.line_0_5_23 import p1_tree
    from tests.line_0_5_23.gpu.field_check_slice import SliceCall

    p1_tree.write_slice(patched_root, tmp_path / "slice")
    source = SliceCall(tmp_path / "slice")
    rows = FI.stage_indexer(source, {"cc": "9.0", "sm": "sm_90"}, K.Budget(600), lambda s: None, shapes=SHAPES[:1],
                            geo=GEO)
    assert [r["status"] for r in rows] == ["pass", "skipped", "pass"], rows
