"""Files and bytes of one unpacked pristine tree per release line: what tests/conftest.py's pristine_root (and,
patched, patched_root) puts in pytest's temporary directory, once per line and worker, for the whole run.

    .venv/bin/python bench/runs/2026-12-07-pytest-temp-disk/tree_sizes.py SCRATCH_DIR
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from patchkit.fetch import fetch  # noqa: E402
from patchkit.lockfile import load_lock, lock_lines  # noqa: E402
from patchkit.pristine import Pristine  # noqa: E402

scratch = Path(sys.argv[1])
pin = Path(__file__).resolve().parents[3] / "pin.lock"
for line in lock_lines(pin):
    root = scratch / line
    for name, up in load_lock(pin, line).upstreams.items():
        Pristine(fetch(up, log=lambda *_: None)).unpack(root, root=up.root)
    files = [p for p in root.rglob("*") if p.is_file()]
    print(f"line {line}: {len(files)} files, {sum(os.path.getsize(p) for p in files)} bytes")
