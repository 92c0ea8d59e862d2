"""bench/kernels/v41_candidate_gpu.py on a CPU (Triton's interpreter, set by tests/conftest.py): what the GPU mode
times is 0.5.23's own code out of the tree slice a GPU machine gets. The release's generic candidate path runs
(source and consumer, decode and a DSPARK verify batch), and the real-length stand-in's scorer gives the generic
path's scores bit for bit over each row's real length, so the two paths time the same scores."""
from __future__ import annotations

import types

import pytest
import torch

from bench.airgapped import tree_slice
from bench.kernels import v41_candidate_gpu as G
from bench.kernels.v41_candidate_cost import V41_FLASH

# the interpreter evaluates exp2 of masked-off lanes' scale bytes too; the visible scores are checked finite below
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")

# small enough for the interpreter, with a block top-k that keeps fewer blocks than a row has
SMALL = {**V41_FLASH, "candidate_topk_blocks": 8, "index_topk": 16}
WIDTH = 256


@pytest.fixture(scope="module")
def fns(pristine_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("v41-slice")
    tree_slice.write_slice(pristine_root, out)
    return G.release_functions(out)


@pytest.fixture(autouse=True)
def _sm_count(monkeypatch):
    """fp4_index_logits_paged asks the device for its SM count (a hardware query, the only thing stubbed)."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(multi_processor_count=4))


@pytest.mark.parametrize("requests,per,real", [(2, 1, WIDTH), (2, 7, 100)])
def test_the_generic_path_runs_and_the_stand_in_scores_what_it_scores(fns, requests, per, real):
    pool = G.Pool(requests, WIDTH, torch.device("cpu"))
    shape = dict(width=WIDTH, real=real, requests=requests, rows=requests * per, kind="verify" if per > 1 else "decode")
    inputs = G.make_inputs(pool, shape, SMALL)
    source, consumer = G.generic_calls(fns, pool, inputs, SMALL)
    published = source()
    assert published.blocks.shape == (shape["rows"], SMALL["candidate_topk_blocks"])
    consumer()
    picked = inputs.out_page_indices
    req = inputs.req_rows[:, None]
    lens = inputs.positions + 1
    assert ((picked >= req * WIDTH) & (picked < req * WIDTH + lens[:, None])).all()     # slots of each row's own request
    # a consumer keeps only positions inside its published blocks
    blocks = (picked - req * WIDTH) // SMALL["candidate_block_size"]
    assert all(set(b.tolist()) <= set(p.tolist()) for b, p in zip(blocks, published.blocks))

    scores = fns["decode_scores"](inputs=inputs, token_to_kv_pool=pool, req_to_token=pool.req_to_token).scores
    stand_in = fns["fp4_index_logits_paged"](inputs.indexer.q, inputs.indexer.w, inputs.req_rows, pool.req_to_token,
                                            lens.to(torch.int32), pool.table, G.INDEX_PAGE, WIDTH, 1)
    visible = torch.arange(WIDTH)[None, :] < lens[:, None]
    assert torch.isfinite(scores[visible]).all()
    assert torch.equal(scores[visible], stand_in[visible])
    assert (scores[~visible] == -torch.inf).all()        # the generic path writes all W columns


def test_the_real_length_calls_run(fns):
    pool = G.Pool(2, WIDTH, torch.device("cpu"))
    inputs = G.make_inputs(pool, dict(width=WIDTH, real=120, requests=2, rows=14, kind="verify"), SMALL)
    source, consumer = G.real_length_calls(fns, pool, inputs, SMALL)
    assert source().shape == (14, SMALL["candidate_topk_blocks"])
    consumer()
    picked = inputs.out_page_indices
    assert ((picked >= 0) & (picked < (inputs.positions + 1)[:, None])).all()        # request-local positions


def test_a_tree_without_the_files_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert G.run(tmp_path / "out", tmp_path, 1.0) == 2
    assert capsys.readouterr().err.strip() == (f"v41_candidate_gpu: expected {G.SCORING} in {tmp_path}, "
                                               "found no such file")
    assert not (tmp_path / "out").exists()


def test_every_kernel_taken_from_the_release_names_its_module(fns):
    """Triton's code generator reads a called kernel's __module__ as a string when it compiles for a GPU (not under
    the interpreter): the definitions taken out of the release's files need a module name, or the first GPU
    compile fails ("'NoneType' object has no attribute 'startswith'", as on an H100)."""
    # a JITFunction (an InterpretedFunction under the interpreter) wraps the Python function as .fn
    taken = fns["fp4_index_logits_paged"].__globals__       # the namespace the release's fp4 indexer went into
    kernels = {k: f.fn for k, f in taken.items() if callable(getattr(f, "fn", None))}
    assert kernels, "expected the release's Triton kernels among the functions"
    unnamed = {k for k, fn in kernels.items() if not isinstance(fn.__module__, str)}
    assert not unnamed, f"expected each kernel's __module__ as a string, found None for {sorted(unnamed)}"
