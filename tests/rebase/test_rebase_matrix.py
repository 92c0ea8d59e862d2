"""Issue 23: `rebase --matrix` on the real 0.5.16 and 0.5.23 releases (each with the FlashInfer it requires),
checked against the committed docs/compat.md, and what those two dry runs must tell the truth about:
the move of flash_mla_sm120.py in 0.5.23 (git's rename limit), P4 and P7 superseded, the pins that follow.
"""
from __future__ import annotations

import json

import pytest

from tests.conftest import LOCK, REPO
from tests.rebase_cases import repo_copy
from tests.rebase_release_cases import DISPATCHER, DISPATCHER_0_5_16, MODEL, P1, P4, P7, patch_of, result_of
from tests.rebase.test_rebase import cli
from patchkit.rebase.matrix import parse_markdown
from patchkit.series import load_series

SERIES = load_series("sglang", REPO / "patches" / "0.5.14", REPO / "overlay" / "0.5.14", LOCK.upstream("sglang").root)
COLUMNS = ("0.5.16", "0.5.23")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    repo = repo_copy(tmp_path_factory.mktemp("matrix") / "repo")
    out = repo / "matrix.json"
    proc = cli(repo, "rebase", "--matrix", "--releases", ",".join(COLUMNS), "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    data = json.loads(out.read_text())
    return {c["version"]: c for c in data["columns"]}, data, proc, repo


def _report(matrix, version):
    return matrix[0][version]["report"]


@pytest.mark.slow   # two dry runs (0.5.16, 0.5.23): about two minutes on the CI machine
def test_matrix_0_5_16_and_0_5_23_columns_match_docs_compat_md(matrix):
    columns, data, proc, repo = matrix
    committed = parse_markdown((REPO / "docs" / "compat.md").read_text(), "0.5.14")
    for v in COLUMNS:
        assert columns[v]["cells"] == committed[v], f"docs/compat.md column {v} differs from the matrix run"
    # the table went to stdout; a subset never rewrites docs/compat.md
    assert "| patch |" in proc.stdout and not (repo / "docs" / "compat.md").exists()
    assert set(data["patches"]) == set(committed[COLUMNS[0]])


@pytest.mark.slow
def test_0_5_23_rename_detection_finds_the_move_of_flash_mla_sm120(matrix):
    report = _report(matrix, "0.5.23")
    r = result_of(report, P1, SERIES)
    assert f"moved {DISPATCHER} -> {DISPATCHER_0_5_16}" in r["detail"], r["detail"]
    p1 = patch_of(SERIES, P1)
    # the overlay file goes with it, and its reach trailer follows the move
    assert r["overlay_moves"] == {o: o.replace("sglang/srt/layers/attention/", "sglang/kernels/ops/attention/")
                                  for o in p1.overlay}, r
    assert r["unreached"] and DISPATCHER_0_5_16 in r["unreached"][0], r
    assert all(DISPATCHER not in f for f in r["conflicted"]), r
    assert "rename detection was skipped" not in matrix[2].stderr


@pytest.mark.slow
def test_0_5_23_p4_and_p7_are_superseded_by_upstream(matrix):
    report = _report(matrix, "0.5.23")
    p4, p7 = result_of(report, P4, SERIES), result_of(report, P7, SERIES)
    assert p4["result"] == "superseded" and any("tilelang_fp8_paged_mqa_logits" in s for s in p4["superseded"]), p4
    assert p7["result"] == "superseded" and p7["superseded"] == [f"{MODEL}:MqaAttentionBase._kernel_num_heads"], p7
    assert matrix[0]["0.5.23"]["cells"][f"sglang/{patch_of(SERIES, P7).name}"] == "superseded"
    # 0.5.16 forces the TileLang indexer (P4 superseded) but has no _kernel_num_heads yet (P7 not superseded)
    early = _report(matrix, "0.5.16")
    assert result_of(early, P4, SERIES)["result"] == "superseded"
    assert result_of(early, P7, SERIES)["result"] != "superseded"


@pytest.mark.slow
def test_0_5_23_pins_follow_the_release_requirements(matrix):
    col = matrix[0]["0.5.23"]
    assert col["pins"]["flashinfer"] == "0.7.2", col["pins"]
    moved = "\n".join(col["pins_moved"])
    assert "flashinfer 0.6.12 -> 0.7.2" in moved and "flashinfer-python==0.7.2" in moved, moved
    assert "[runtime] torch 2.11.0 -> 2.14.1" in moved and "[runtime] triton 3.6.0 -> 3.8.0" in moved, moved
    assert matrix[0]["0.5.16"]["pins"]["flashinfer"] == "0.6.14"


P3 = ("P3", "sglang", MODEL, r"MHC")


@pytest.mark.slow
def test_p3_is_partly_reached_where_the_fused_mhc_boundary_runs_and_not_before(matrix):
    """Issue 36: P3's Unreached-If said "not reached" once the fused MHC post/pre is on by default; its code
    still runs on the one hc_pre read the fusion leaves (layer 0's attention), as reach.toml records."""
    name = f"sglang/{patch_of(SERIES, P3).name}"
    late = result_of(_report(matrix, "0.5.23"), P3, SERIES)
    assert late["partly"] == "1/86" and late["unreached"] == [], late
    assert matrix[0]["0.5.23"]["cells"][name] == "conflict, partly reached (1/86)"
    said = [d for d in late["detail"] if d.startswith("partly reached: 1 of 86 MHC-pre mixings")]
    assert said and "not measured" in said[0] and "SGLANG_OPT_FUSE_MHC_POST_PRE" in said[0], late["detail"]
    # 0.5.16: the fusion is off by default, every hc_pre call runs the patched code
    early = result_of(_report(matrix, "0.5.16"), P3, SERIES)
    assert early["partly"] == "" and "partly" not in matrix[0]["0.5.16"]["cells"][name], early
    assert "partly reached (1/86)" in matrix[2].stdout and "1 of 86 MHC-pre mixings" in matrix[2].stdout
