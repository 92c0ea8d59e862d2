"""Run an upstream-style test file (`python3 FILE`, as SGLang's CI runs its registered tests) against a tree
of the upstream package, with this machine's python:

    python3 -m harness.upstream_test TREE FILE [unittest args]

TREE is the directory holding `sglang/` (a checkout's `python/`, or a patched site directory). The `sglang`
package is entered without running its `__init__.py`, which imports the serving front end (IPython on 0.5.23,
torchvision on 0.5.14, and other dependencies a kernel test needs none of and the CPU test venv does not have);
every module the test imports is TREE's own file. So is `register_custom_op` (sglang/srt/utils/custom_op.py),
whose package `sglang.srt.utils` star-imports the serving runtime: it comes with TREE's common.py's
direct_register_custom_op alone (harness.upstream.release_custom_op), which registers ops for CUDA as upstream
does, nothing for the CPU.
Exit status: the test file's.
"""
from __future__ import annotations

import runpy
import sys
import types
from pathlib import Path

from harness.upstream import release_custom_op


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not (Path(argv[0]) / "sglang").is_dir() or not Path(argv[1]).is_file():
        print("usage: python3 -m harness.upstream_test TREE FILE [args]  (TREE holds sglang/, FILE a test file)",
              file=sys.stderr)
        return 2
    tree, test, rest = Path(argv[0]).resolve(), Path(argv[1]).resolve(), argv[2:]
    package = types.ModuleType("sglang")
    package.__path__ = [str(tree / "sglang")]
    sys.modules["sglang"] = package
    sys.argv = [str(test), *rest]
    try:
        with release_custom_op(tree=tree):
            runpy.run_path(str(test), run_name="__main__")
    except SystemExit as exc:          # unittest.main() ends with sys.exit(status)
        return exc.code if isinstance(exc.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
