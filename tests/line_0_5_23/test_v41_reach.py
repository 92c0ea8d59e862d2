"""The per-model reach rows of patches/0.5.23/sglang/reach.toml (and the 0.5.14 line's V4.1 row), held by 0.5.23's
own dispatch functions driven on the CPU as an sm_120 card (capability 12.0): the sparse-attention entry
flash_mla_with_kvcache_sm120 at each forward's row counts, the V4.1 indexers as the attention backend builds them
(make_full_topk_indexer, make_candidate_indexer) under the flags the release computes on sm_120 (its model hook's
sm_120 block, its DeepGEMM configurer; v41_tree.Release), V4.1's MHC mixing dispatch; and the V4.1 indexer's
decode metadata as the backend builds it under a CUDA graph (does its work follow each row's real length or the
graph's width?). Nothing here sets an answer the release computes: only the device queries and the kernels are
stood in for, DeepGEMM by the pinned wheel over its own op schemas."""
from __future__ import annotations

import types
from contextlib import ExitStack

import pytest
import torch

from harness import deep_gemm_wheel

from harness.upstream import extract_functions
from patchkit.rebase.reach import load_models, load_partly
from tests.conftest import pristine_wheel
from tests.line_0_5_23 import v41_tree as V
from tests.rebase.test_rebase_reach import _reader, _series

MMA, DEFAULT, GLUON, P3 = ("dsv4: an mma choice for the sm_120 sparse decode backend",
                           "dsv4: make mma the sm_120 sparse decode default",
                           "dsv4: a Gluon kernel for the sm_120 mma decode backend",
                           "dsv4: run the MHC-pre mixing linear in bf16 on tensor cores")
SCHEDULE, CANDIDATES = ("dsv4: give the sm_120 ratio-1/2 indexer DeepGEMM's own schedule",
                        "dsv4: start the v4.1 candidate indexer on sm_12x with paged logits")
V41 = types.SimpleNamespace(model_type="deepseek_v41", candidate_source_layer_id=20, candidate_topk_blocks=2048,
                            candidate_block_size=8)      # tests/line_0_5_23/test_v41_startup.py: PUBLISHED
# Each forward's query rows per sparse-attention call: decode B 1-128; DSPARK block 6 (verify B x 7: block + 1 rows
# per request, draft-extend up to B x 6, B 1-64); prefill chunks of 2048 rows; V4's MTP verify and prefill above 64.
VERIFY_ROWS = 6 + 1
FORWARDS = {
    ("DeepSeek-V4.1-Flash", "decode, B 1-128"): range(1, 129),
    ("DeepSeek-V4.1-Flash", "DSPARK target-verify, B 1-64 x 7 rows"): [b * VERIFY_ROWS for b in range(1, 65)],
    ("DeepSeek-V4.1-Flash", "DSPARK draft-extend, B 1-64 x up to 6 rows"): range(1, 6 * 64 + 1),
    ("DeepSeek-V4.1-Flash", "chunked prefill, 2048-row chunks"): [2048],
    ("DeepSeek-V4-Flash", "decode, B 1-128"): range(1, 129),
    ("DeepSeek-V4-Flash", "MTP verify or chunked prefill, over 64 rows"): [65, 384, 2048, 8192],
}
DECODE_KINDS = ("decode", "target-verify")     # the forwards the backend scores with topk_decode


def _upstream_attention(routes: set[str]) -> str:
    alone = {frozenset({"flashinfer decode"}): "FlashInfer's sm_120 decode kernel",
             frozenset({"flashinfer prefill"}): "FlashInfer's prefill path",
             frozenset({"flashinfer decode", "flashinfer prefill"}):
                 "FlashInfer's decode kernel to 64 rows, its prefill path above"}[frozenset(routes)]
    return f"sparse attention: flash_mla_with_kvcache_sm120 -> the set's MMA kernel (upstream alone: {alone})"


def _started(root, tmp_path, rows_per_request=1):
    """The V4.1 indexers of the tree's attention backend and the decode metadata of a ratio-1 layer, on sm_120 under
    the release's own flags; a refusal at start is returned as the RuntimeError's text."""
    recorder = deep_gemm_wheel.Recorder()
    with ExitStack() as stack:
        release = V.Release(root, tmp_path, recorder).start(stack, capture=True)
        try:
            backend = release.indexers(V41)
        except RuntimeError as e:
            return str(e), None, recorder
        lens = torch.arange(1, 3 * rows_per_request + 1) * 100
        metadata = release.indexer_metadata(rows_per_request=rows_per_request, lens=lens, pages=4096 * 4)
        return backend, metadata, recorder


def _observed(pristine_root, patched_root, tmp_path) -> dict:
    """(model, forward) -> (patch subjects it runs, upstream paths), from the release's dispatch on sm_120."""
    refusal, _, _ = _started(pristine_root, tmp_path / "pristine")
    built, metadata, recorder = _started(patched_root, tmp_path / "patched")
    refused = isinstance(refusal, str) and "needs DeepGEMM's paged sparse MQA logits" in refusal
    candidates = built.decode_candidates
    paged_blocks = (type(candidates).__name__ == "DenseBlocksBackend" and candidates.use_deep_gemm_decode
                    and built.prefill_candidates is candidates)
    # the one schedule of the forward, made by deep_gemm.get_paged_mqa_logits_metadata from the rows' lengths
    own_schedule = (isinstance(metadata.deep_gemm_metadata, torch.Tensor)
                    and recorder.names().count("get_paged_mqa_logits_metadata") == 1)
    # upstream alone, with the candidate layers overridden away: what its decode metadata hands DeepGEMM
    override = types.SimpleNamespace(**{**vars(V41), "candidate_topk_blocks": 0, "candidate_source_layer_id": -1})
    with ExitStack() as stack:
        release = V.Release(pristine_root, tmp_path / "override", deep_gemm_wheel.Recorder()).start(stack, True)
        release.indexers(override)
        no_schedule = release.indexer_metadata(rows_per_request=1, lens=torch.tensor([100]),
                                               pages=16).deep_gemm_metadata is None
    mix = V.Calls()
    V.mix_stats(pristine_root, mix, sm="sm120", rows=8, hidden=5120)
    # the fused post/pre boundary: the 0.5.14 line's P3 record (its figure, 1 of 86) holds on this release
    v4_partly = load_partly(_series("0.5.14").directory, _series("0.5.14").patches, lambda _: None)
    v4_boundary = any(r.subject == P3 and r.holds(_reader(pristine_wheel("sglang", "0.5.23")))
                      for r in v4_partly.values())
    carries_p3 = any(p.subject == P3 for p in _series("0.5.23").patches)     # retired here in patch set 0.1.10
    out = {}
    for (model, forward), rows in FORWARDS.items():
        ours = {V.sparse_attention_route(patched_root, V.Calls(), r) for r in rows}
        alone = {V.sparse_attention_route(pristine_root, V.Calls(), r) for r in rows}
        # the mma branch asks the Gluon patch's gluon_serves on every call: that patch runs too
        subjects = [MMA, DEFAULT, GLUON] if ours == {"the set's MMA kernel"} else []
        upstream = [_upstream_attention(alone)]
        if model == "DeepSeek-V4.1-Flash":
            decode = any(k in forward for k in DECODE_KINDS)
            if decode and built.full_topk_indexer.use_deep_gemm_decode and own_schedule and no_schedule:
                subjects.append(SCHEDULE)
                upstream.append("full top-k indexer (ratio-1/2 layers): DeepGEMM fp8_fp4_paged_mqa_logits (sm_120 fp4 "
                                "kernel) under DeepGEMM's own schedule, work per row's real length (upstream alone: "
                                "no schedule, refused by DeepGEMM at the first decode or graph capture)")
            elif not decode and built.full_topk_indexer.use_deep_gemm_prefill:
                upstream.append("full top-k indexer (ratio-1/2 layers): DeepGEMM fp8_fp4_mqa_logits (dense prefill scoring)")
            if paged_blocks and refused:
                subjects.append(CANDIDATES)
                upstream.append(("candidate indexer: block ids, DeepGEMM fp8_fp4_paged_mqa_logits per row's real "
                                 "length, then amax8_varlen and topk_among_blocks" if decode else
                                 "candidate indexer: block ids, DeepGEMM fp8_fp4_mqa_logits (dense prefill scoring)")
                                + " (upstream alone: refused at start, no paged sparse MQA logits on sm_120)")
            if mix.names() == ["hc_mix_stats_sinkhorn"]:
                upstream.append("MHC: pre lagged from the previous sublayer -> hc_mix_stats_sinkhorn (the release's "
                                "fused Triton mixing); hc_pre not called")
        elif v4_boundary:
            if carries_p3:
                subjects.insert(1, P3)
            upstream.append("MHC: hc_pre (the release's fp32 code; P3 retired here) on the forward's first read only, "
                            "the fused post+pre kernel on the other 85")
        out[model, forward] = (subjects, upstream)
    return out


def test_each_model_row_is_what_the_release_dispatch_does_on_sm120(pristine_root, patched_root, tmp_path):
    series = _series("0.5.23")
    names = {p.subject: p.name for p in series.patches}
    rows = {(r.model, r.forward): r for r in load_models(series.directory, series.patches, lambda w: None)}
    observed = _observed(pristine_root, patched_root, tmp_path)
    assert set(rows) == set(observed)
    for key, (subjects, upstream) in observed.items():
        assert rows[key].reaches == tuple(names[s] for s in subjects), key
        assert rows[key].upstream == tuple(upstream), key


def test_v41_mixing_on_sm120_is_the_release_fused_kernel_and_v4_config_takes_hc_pre(pristine_root):
    # V4.1's config lags MHC-pre from the previous sublayer (HcRead.read then runs mhc.combine, never hc_pre);
    # V4's alias keeps it off, so its reads go through DeepseekV4DecoderLayerBase.hc_pre or the fused boundary
    ns = extract_functions(pristine_root / V.V41_CONFIG, ["DeepseekV41Config"],
                           {"DeepseekV3Config": object, "PretrainedConfig": object,
                            "normalize_deepseek_v41_config": lambda v: v})
    assert ns["DeepseekV41Config"].hc_pre_from_prev_sublayer is True
    boundary = (pristine_root / "sglang/srt/models/deepseek_v4_boundary.py").read_text()
    assert "if layer.boundary_pre_from_prev:" in boundary and "x = mhc.combine(hc, residual, quantized)" in boundary


def _metadata(root, tmp_path, lens, rows_per_request=1):
    """The ratio-1 indexer metadata the tree's backend builds under a CUDA graph captured for a 1M context (4096
    pages of 256 tokens, 64-slot index pages), on sm_120 with the release's flags; DeepGEMM's calls recorded."""
    recorder = deep_gemm_wheel.Recorder()
    with ExitStack() as stack:
        release = V.Release(root, tmp_path, recorder).start(stack, capture=True)
        metadata = release.indexer_metadata(rows_per_request=rows_per_request, lens=lens, pages=4096 * 4)
    return metadata, [(n, args) for n, args in recorder.calls if n not in ("get_num_sms", "init")]


def test_the_v41_decode_indexer_scores_and_scans_each_row_real_length_under_a_graph(patched_root, tmp_path):
    """A decode replayed from a CUDA graph captured for a 1M context, three requests of 5, 1000 and 70000
    compressed positions."""
    real = torch.tensor([5, 1000, 70000])
    metadata, calls = _metadata(patched_root, tmp_path, real)
    # DeepGEMM's own schedule (split by ceil(len / 128) per row in its sm_120 scheduler) gets the real lengths
    [(name, (lens, block, sms, _))] = calls
    assert name == "get_paged_mqa_logits_metadata" and lens.flatten().tolist() == real.tolist()
    assert block == 64 and sms == V.SMS and metadata.rows_per_chunk is None
    width = metadata.max_compressed_seq_len
    assert width == 4096 * 4 * 64          # the logits buffer is as wide as the graph's table

    topk = V.Calls()
    ns = {"torch": torch, "Optional": __import__("typing").Optional, "topk_transform_paged_bf16": topk.stub("bf16"),
          "topk_transform_paged_v2": topk.stub("v2"), "topk_transform_paged": topk.stub("v1")}
    transform = extract_functions(patched_root / "sglang/srt/layers/attention/dsv4/indexer.py",
                                  ["topk_transform_paged_from_metadata"], ns)["topk_transform_paged_from_metadata"]
    kernels = V.Calls()
    cls = V.full_topk_class(patched_root, kernels)
    data = V.decode_data_class(patched_root)(torch.zeros(3, 1, 64, 64, dtype=torch.int8), torch.zeros(3, 1, 64),
                                              torch.zeros(3, 64), torch.zeros(1))
    indexer = cls(token_to_kv_pool=None, req_to_token=None, use_deep_gemm_prefill=True, use_deep_gemm_decode=True)
    inputs = __import__("types").SimpleNamespace(paged_metadata=metadata, data=data,
                                                  out_page_indices=torch.zeros(3, 512, dtype=torch.int32))
    indexer._deep_gemm_decode(inputs)
    logits_call = [c for c in kernels if c[0] == "deep_gemm_fp4_paged_mqa_logits"][0]
    _, lens, _, _, max_len = logits_call[1][2:]
    assert lens.tolist() == real.tolist() and max_len == width     # scored: each row to its own length
    [(logits, meta, *_)] = [c[1] for c in kernels if c[0] == "topk_transform_paged_from_metadata"]
    transform(logits, meta, inputs.out_page_indices, None)
    [(kind, (_, seq_lens, *_), _)] = topk
    assert kind == "v1" and seq_lens.tolist() == real.tolist()       # scanned: each row to its own length


def test_the_0_5_14_line_has_no_v41_and_its_row_says_so():
    rows = load_models(_series("0.5.14").directory, _series("0.5.14").patches, lambda w: None)
    [row] = [r for r in rows if r.model == "DeepSeek-V4.1-Flash"]
    assert row.reaches == () and "not in sglang 0.5.14" in row.upstream[0]
    assert not pristine_wheel("sglang", "0.5.14").has(V.V41_CONFIG)
    assert pristine_wheel("sglang", "0.5.23").has(V.V41_CONFIG)


def test_a_dspark_verify_step_schedules_each_request_by_its_own_rows_lengths(patched_root, tmp_path):
    """Verify rows (block size + 1 = 7 per request at DSPARK block 6) under a graph: DeepGEMM's schedule gets each
    request's own row lengths (its sm_120 scheduler reads the last row of each request), not the table's width."""
    real = torch.tensor([5, 6, 7, 8, 9, 10, 11, 994, 995, 996, 997, 998, 999, 1000])     # 2 requests x 7 rows
    metadata, calls = _metadata(patched_root, tmp_path, real, rows_per_request=VERIFY_ROWS)
    [(name, (lens, _, _, _))] = calls
    assert name == "get_paged_mqa_logits_metadata"
    assert lens.tolist() == real.view(2, VERIFY_ROWS).tolist() and metadata.rows_per_chunk is None


@pytest.mark.parametrize("rows_per_request", [1, VERIFY_ROWS])
def test_the_pristine_release_gives_the_v41_indexer_no_schedule_on_sm120(pristine_root, tmp_path, rows_per_request):
    """What the former stub (force_deep_gemm_metadata=True) hid: with the release's own flags no schedule is made
    for a decode or a verify step (the model hook's SGLANG_FP8_PAGED_MQA_LOGITS_TORCH, no fp4-indexer flag)."""
    real = torch.arange(1, 2 * rows_per_request + 1) * 100
    metadata, calls = _metadata(pristine_root, tmp_path, real, rows_per_request)
    assert metadata.deep_gemm_metadata is None and calls == []
