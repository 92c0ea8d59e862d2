"""The sm_12x candidate indexer's decode selection (dense_blocks.py of the patched 0.5.23 tree: the source's
paged_topk_block_ids, the consumer's topk_among_blocks, the positions mapped to pool slots) against the sparse
table's semantics computed in float64: a source keeps the blocks of 8 with the largest maximum among its row's
first `len` scores, its newest block always; a consumer takes its top-k among the positions of those blocks below
its own length. Scores past a row's length are garbage (DeepGEMM does not clean them) and must never be chosen.
Red on the pristine release: it has no such selection (make_candidate_indexer raises on sm_12x instead)."""
from __future__ import annotations

import ast
import typing

import torch

from harness.upstream import extract_functions
from serving.field_indexer import sparse_table_set
from tests.line_0_5_23.v41_tree import CANDIDATE_BLOCKS, DENSE_BLOCKS, amax8_varlen

BLOCK = 8


def _selection(root):
    ns = {"torch": torch, "F": torch.nn.functional, "Optional": typing.Optional, "amax8_varlen": amax8_varlen}
    extract_functions(root / CANDIDATE_BLOCKS, ["topk_among_blocks"], ns)
    names = [n.name for n in ast.parse((root / DENSE_BLOCKS).read_text()).body if isinstance(n, ast.FunctionDef)]
    wanted = [n for n in ("paged_topk_block_ids", "_positions_to_pool_slots") if n in names]
    extract_functions(root / DENSE_BLOCKS, wanted, ns)
    return ns


def _reference(scores, lens, topk_blocks, k):
    """float64: per row, the set of positions the sparse table selects (field-check's candidate rows judge the
    same functions on a GPU with this reference)."""
    return [set(sparse_table_set(row, n, topk_blocks, k, BLOCK)[1].tolist()) for row, n in zip(scores, lens.tolist())]


def test_the_paged_block_selection_is_the_sparse_table_set(patched_root):
    release = _selection(patched_root)
    torch.manual_seed(0)
    width, topk_blocks, k = 2048, 16, 32                # a graph's width, far above every row's length
    lens = torch.tensor([5, 64, 129, 300, 1000, 1999], dtype=torch.int32)
    scores = torch.randn(lens.numel(), width, dtype=torch.float32)
    past = torch.arange(width)[None, :] >= lens[:, None]
    scores = scores.masked_fill(past, 1e9)             # garbage past each row's length, larger than any score
    blocks = release["paged_topk_block_ids"](scores, lens, topk_blocks)
    positions = release["topk_among_blocks"](scores, lens, blocks, k, block_size=BLOCK)
    for b, want in enumerate(_reference(scores, lens, topk_blocks, k)):
        got = set(positions[b][positions[b] >= 0].tolist())
        assert got == want, b
        kept = set(blocks[b][blocks[b] >= 0].tolist())
        assert (int(lens[b]) - 1) // BLOCK in kept           # the newest block, always
        assert len(kept) == min(topk_blocks, -(-int(lens[b]) // BLOCK))
    # as pool slots through the row's page table (64-slot index pages)
    table = torch.arange(lens.numel() * (width // 64), dtype=torch.int32).view(lens.numel(), -1).flip(1).contiguous()
    slots = release["_positions_to_pool_slots"](positions, table, 64)
    pick = positions.clamp_min(0)
    want = torch.where(positions >= 0, table.gather(1, pick // 64).long() * 64 + pick % 64, -1)
    assert torch.equal(slots.long(), want)


def test_the_pristine_release_has_no_paged_block_selection(pristine_root):
    assert "paged_topk_block_ids" not in _selection(pristine_root)
