"""bench/airgapped/tree_slice.py: what a GPU machine without the 0.5.23 wheels gets, and that the P1 and P3 benches run
from it (bench_mma_decode --tree, bench_mhc_pre --pristine-root/--patched-root), on a CPU (Triton's interpreter)."""
from __future__ import annotations

import hashlib

import pytest
import torch

from bench.kernels import bench_mma_decode as bm
from bench.airgapped import tree_slice
from harness import dsv4_indexer_cases as C
from harness.line_files import line_path
from patchkit.lockfile import load_lock
from tests.conftest import REPO
from tests.line_0_5_23.conftest import PATCH_LINE

LOCK = load_lock(REPO / "pin.lock", PATCH_LINE)
KERNEL = line_path(LOCK, bm.KERNEL)


@pytest.fixture(scope="module")
def slices(pristine_root, patched_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("slice")
    assert tree_slice.main([str(out), "--pristine-root", str(pristine_root), "--patched-root", str(patched_root)]) == 0
    return out


def test_each_slice_holds_the_files_the_benches_read_with_their_sha256(slices, pristine_root, patched_root):
    for name, root in (("pristine", pristine_root), ("patched", patched_root)):
        lines = (slices / name / tree_slice.STAMP).read_text().splitlines()
        files = [line.split("  ", 1)[1] for line in lines]
        for line, rel in zip(lines, files):
            assert line.split("  ")[0] == hashlib.sha256((root / rel).read_bytes()).hexdigest()
            assert (slices / name / rel).read_bytes() == (root / rel).read_bytes()
        assert {C.MODEL, "sglang/srt/environ.py", "sglang/srt/utils/custom_op.py"} <= set(files)
    patched = (slices / "patched" / tree_slice.STAMP).read_text()
    assert KERNEL in patched and C.MHC_PRE_TRITON_OPS not in patched   # P3 is retired on this line
    pristine = (slices / "pristine" / tree_slice.STAMP).read_text()
    assert KERNEL not in pristine          # the overlay files exist in the patched tree only


@pytest.mark.parametrize("rows", [14, 66])    # a verify batch (2 x 7) and a row count past the decode kernel's 64
def test_ours_from_the_slice_matches_float64(slices, rows):
    mma = bm.load_ours(LOCK, slices / "patched")
    assert mma.__file__ == str(slices / "patched" / KERNEL)
    assert mma.gluon.__file__ == str(slices / "patched" / KERNEL).replace("_mma.py", "_mma_gluon.py")
    gen = torch.Generator().manual_seed(rows)
    pools = (bm.make_pool(2, 256, gen), bm.make_pool(4, 64, gen))
    inp = bm.Inputs(bm.Shape(rows, 8, 64, 64, kind="verify"), pools, gen)
    out = mma.flash_mla_sparse_decode_mma(*inp.args(0))[0]
    assert out.shape == (rows, 1, 8, 512)
    assert bm.rel_err(out, bm.reference_f64(inp, 0)) < 2.0 ** -7


def test_load_ours_names_a_slice_without_the_kernel(tmp_path):
    with pytest.raises(SystemExit, match=r"--tree: expected .*flash_mla_sm120_mma.py \(python3 -m bench.airgapped.tree_slice"):
        bm.load_ours(LOCK, tmp_path)


def test_hc_pre_of_both_slices_compiles_and_agrees(slices):
    """bench_mhc_pre's two functions, out of the slices, at a small hidden size: the pinned fp32 one and the patched
    tree's, which is the same release code since P3 was retired on this line (patch set 0.1.10)."""
    gen = torch.Generator().manual_seed(0)
    hc, hidden, tokens = 4, 256, 6
    x = torch.randn(tokens, hc, hidden, generator=gen).to(torch.bfloat16)
    hc_fn = torch.randn((2 + hc) * hc, hc * hidden, generator=gen) * (hc * hidden) ** -0.5
    pinned = C.hc_pre_torch_impl(slices / "pristine")(x, hc_fn)[1]
    patched = C.hc_pre_torch_impl(slices / "patched")(x, hc_fn)[1]
    assert pinned.reshape(tokens, -1).shape == patched.reshape(tokens, -1).shape == (tokens, (2 + hc) * hc)
    assert torch.equal(patched, pinned)      # the release's own fp32 mixing on both sides


def test_a_folder_with_files_is_refused_and_left_as_it_was(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine\n")
    assert tree_slice.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"tree_slice: expected an empty or absent folder, found {tmp_path} "
                                               "with files in it")
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"] and (tmp_path / "keep.txt").read_text() == "mine\n"
