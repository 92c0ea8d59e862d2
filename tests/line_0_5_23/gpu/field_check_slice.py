"""field-check's kernel stages for the 0.5.23 line on a GPU machine without its runtime: the line's own
flash_mla_with_kvcache_sm120 out of a tree slice (as tests/line_0_5_23/gpu/ loads it, tests/line_0_5_23/p1_tree.py)
and the V4.1 indexer's functions out of the same slice (tests/line_0_5_23/indexer_tree.py: amax8_varlen, a JIT
module of the runtime, by its contract in torch, each candidate row says so), the report written as
`apply.py field-check` writes it. The server stage needs 0.5.23's runtime and is skipped.

    python3 -m tests.line_0_5_23.gpu.field_check_slice SLICE OUT_DIR [BUDGET_S]

SLICE: `python -m tests.line_0_5_23.p1_tree slice build/site-0.5.23 build/p1-slice-0.5.23` made where the wheels
are (checked here against its SLICE.sha256). Exit 2 without a CUDA GPU, as field-check.
"""
from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

from patchkit.engine import Engine
from serving import field_check as F, field_rows as R
from tests.line_0_5_23 import p1_tree as T

REPO = Path(__file__).resolve().parents[3]
LINE = "0.5.23"


class SliceCall:
    """The line's call out of a tree slice: p1_tree.dispatcher with the backend set, its kernels resolved to the
    slice's own around each call."""

    def __init__(self, root: Path):
        self.root, self.line = Path(root), R.LINES[LINE]
        self.where = f"0.5.23's {T.DISPATCHER} out of a tree slice"

    def load(self, backend: str):
        return T.dispatcher(self.root, backend)

    def calling(self, module):
        return T.with_kernels(module)

    def indexer_parts(self):
        from tests.line_0_5_23 import indexer_tree

        return indexer_tree.parts(self.root)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python3 -m tests.line_0_5_23.gpu.field_check_slice SLICE OUT_DIR [BUDGET_S] "
              f"(expected two or three arguments, found {len(argv)})", file=sys.stderr)
        return 2
    try:
        torch = F.require_cuda()
    except F.NoCuda as exc:
        print(f"field-check: {exc}: it runs on an NVIDIA GPU (docs/field_check.md)", file=sys.stderr)
        return 2
    os.environ["P1_TREE"] = argv[0]
    from tests.line_0_5_23.gpu.test_p1_mma_backend_gpu import slice_root

    root = slice_root()            # every file against SLICE.sha256, one line naming the first that differs
    engine = Engine.from_repo(REPO, read_only=True, line=LINE)
    report = F.new_report(engine.patch_set(), LINE, dt.date.today())
    out = Path(argv[1])
    budget = float(argv[2]) if len(argv) == 3 else F.KERNEL_BUDGET_S
    F.run(report, SliceCall(root), torch, out, print, kernel_budget=budget,
          attestation_line="attestation: none (a tree slice of the patched 0.5.23 tree, checked against its SLICE.sha256)")
    report["stages"]["server"] = {"status": "skipped", "reason": "a tree slice: 0.5.23's runtime is not installed here"}
    js, md = F.write_report(report, out, F.private_words())
    print(f"field-check: report {js} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
