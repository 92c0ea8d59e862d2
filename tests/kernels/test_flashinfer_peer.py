"""The FlashInfer 0.7.2 sm_120 decode peer's build pieces, on the CPU: the sha256-checked sources, the
sm_90a source patch on the real 0.7.2 files, its arithmetic (block-scaled FP8 MMA = unscaled MMA then
a power-of-two scale, bit-exact in fp32), and that the patched header compiles for sm_90a (where nvcc is).
The peer's numerics on a GPU: tests/gpu/test_flashinfer_peer_gpu.py."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch

from bench.kernels.peers import flashinfer_sm120_sources as sources
from patchkit import PatchkitError
from patchkit.fetch import fetch

SPEC = sources.load_spec()
HEADER = "flashinfer/data/include/flashinfer/attention/sparse_mla_sm120/arch/mma_sm120.cuh"
BLOCK_SCALED_PTX = '"mma.sync.aligned.kind::mxf8f6f4.block_scale'  # the asm string, not the comment naming it


@pytest.fixture(scope="module")
def flashinfer_wheel() -> Path:
    return fetch(sources.upstream(SPEC, "flashinfer"), log=lambda *_: None)


@pytest.fixture()
def header_tree(flashinfer_wheel, tmp_path) -> Path:
    """The real 0.7.2 kernel headers, unpatched."""
    sources.extract(flashinfer_wheel, ["flashinfer/data/include/flashinfer/attention/sparse_mla_sm120/"], tmp_path)
    return tmp_path


# -- the sources ------------------------------------------------------------------------------------

def test_patch_applies_to_the_real_sources_and_replaces_the_block_scaled_mma(header_tree):
    header = header_tree / HEADER
    before = header.read_text()
    assert BLOCK_SCALED_PTX in before  # 0.7.2 as shipped: the sm_120a-only instruction
    sources.apply_patch(header_tree, sources.HERE / SPEC["patch"])
    after = header.read_text()
    assert BLOCK_SCALED_PTX not in after
    assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in after  # the unscaled MMA stays
    # nothing else in the header moved: every line outside mma_fp8_block_scaled_m16n8k32 is kept
    cut = lambda s: s[: s.index("__device__ __forceinline__ MmaFp8Result mma_fp8_block_scaled")]  # noqa: E731
    assert cut(before) in after
    assert before[before.index("__device__ __forceinline__ MmaBf16Result"):] in after


def test_patch_that_does_not_fit_leaves_the_tree_as_it_was(header_tree):
    sources.apply_patch(header_tree, sources.HERE / SPEC["patch"])
    patched = (header_tree / HEADER).read_bytes()
    with pytest.raises(PatchkitError, match="does not apply"):
        sources.apply_patch(header_tree, sources.HERE / SPEC["patch"])  # already applied
    assert (header_tree / HEADER).read_bytes() == patched


def test_a_wheel_that_does_not_hash_as_pinned_is_refused(flashinfer_wheel, tmp_path, monkeypatch):
    wrong = dict(SPEC, wheels=dict(SPEC["wheels"], flashinfer=dict(SPEC["wheels"]["flashinfer"], sha256="0" * 64)))
    out = tmp_path / "peer"
    with pytest.raises(PatchkitError, match="sha256 mismatch.*expected 0{64}, found " + SPEC["wheels"]["flashinfer"]["sha256"]):
        sources.prepare(out, wrong, log=lambda *_: None)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_prepare_lays_out_the_patched_tree_once(tmp_path):
    out = sources.prepare(tmp_path / "peer", log=lambda *_: None)
    assert BLOCK_SCALED_PTX not in (out / HEADER).read_text()
    for unit in SPEC["sources"]:
        assert (out / "flashinfer/data/csrc" / unit).is_file()
    assert (out / "site/tvm_ffi/include/tvm/ffi/function.h").is_file()
    assert (out / "sglang/kernels/ops/attention/flash_mla_sm120.py").is_file()
    mtime = (out / HEADER).stat().st_mtime_ns
    sources.prepare(out, log=lambda *_: None)  # same wheels, same patch: kept
    assert (out / HEADER).stat().st_mtime_ns == mtime


def test_patch_applies_inside_a_git_checkout(flashinfer_wheel, tmp_path):
    """build/peer-flashinfer sits in the project's checkout: git apply must not take that repository's
    root as the patch's (it then skips every file, silently)."""
    repo = tmp_path / "checkout"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    tree = repo / "build" / "peer"
    sources.extract(flashinfer_wheel, ["flashinfer/data/include/flashinfer/attention/sparse_mla_sm120/"], tree)
    sources.apply_patch(tree, sources.HERE / SPEC["patch"])
    assert BLOCK_SCALED_PTX not in (tree / HEADER).read_text()
    converts = (tree / HEADER.replace("arch/mma_sm120", "compute/packed_to_bf16")).read_text()
    assert "cvt.rn.bf16x2.ue8m0x2" not in converts and "cvt.rn.f16x2.e2m1x2" not in converts
    loads = (tree / HEADER.replace("mma_sm120", "matrix_memory")).read_text()
    assert "ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8" not in loads and "__trap();" in loads


def test_cli_refuses_a_folder_it_did_not_make(tmp_path, capsys):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    assert sources.main(["--out", str(other)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected a folder this command made" in err[0]
    assert [p.name for p in other.iterdir()] == ["keep.txt"]


IMPORT_CHAIN = r"""
import sys
from pathlib import Path
from bench.kernels.peers import flashinfer_sm120 as peer
src = Path(sys.argv[1])
fi = peer._install_flashinfer(src, peer._Library(object()))
import importlib
prepared = importlib.import_module("flashinfer.mla._sparse_mla_sm120._prepared")
assert callable(fi._sparse_mla_sm120_paged_attention) and fi._DECODE_MAX_TOKENS == 64
assert callable(prepared.device_caps) and isinstance(prepared._functional_plans, dict)
try:
    fi.get_sparse_mla_sm120_module().sparse_mla_sm120_dsv41_fp8_quantize_pack()
except NotImplementedError as exc:
    assert "not in the peer library" in str(exc)
else:
    raise AssertionError("a function the library lacks must raise")
import math, logging, torch, triton, triton.language as tl
from harness.upstream import extract_functions
ns = extract_functions(src / peer.SGLANG_FILE, peer.SGLANG_DEFS, {"torch": torch, "triton": triton, "tl": tl,
                       "math": math, "Optional": None, "Tuple": None, "FrozenSet": None, "lru_cache": None,
                       "logger": logging.getLogger("x"), "_sm120_default_backend": "flashinfer"})
assert ns["SM120_DECODE_MAX_TOKENS"] == 64 and ns["_BYTES_PER_DST_PAGE_PADDED"] == 37440
print("ok")
"""


def test_the_peer_loads_the_real_policy_and_sglang_call_path_on_its_stand_ins(tmp_path):
    """FlashInfer 0.7.2's sm_120 policy modules import on the stand-ins (no flashinfer package root), and
    SGLang 0.5.23's FlashInfer branch compiles out of its file: in a child, whose sys.modules it fills."""
    import sys

    out = sources.prepare(tmp_path / "peer", log=lambda *_: None)
    proc = subprocess.run([sys.executable, "-c", IMPORT_CHAIN, str(out)], capture_output=True, text=True,
                          cwd=sources.REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


PAGE_SPLIT = r"""
import sys, math, logging
from pathlib import Path
import torch, triton, triton.language as tl
from bench.kernels.peers import flashinfer_sm120 as peer
from harness.upstream import extract_functions
from serving.mma_decode_cases import make_kv_pool, kernel_view
src = Path(sys.argv[1])
peer._install_sglang_buffers()
ns = extract_functions(src / peer.SGLANG_FILE, peer.SGLANG_DEFS, {"torch": torch, "triton": triton, "tl": tl,
                       "math": math, "Optional": None, "Tuple": None, "FrozenSet": None, "lru_cache": None,
                       "logger": logging.getLogger("x"), "_sm120_default_backend": "flashinfer"})
pool = make_kv_pool(2, 256, torch.Generator().manual_seed(0))
k = kernel_view(pool, 256)
out = ns["_split_kv_pages_to_64"](k.view(torch.uint8), 256, touched_indices=None)
flat = pool.reshape(-1)
for t in (0, 1, 63, 64, 255, 256, 511):
    page, off = divmod(t, 256)
    src_data = pool[page, off*576:(off+1)*576]; src_sc = pool[page, 256*576 + off*8: 256*576+off*8+8]
    dp, do = divmod(t, 64)
    base = out.as_strided((out.shape[0], 37440), (37440, 1))[dp]
    assert torch.equal(base[do*576:(do+1)*576], src_data), t
    assert torch.equal(base[64*576 + do*8: 64*576 + do*8 + 8], src_sc), t
print("ok")
"""


def test_sglangs_page_split_feeds_the_peer_64_token_pages(tmp_path):
    """SGLang 0.5.23's 256 -> 64 token page split (its Triton kernels, here under the interpreter): each
    token's 576 data bytes and 8 scale bytes land where a 64-token page of the same layout keeps them."""
    import os
    import sys

    out = sources.prepare(tmp_path / "peer", log=lambda *_: None)
    env = dict(os.environ, TRITON_INTERPRET=os.environ.get("TRITON_INTERPRET", "1"), PYTHONPATH=str(sources.REPO))
    proc = subprocess.run([sys.executable, "-c", PAGE_SPLIT, str(out)], capture_output=True, text=True,
                          cwd=sources.REPO, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


SPLITS = r"""
import sys
from pathlib import Path
import tvm_ffi
from bench.kernels.peers import flashinfer_sm120 as peer
from bench.kernels.peers.flashinfer_sm120_build import library_path
src = Path(sys.argv[1])
peer._install_flashinfer(src, peer._Library(tvm_ffi.load_module(str(library_path(src, "sm_90a")))))
ex = sys.modules["flashinfer.mla._sparse_mla_sm120._execution"]
model = ex.resolve_model_type(512, "auto")
for tokens, heads in ((16, 16), (64, 8)):
    facts = {}
    for sm in (132, 188):
        plan = ex.resolve_attention(model=model, tokens=tokens, heads=heads, topk=128, extra_topk=512, page_size=64,
            extra_page_size=64, page_stride_bytes=37440, extra_page_stride_bytes=37440, row_stride_bytes=584,
            indices_stride=128, extra_indices_stride=512, lse_stride=heads, has_lengths=True,
            has_extra_lengths=True, has_sink=True, extra_fp4=False, variant=0, precision="default", cpb=0,
            sm_count=sm, max_shared_bytes=peer.SM120_SHARED_OPTIN)
        facts[sm] = dict(plan.inspect())
        f = facts[sm]
        assert f["cpb"] * f["active_splits"] >= 10 > f["cpb"] * (f["active_splits"] - 1), f  # 2 + 8 chunks of 64
        assert f["shared_bytes"] <= peer.SM120_SHARED_OPTIN, f
    assert facts[132]["active_splits"] < facts[188]["active_splits"], facts  # more SMs, more splits
print("ok")
"""


def test_the_split_heuristic_sees_the_sm_count_it_is_given():
    """FlashInfer's C++ decode resolver, from the library the build made (skipped where none was built
    for sm_90a): the SM count it is handed changes the split count, within sm_120's shared memory."""
    import sys

    from bench.kernels.peers.flashinfer_sm120_build import library_path

    src = sources.DEFAULT_OUT
    if not library_path(src, "sm_90a").exists():
        pytest.skip(f"no peer library in {src} (python3 -m bench.kernels.peers.flashinfer_sm120_build)")
    proc = subprocess.run([sys.executable, "-c", SPLITS, str(src)], capture_output=True, text=True, cwd=sources.REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


# -- the arithmetic of the replacement ----------------------------------------------------------------

def _e4m3(gen, shape):
    codes = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # NaN codes
    return codes.view(torch.float8_e4m3fn).float()


def _pow2(e):
    return torch.pow(torch.tensor(2.0, dtype=torch.float64), e.double() - 127).float()


def _mma_fp32(a, b, c):
    """D = A @ B + C accumulated in fp32, k in order (one fixed rounding order for both sides)."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(a.shape[1]):
        acc = acc + a[:, k : k + 1] * b[k : k + 1, :]
    return acc + c


@pytest.mark.parametrize("seed", range(4))
def test_block_scaled_mma_equals_unscaled_mma_times_power_of_two_bit_exact(seed):
    gen = torch.Generator().manual_seed(seed)
    a, b = _e4m3(gen, (16, 32)), _e4m3(gen, (32, 8))
    c = torch.randn(16, 8, generator=gen) * 100
    sa = torch.randint(97, 158, (16,), generator=gen)  # UE8M0 exponents 2^-30 .. 2^30
    sb = torch.randint(97, 158, (8,), generator=gen)
    scaled = _mma_fp32(a * _pow2(sa)[:, None], b * _pow2(sb)[None, :], c)  # what block_scale computes
    product = _mma_fp32(a, b, torch.zeros(16, 8))  # the unscaled MMA into zero
    replaced = product * _pow2(sa)[:, None] * _pow2(sb)[None, :] + c
    assert torch.equal(scaled.view(torch.int32), replaced.view(torch.int32))


def test_the_shuffle_sources_pick_each_fragments_row_and_column_scale():
    """The lanes the patch reads scales from, against the layout FlashInfer fills them in: lane t holds
    SF_A of row t/4 + 8*(t&1) (warp_tiles.cuh) and SF_B of column t/4; its C fragment is rows t/4 and
    t/4+8 by columns 2(t%4) and 2(t%4)+1."""
    sf_a_of_lane = [(t >> 2) + 8 * (t & 1) for t in range(32)]
    sf_b_of_lane = [t >> 2 for t in range(32)]
    for t in range(32):
        row, col = t >> 2, (t & 3) * 2  # as in the patch
        assert sf_a_of_lane[row * 4] == t >> 2
        assert sf_a_of_lane[row * 4 + 1] == (t >> 2) + 8
        assert sf_b_of_lane[col * 4] == 2 * (t & 3)
        assert sf_b_of_lane[col * 4 + 4] == 2 * (t & 3) + 1
    patch = (sources.HERE / SPEC["patch"]).read_text()
    for source in ("row * 4)", "row * 4 + 1)", "col * 4)", "col * 4 + 4)"):
        assert source in patch


def test_the_fp4_and_ue8m0_conversions_that_replace_cvt_are_exact():
    """The DSV4.1 kernels' cvt .e2m1x2 / .ue8m0x2 (sm_100a / sm_120a only), replaced by table and bits:
    every code gives the value the format defines."""
    import re

    import numpy as np

    patch = (sources.HERE / SPEC["patch"]).read_text()
    tables = re.findall(r"kF16\[8\] = \{([^}]*)\}", patch)
    assert len(tables) == 2 and tables[0] == tables[1]
    table = [int(x, 16) for x in tables[0].split(",")]
    for code in range(16):
        e, m, sign = (code >> 1) & 3, code & 1, -1.0 if code & 8 else 1.0
        value = sign * (0.5 * m if e == 0 else 2.0 ** (e - 1) * (1 + 0.5 * m))  # E2M1: bias 1, one mantissa bit
        bits = table[code & 7] | (0x8000 if code & 8 else 0)
        assert np.array([bits], dtype=np.uint16).view(np.float16)[0] == value, code
    assert "code == 0 ? 0x0040u : code == 0xFF ? 0x7FFFu : uint32_t(code) << 7" in patch
    for code in range(256):
        bits = 0x0040 if code == 0 else 0x7FFF if code == 0xFF else code << 7
        got = torch.tensor([bits], dtype=torch.int16).view(torch.bfloat16).double().item()
        if code == 0xFF:
            assert got != got  # UE8M0 0xFF is NaN
        else:
            assert got == 2.0 ** (code - 127), code


# -- the patched header compiles for sm_90a --------------------------------------------------------

PROBE = r"""
#include <flashinfer/attention/sparse_mla_sm120/arch/mma_sm120.cuh>
__global__ void probe(const uint32_t* x, const uint8_t* s, float* out) {
  const int t = threadIdx.x;
  MmaFp8Result r = mma_fp8_block_scaled_m16n8k32(x[0], x[1], x[2], x[3], x[4], x[5], 0.f, 0.f, 0.f, 0.f,
                                                 s[t], s[32 + t]);
  out[t] = r.d0 + r.d1 + r.d2 + r.d3;
}
"""


def _compile_probe(tree: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    cu = tmp_path / "probe.cu"
    cu.write_text(PROBE)
    return subprocess.run([shutil.which("nvcc"), "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-cubin",
                           f"-I{tree / 'flashinfer/data/include'}", str(cu), "-o", str(tmp_path / "probe.cubin")],
                          capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_block_scaled_mma_compiles_for_sm90a_only_once_patched(header_tree, tmp_path):
    before = _compile_probe(header_tree, tmp_path)
    assert before.returncode != 0 and "sm_90a" in before.stderr  # the shipped instruction: sm_120a only
    sources.apply_patch(header_tree, sources.HERE / SPEC["patch"])
    after = _compile_probe(header_tree, tmp_path)
    assert after.returncode == 0, after.stderr[-2000:]
