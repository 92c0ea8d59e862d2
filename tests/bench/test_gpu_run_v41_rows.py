"""bench/airgapped/v41_rows.sh on a CPU: every flag it passes is one its bench takes, and bad input (no output
folder, a payload not built) is refused with one line, exit 2, nothing written."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench/airgapped/v41_rows.sh"


def commands(text: str) -> dict[str, set[str]]:
    """module -> the --flags the script passes it (continuation lines joined)."""
    joined = text.replace("\\\n", " ")
    found: dict[str, set[str]] = {}
    for line in joined.splitlines():
        for module, rest in re.findall(r"python3 -m (bench\.[\w.]+)(.*)", line):
            found.setdefault(module, set()).update(re.findall(r"(--[a-z][a-z0-9-]*)", rest))
    return found


def test_every_flag_the_script_passes_is_one_its_bench_takes():
    used = commands(SCRIPT.read_text())
    assert {"bench.kernels.triton_lines", "bench.kernels.bench_mhc_pre", "bench.airgapped.carry"} <= set(used)
    for module, flags in used.items():
        helped = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True)
        if module == "bench.airgapped.carry":      # sub-commands: install's own help
            helped = subprocess.run([sys.executable, "-m", module, "install", "--help"], cwd=REPO,
                                    capture_output=True, text=True)
        assert helped.returncode == 0, helped.stderr[-500:]
        missing = {f for f in flags if f not in helped.stdout}
        assert not missing, f"{module}: the script passes {sorted(missing)}, which --help does not list"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_no_output_folder_is_refused_in_one_line(tmp_path):
    run = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == ("usage: bash bench/airgapped/v41_rows.sh RESULTS_DIR "
                                  "(expected one output folder, found 0 arguments)")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_payload_not_built_is_named_and_nothing_is_written(tmp_path):
    run = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == ("v41_rows: expected build/carry-triton-3.8.0/manifest.json (see the head of "
                                  "bench/airgapped/v41_rows.sh), found no such file")
    assert list(tmp_path.iterdir()) == []
