"""bench/airgapped/release_slice.py: the release's register_custom_op files, alone in a folder, are the pinned wheel's bytes,
and an overlay kernel loaded with that folder (a bench's --release-tree) registers its op through them."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.airgapped import release_slice
from harness.line_files import overlay_file
from harness.upstream import _release_reader
from patchkit.lockfile import load_lock, lock_lines
from tests.conftest import REPO

LINES = lock_lines(REPO / "pin.lock")
# Where each release keeps the kernel_api_logging module its custom_op.py imports (read off the wheels).
LOGGING = {"0.5.14": "sglang/kernel_api_logging.py", "0.5.23": "sglang/kernels/kernel_api_logging.py"}


@pytest.mark.parametrize("line", LINES)
def test_the_slice_holds_the_pinned_wheels_custom_op_files_byte_for_byte(tmp_path, line):
    files = release_slice.write_slice(line, tmp_path)
    read, _ = _release_reader(None, line)
    assert files == sorted([LOGGING[line], "sglang/srt/utils/common.py", "sglang/srt/utils/custom_op.py"])
    for rel in files:
        assert (tmp_path / rel).read_text() == read(rel), rel
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == files


@pytest.mark.parametrize("line", LINES)
def test_an_overlay_kernel_loaded_with_the_slice_registers_through_it(tmp_path, line):
    release_slice.write_slice(line, tmp_path)
    mma = overlay_file(load_lock(REPO / "pin.lock", line), "flash_mla_sm120_mma.py")
    probe = ("import sys; from pathlib import Path; from harness.upstream import load_kernel; "
             "m = load_kernel(Path(sys.argv[1]), 'mma_slice', tree=Path(sys.argv[2])); "
             "print(m.register_custom_op.__code__.co_filename)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PATCHKIT_CACHE": str(tmp_path / "no-cache"), "PIP_NO_INDEX": "1"}
    proc = subprocess.run([sys.executable, "-c", probe, str(mma), str(tmp_path)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == str(tmp_path / "sglang/srt/utils/custom_op.py")


def test_without_line_the_slice_is_the_default_lines(tmp_path, monkeypatch, capsys):
    """As apply.py: PATCHKIT_LINE, else the newest line of pin.lock (it was 0.5.14, written into the code)."""
    monkeypatch.delenv("PATCHKIT_LINE")
    assert release_slice.main(["--out", str(tmp_path)]) == 0
    newest = load_lock(REPO / "pin.lock").line
    assert capsys.readouterr().out.strip().endswith(f"of the pinned sglang of line {newest}")
    assert (tmp_path / LOGGING[newest]).is_file()
