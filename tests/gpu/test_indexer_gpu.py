"""P4 on a GPU: the length-bounded indexer captured in a CUDA graph, replayed with other lengths.

One capture at a fixed "context" width, replays with new seq_lens written into the captured
buffer (as SGLang's decode graphs do); every replay must give the pinned upstream fallback's
logits over [:seq_len] (fp32 reference, same tolerance as the CPU test), -inf after seq_len
inside the last page, and with SGLANG_SM120_INDEXER_FILL_TAIL semantics -inf on the whole tail.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness import dsv4_indexer_cases as C
from harness.upstream import load_module

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

REPO = Path(__file__).resolve().parents[2]
MATCH_REL = 2.0 ** -16
BATCH, WIDTH = 8, 512            # 32768 c4 positions (a 128K-token context)


OVERLAY = load_module(REPO / "overlay" / "0.5.14" / C.TRITON_INDEXER)


@pytest.fixture(scope="module")
def kernel():
    return OVERLAY.fp8_paged_mqa_logits_triton


@pytest.fixture(scope="module")
def case():
    gen = torch.Generator(device="cuda").manual_seed(5)
    num_pages = BATCH * WIDTH
    cache = C.make_indexer_cache(num_pages, gen, device="cuda")
    q_fp8, weight = C.make_indexer_query(BATCH, gen, device="cuda")
    page_table = torch.randperm(num_pages, generator=gen, device="cuda").view(BATCH, WIDTH).int()
    return q_fp8, cache, weight, page_table


LENGTH_SETS = [
    [1, 64, 65, 127, 128, 4000, 32767, 32768],
    [32768] * BATCH,
    [513, 1, 1, 20000, 64 * 300 + 1, 7, 1024, 2],
]


@pytest.mark.parametrize("config", [None] + sorted(OVERLAY.INDEXER_CONFIGS))
@pytest.mark.parametrize("fill_tail", [False, True])
def test_graph_replay_matches_upstream_fallback(kernel, case, pristine_root, fill_tail, config):
    """config None: what the function picks (batch 8: SMALL_BATCH_CONFIG); then every config in the
    table, which pick_config may choose by batch and GPU."""
    q_fp8, cache, weight, page_table = case
    max_seq_len = WIDTH * C.PAGE
    upstream = C.indexer_function(pristine_root)
    seq_lens = torch.ones(BATCH, 1, dtype=torch.int32, device="cuda")

    def step():
        return kernel(q_fp8, cache, weight, seq_lens, page_table, max_seq_len, fill_tail=fill_tail, config=config)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()                                     # compile outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()

    s, _, kscale = C.reference_scores(q_fp8, cache, weight, page_table, max_seq_len)
    tol = C.logit_bound(s, weight, kscale, MATCH_REL)
    for lengths in LENGTH_SETS:
        seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32).view(BATCH, 1))
        out.fill_(float("nan"))                    # nothing stale may pass for a result
        graph.replay()
        expected = upstream(q_fp8, cache, weight, seq_lens, page_table, None, max_seq_len, False)
        torch.cuda.synchronize()
        for b, length in enumerate(lengths):
            diff = (out[b, :length].double() - expected[b, :length].double()).abs()
            assert (diff <= tol[b, :length]).all(), f"lengths {lengths}, row {b}: differs from upstream"
            end = max_seq_len if fill_tail else -(-length // C.PAGE) * C.PAGE
            assert torch.isneginf(out[b, length:end]).all(), f"lengths {lengths}, row {b}: tail not -inf"
