"""The lint gate of `make check` (lint/gate.py): green on the shipped overlay files and patches, red on a copy
with a mis-formatted line or a misspelling, in an overlay file or in a line a patch adds, and silent on
upstream's own lines. Needs the lint venv (`make check` creates .venv-lint; .ci/run runs make check).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lint.gate import TOOL_EXE, load_settings
from tests.conftest import REPO

TOOLS = REPO / ".venv-lint" / "bin"
needs_tools = pytest.mark.skipif(
    not all((TOOLS / exe).is_file() for exe in set(TOOL_EXE.values())),
    reason="no lint venv (.venv-lint/bin: isort, ruff, codespell); `make check` creates it",
)
MMA = "sglang/srt/layers/attention/flash_mla_sm120_mma.py"
INDEXER_PATCH = "0004-dsv4-indexer-score-only-each-row-s-real-length-on-sm.patch"


def gate(repo: Path, *extra: str) -> subprocess.CompletedProcess:
    """The gate as `make check` runs it, from the checkout's lint package, in the repository it lints."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "lint.gate", "--tools", str(TOOLS), "--repo", str(repo), *extra],
                          cwd=repo, env=env, capture_output=True, text=True)


def copy_of_the_set(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy2(REPO / "pin.lock", repo / "pin.lock")
    for d in ("patches", "overlay"):
        shutil.copytree(REPO / d, repo / d)
    return repo


def test_requirements_pin_the_versions_settings_name():
    pinned = dict(re.findall(r"^([a-z]+)==(\S+)$", (REPO / "requirements-lint.txt").read_text(), re.M))
    assert pinned == load_settings()["tools"]


@needs_tools
def test_shipped_files_pass():
    proc = gate(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lint: 0 finding(s)" in proc.stdout


@needs_tools
def test_misformatted_line_and_misspelling_in_an_overlay_file_fail(tmp_path):
    repo = copy_of_the_set(tmp_path)
    kernel = repo / "overlay" / "0.5.14" / MMA
    lines = kernel.read_text().splitlines(keepends=True)
    lines.append("_SHAPES = [1,2 ,3]\n")
    lines.append("# the combine kernel will recieve every split\n")
    kernel.write_text("".join(lines))
    proc = gate(repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    n = len(lines)
    assert f"{MMA}:{n - 1}: ruff-format would change lines {n - 1}-{n - 1}" in proc.stdout
    assert f"{MMA}:{n}: codespell: recieve ==> receive" in proc.stdout


@needs_tools
def test_misspelling_in_a_line_a_patch_adds_fails(tmp_path):
    repo = copy_of_the_set(tmp_path)
    patch = repo / "patches" / "0.5.14" / "sglang" / INDEXER_PATCH
    text = patch.read_text()
    added = "+    # SGLANG_SM120_INDEXER_TRITON=0 restores the upstream torch fallback.\n"
    assert text.count(added) == 1
    patch.write_text(text.replace(added, added.replace("restores", "seperately restores")))
    proc = gate(repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"^sglang/srt/layers/attention/dsv4/indexer\.py:\d+: codespell: seperately ==> separately$",
                     proc.stdout, re.M), proc.stdout


@needs_tools
def test_a_pr_test_file_under_patches_is_linted_and_fix_formats_the_whole_files(tmp_path):
    repo = copy_of_the_set(tmp_path)
    demo = repo / "patches" / "0.5.14" / "sglang" / "upstream-tests" / "test_demo.py"
    demo.parent.mkdir(exist_ok=True)
    demo.write_text("SHAPES = [1,2 ,3]\n")
    kernel = repo / "overlay" / "0.5.14" / MMA
    kernel.write_text(kernel.read_text() + "_SHAPES = [1,2 ,3]\n")
    proc = gate(repo)
    assert proc.returncode == 1 and "patches/0.5.14/sglang/upstream-tests/test_demo.py:1: ruff-format" in proc.stdout, proc.stdout
    untouched = {f: f.read_bytes() for f in (repo / "patches" / "0.5.14" / "flashinfer").rglob("*") if f.is_file()}
    stray = repo / "stray.py"     # in the working directory, in no series: --fix must leave it alone
    stray.write_text("y = [1,2 ,3]\n")
    proc = gate(repo, "--fix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"formatted overlay/0.5.14/{MMA}" in proc.stdout and "formatted patches/0.5.14/sglang/upstream-tests/test_demo.py" in proc.stdout
    assert demo.read_text() == "SHAPES = [1, 2, 3]\n" and kernel.read_text().endswith("\n_SHAPES = [1, 2, 3]\n")
    assert stray.read_text() == "y = [1,2 ,3]\n" and all(f.read_bytes() == b for f, b in untouched.items())


def test_missing_tools_are_a_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lint.gate", "--tools", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: expected ") and proc.stdout == ""


TRITON_MMA_0523 = "sglang/kernels/ops/attention/flash_mla_sm120_mma.py"


@needs_tools
def test_the_first_prs_kernel_file_with_the_import_block_export_pr_once_shipped_fails_isort(tmp_path):
    """The mma kernel file export-pr ships in the first PR is the overlay file itself, so the gate sees it: with
    the import block the first PR shipped when it was derived from a two-kernel file (no blank line before the
    first-party import, isort 7.0.0 with the release's settings wants one), the gate fails naming it."""
    repo = copy_of_the_set(tmp_path)
    kernel = repo / "overlay" / "0.5.23" / TRITON_MMA_0523
    blank = "import triton.language as tl\n\nfrom sglang.srt.utils.custom_op import register_custom_op\n"
    assert kernel.read_text().count(blank) == 1
    kernel.write_text(kernel.read_text().replace(blank, blank.replace("\n\n", "\n")))
    proc = gate(repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(rf"^{re.escape(TRITON_MMA_0523)}:\d+: isort would change lines", proc.stdout, re.M), proc.stdout


def test_a_shipped_file_the_series_files_do_not_hold_is_linted_as_its_commit_holds_it(monkeypatch):
    """lint/gate.py lints what export-pr ships (lint/shipped.py), not only the series' own files: a shipped file
    whose bytes are in no overlay, patch or file under patches/ (a file export-pr would derive) becomes a source
    of its own, whole if new, else for the lines its commit adds; one byte-identical to a series file is not
    linted twice."""
    import lint.shipped
    from lint.gate import Source, exported_sources

    found = [Source("sglang", TRITON_MMA_0523, "x = 1\n", None)]
    files = [
        lint.shipped.Shipped("0.5.23", "sglang", "0001-a.patch", TRITON_MMA_0523, None, b"x = 1\n", [], Path()),
        lint.shipped.Shipped("0.5.23", "sglang", "0001-a.patch", "sglang/new.py", None, b"y = [1,2 ,3]\n", [], Path()),
        lint.shipped.Shipped("0.5.23", "sglang", "0003-b.patch", "sglang/old.py", b"a = 1\nb = 2\n",
                             b"a = 1\nc = 3\nb = 2\n", [], Path()),
        lint.shipped.Shipped("0.5.23", "sglang", "0003-b.patch", "sglang/data.json", None, b"{}", [], Path()),
    ]
    monkeypatch.setattr(lint.shipped, "shipped", lambda repo: files)
    got = [(s.path, s.text, s.lines) for s in exported_sources(REPO, found)]
    assert got == [("export-pr/0.5.23/0001/sglang/new.py", "y = [1,2 ,3]\n", None),
                   ("export-pr/0.5.23/0003/sglang/old.py", "a = 1\nc = 3\nb = 2\n", {2})]


def test_what_the_gate_takes_as_shipped_is_the_files_of_every_exportable_patch():
    """lint/shipped.py on this checkout: every patch an upstream-pr.toml describes ships its overlay files, its
    unittest and its further files; a patch with Depends-On is built on the patches it needs (0.5.23's Gluon
    kernel on the mma backend's branch), so its dispatcher change carries."""
    from lint.shipped import shipped
    from patchkit.pr.prdata import load_pr_data

    files = shipped(REPO)
    by_patch = {}
    for f in files:
        by_patch.setdefault((f.line, f.upstream, f.patch), {})[f.path] = f
    for line in ("0.5.14", "0.5.23"):
        for upstream in ("sglang", "flashinfer"):
            data = load_pr_data(REPO / "patches" / line / upstream)
            for name, pr in data.patches.items():
                paths = set(by_patch[(line, upstream, name)])
                assert set(pr.modifications) <= paths, (line, name)
                assert (pr.test_dest in paths) == (pr.test_file is not None), (line, name)
                assert {dest for _, dest, _ in pr.files} <= paths, (line, name)
    gluon = by_patch[("0.5.23", "sglang", "0003-dsv4-a-Gluon-kernel-for-the-sm_120-mma-decode-backen.patch")]
    dispatcher = gluon["sglang/kernels/ops/attention/flash_mla_sm120.py"]
    assert b"flash_mla_sparse_decode_mma_gluon" in dispatcher.after
    assert b"flash_mla_sparse_decode_mma," in dispatcher.before   # its parent: the mma backend's commit
    assert b"flash_mla_sparse_decode_mma_gluon" not in dispatcher.before
