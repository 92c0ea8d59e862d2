"""bench/airgapped/release_slice.py: the release's register_custom_op files, alone in a folder, are the pinned wheel's bytes,
and an overlay kernel loaded with that folder (a bench's --release-tree) registers its op through them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.airgapped import release_slice
from harness.upstream import _release_reader

REPO = Path(__file__).resolve().parents[2]
MMA = REPO / "overlay/0.5.14/sglang/srt/layers/attention/flash_mla_sm120_mma.py"


def test_the_slice_holds_the_pinned_wheels_custom_op_files_byte_for_byte(tmp_path):
    files = release_slice.write_slice("0.5.14", tmp_path)
    read, _ = _release_reader(None, "0.5.14")
    assert files == ["sglang/kernel_api_logging.py", "sglang/srt/utils/common.py", "sglang/srt/utils/custom_op.py"]
    for rel in files:
        assert (tmp_path / rel).read_text() == read(rel), rel
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == files


def test_an_overlay_kernel_loaded_with_the_slice_registers_through_it(tmp_path):
    release_slice.write_slice("0.5.14", tmp_path)
    probe = ("import sys; from pathlib import Path; from harness.upstream import load_kernel; "
             "m = load_kernel(Path(sys.argv[1]), 'mma_slice', tree=Path(sys.argv[2])); "
             "print(m.register_custom_op.__code__.co_filename)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PATCHKIT_CACHE": str(tmp_path / "no-cache"), "PIP_NO_INDEX": "1"}
    proc = subprocess.run([sys.executable, "-c", probe, str(MMA), str(tmp_path)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == str(tmp_path / "sglang/srt/utils/custom_op.py")
