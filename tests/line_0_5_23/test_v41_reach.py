"""The per-model reach rows of patches/0.5.23/sglang/reach.toml (and the 0.5.14 line's V4.1 row), held by 0.5.23's
own dispatch functions driven on the CPU as an sm_120 card (capability 12.0): the sparse-attention entry
flash_mla_with_kvcache_sm120 at each forward's row counts, the V4.1 indexer factories make_full_topk_indexer and
make_candidate_indexer, V4.1's MHC mixing dispatch; and the V4.1 indexer's decode metadata under a CUDA graph
(does its work follow each row's real length or the graph's width?)."""
from __future__ import annotations

import torch

from harness.upstream import extract_functions
from patchkit.rebase.reach import load_models, load_partly
from tests.conftest import pristine_wheel
from tests.line_0_5_23 import v41_tree as V
from tests.rebase.test_rebase_reach import _reader, _series

MMA, DEFAULT, GLUON, P3 = ("dsv4: an mma choice for the sm_120 sparse decode backend",
                           "dsv4: make mma the sm_120 sparse decode default",
                           "dsv4: a Gluon kernel for the sm_120 mma decode backend",
                           "dsv4: run the MHC-pre mixing linear in bf16 on tensor cores")
# Each forward's query rows per sparse-attention call: decode B 1-128; DSPARK block 6 (verify B x 6, draft-extend
# up to B x 6, B 1-64); prefill chunks of 2048 rows; V4's MTP verify and prefill above 64 rows.
FORWARDS = {
    ("DeepSeek-V4.1-Flash", "decode, B 1-128"): range(1, 129),
    ("DeepSeek-V4.1-Flash", "DSPARK target-verify, B 1-64 x 6 rows"): [b * 6 for b in range(1, 65)],
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


def _observed(pristine_root, patched_root) -> dict:
    """(model, forward) -> (patch subjects it runs, upstream paths), from the release's dispatch on sm_120."""
    calls = V.Calls()
    factories = V.indexer_factories(pristine_root, calls)
    with V.capability():
        full = factories("make_full_topk_indexer", token_to_kv_pool=None, req_to_token=None)
        candidate = factories("make_candidate_indexer", token_to_kv_pool=None, req_to_token=None, page_size=256,
                              candidate_topk_blocks=8, candidate_block_size=64)
    refused = V.indexer_factories(pristine_root, V.Calls(), paged_sparse=False)
    with V.capability():
        try:
            refused("make_candidate_indexer", token_to_kv_pool=None, req_to_token=None, page_size=256,
                    candidate_topk_blocks=8, candidate_block_size=64)
            refuses = False
        except RuntimeError:
            refuses = True
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
            if decode and full.use_deep_gemm_decode:
                upstream.append("full top-k indexer (ratio-1/2 layers): DeepGEMM fp8_fp4_paged_mqa_logits "
                                "(sm_120 fp4 kernel), work per row's real length")
            elif not decode and full.use_deep_gemm_prefill:
                upstream.append("full top-k indexer (ratio-1/2 layers): DeepGEMM fp8_fp4_mqa_logits (dense prefill scoring)")
            if [type(b).__name__ for b in candidate] == ["SparseTableBackend"] * 2 and refuses:
                upstream.append("candidate indexer: DeepGEMM paged sparse MQA logits (sparse table), refused at start "
                                "without them")
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


def test_each_model_row_is_what_the_release_dispatch_does_on_sm120(pristine_root, patched_root):
    series = _series("0.5.23")
    names = {p.subject: p.name for p in series.patches}
    rows = {(r.model, r.forward): r for r in load_models(series.directory, series.patches, lambda w: None)}
    observed = _observed(pristine_root, patched_root)
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


def test_the_v41_decode_indexer_scores_and_scans_each_row_real_length_under_a_graph(pristine_root):
    """A decode replayed from a CUDA graph captured for a 1M context: the page table is the graph's (4096 pages
    of 256 tokens, 64-slot index pages at ratio 1), three requests of 5, 1000 and 70000 compressed positions."""
    calls = V.Calls()
    build = V.paged_indexer_metadata(pristine_root, calls)
    real = torch.tensor([5, 1000, 70000])
    with V.capability():
        metadata = build(page_size=256, compressed_page_size=64, page_table=torch.zeros(3, 4096 * 4, dtype=torch.int32),
                         compressed_seq_lens=real, use_topk_v2=False, force_deep_gemm_metadata=True, compress_ratio=1)
    # DeepGEMM's schedule (split by ceil(len / 128) per row in its sm_120 scheduler) gets the real lengths
    [(name, (lens, block, _), _)] = calls
    assert name == "deep_gemm.get_paged_mqa_logits_metadata" and lens.flatten().tolist() == real.tolist()
    assert block == 64 and metadata.rows_per_chunk is None
    width = metadata.max_compressed_seq_len
    assert width == 4096 * 4 * 64          # the logits buffer is as wide as the graph's table

    topk = V.Calls()
    ns = {"torch": torch, "Optional": __import__("typing").Optional, "topk_transform_paged_bf16": topk.stub("bf16"),
          "topk_transform_paged_v2": topk.stub("v2"), "topk_transform_paged": topk.stub("v1")}
    transform = extract_functions(pristine_root / "sglang/srt/layers/attention/dsv4/indexer.py",
                                  ["topk_transform_paged_from_metadata"], ns)["topk_transform_paged_from_metadata"]
    kernels = V.Calls()
    cls = V.full_topk_class(pristine_root, kernels)
    data = V.decode_data_class(pristine_root)(torch.zeros(3, 1, 64, 64, dtype=torch.int8), torch.zeros(3, 1, 64),
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


def test_a_dspark_verify_step_schedules_each_request_by_its_own_rows_lengths(pristine_root):
    """Verify rows (rows_per_request > 1, 6 for DSPARK block 6) under a graph: DeepGEMM's schedule gets each
    request's own row lengths (its sm_120 scheduler reads the last row of each request), not the table's width."""
    calls = V.Calls()
    build = V.paged_indexer_metadata(pristine_root, calls)
    real = torch.tensor([5, 6, 7, 8, 9, 10, 995, 996, 997, 998, 999, 1000])       # 2 requests x 6 verify rows
    with V.capability():
        metadata = build(page_size=256, compressed_page_size=64, page_table=torch.zeros(12, 4096 * 4, dtype=torch.int32),
                         compressed_seq_lens=real, use_topk_v2=False, force_deep_gemm_metadata=True, compress_ratio=1,
                         rows_per_request=6)
    [(_, (lens, _, _), _)] = calls
    assert lens.tolist() == real.view(2, 6).tolist() and metadata.rows_per_chunk is None
