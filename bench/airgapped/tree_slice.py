"""The files of a line's pristine and patched trees that the GPU benches read, without the two wheels.

    python3 -m bench.airgapped.tree_slice OUT [--line NAME]   # OUT/pristine, OUT/patched, each with SLICE.sha256
                                                              # (default: the newest line, or PATCHKIT_LINE)

A GPU machine without the package index gets the release's sources this way: a few hundred KB instead of the
pinned sglang and flashinfer wheels, which do not fit beside a carried Triton. What each bench reads:
- bench_mma_decode --tree OUT/patched: the MMA kernel file and the release's register_custom_op (custom_op.py,
  the kernel_api_logging it imports, common.py);
- bench_mhc_pre --pristine-root OUT/pristine --patched-root OUT/patched: deepseek_v4.py (hc_pre_torch_impl is
  compiled out of it), environ.py (its switches), the fused MHC-pre kernel file, register_custom_op's files.
The dispatcher and the per-head kernel come too, so that 0.5.23's flash_mla_with_kvcache_sm120 can be loaded
from the slice as tests/line_0_5_23/p1_tree.py does; and the V4.1 candidate indexer's files
(bench/kernels/v41_candidate_gpu.py TREE_FILES) for `v41_candidate_cost --gpu`.
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from pathlib import Path

from bench.kernels.v41_candidate_gpu import TREE_FILES as V41_CANDIDATE_FILES
from harness.upstream import release_custom_op_files

FILES = (
    "sglang/kernels/ops/attention/flash_mla_sm120.py",
    "sglang/kernels/ops/attention/flash_mla_sm120_triton.py",
    "sglang/kernels/ops/attention/flash_mla_sm120_mma.py",
    "sglang/kernels/ops/attention/flash_mla_sm120_mma_gluon.py",
    "sglang/kernels/ops/layernorm/mhc_pre_triton.py",
    "sglang/srt/environ.py",
    "sglang/srt/models/deepseek_v4.py",
    *V41_CANDIDATE_FILES,
)
STAMP = "SLICE.sha256"


def write_slice(root: Path, out: Path) -> list[str]:
    """Copy FILES and the custom-op files present in `root` to `out`; OUT/SLICE.sha256 lists them (sha256sum
    format). Returns those lines."""
    root, out = Path(root), Path(out)
    lines = []
    for rel in (*FILES, *release_custom_op_files(root)):
        if (root / rel).is_file():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, out / rel)
            lines.append(f"{hashlib.sha256((root / rel).read_bytes()).hexdigest()}  {rel}")
    (out / STAMP).write_text("\n".join(lines) + "\n")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="an empty or absent folder")
    ap.add_argument("--pristine-root", type=Path, help="an unpacked pristine tree (default: built from the cache)")
    ap.add_argument("--patched-root", type=Path, help="the same tree with the series applied")
    ap.add_argument("--line", help="the release line of pin.lock whose trees are built (default: the newest, or PATCHKIT_LINE)")
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        print(f"tree_slice: expected an empty or absent folder, found {args.out} with files in it", file=sys.stderr)
        return 2
    from harness.dsv4_indexer_cases import upstream_trees

    pristine, patched = upstream_trees(args.pristine_root and str(args.pristine_root),
                                       args.patched_root and str(args.patched_root), args.line)
    for name, root in (("pristine", pristine), ("patched", patched)):
        lines = write_slice(root, args.out / name)
        size = sum((args.out / name / line.split("  ", 1)[1]).stat().st_size for line in lines)
        print(f"{args.out / name}: {len(lines)} files, {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
