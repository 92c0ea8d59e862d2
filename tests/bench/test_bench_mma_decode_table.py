"""bench/kernels/bench_mma_decode.py's bookkeeping on a CPU: a column (--configs, --experiments) records its time and
error or its failure and the run goes on; the one table holds every column the run timed; --plot-from redraws
a run that has experiment columns."""
from __future__ import annotations

import json
import sys

import pytest
import torch

from bench.kernels import bench_mma_decode as bm
from bench import plots
from harness.line_files import line_file
from patchkit.lockfile import load_lock, lock_lines
from tests.conftest import REPO

ROW = {"shape": "H8/B16/win128+ex512", "H": 8, "B": 16, "topk": 128, "extra_topk": 512, "floor_us": 1.4,
       "mma_us": 14.7, "mma_err": 2.1e-3, "exp_ws32g1_us": 15.3, "exp_ws32g1_err": 2.1e-3,
       "exp_ws32g2_fail": "RuntimeError: out of resources", "fi132_us": 29.0, "fi132_err": 2.7e-2,
       "fi188_us": 25.3, "fi188_err": 2.7e-2, "flashmla_err": "RuntimeError: no kernel"}


def test_a_column_records_time_and_error_and_a_failure_does_not_stop_the_run(monkeypatch):
    monkeypatch.setattr(bm, "graph_time_us", lambda calls, replays=20: [c() for c in calls] and 12.5)
    ref = torch.ones(2, 1, 8, 512, dtype=torch.float64)
    row = {}
    bm.time_column(row, "exp_ws32g1", lambda i: (ref.float() * 1.001,), ref)
    bm.time_column(row, "exp_ws32g2", lambda i: (_ for _ in ()).throw(RuntimeError("out of resources")), ref)
    assert row["exp_ws32g1_us"] == 12.5 and abs(row["exp_ws32g1_err"] - 1e-3) < 1e-6
    assert row["exp_ws32g2_fail"] == "RuntimeError: out of resources" and "exp_ws32g2_us" not in row


def test_one_table_has_every_column_the_run_timed(capsys):
    bm.print_config_table([ROW], [], ["ws32g1", "ws32g2"], [132, 188])
    head, rule, line = capsys.readouterr().out.strip().splitlines()
    cells = lambda s: [c.strip() for c in s.strip("|").split("|")]  # noqa: E731
    assert cells(head) == ["shape", "HBM floor (us)", "ours (us)", "ws32g1 (us)", "ws32g2 (us)", "FI@132 (us)",
                           "FI@188 (us)", "FlashMLA SM90 (us)",
                           "rel. error vs float64: ours / ws32g1 / ws32g2 / FI@132 / FI@188 / FlashMLA"]
    assert len(cells(rule)) == len(cells(head))
    assert cells(line) == ["H8/B16/win128+ex512", "1.40", "14.7", "15.3", "-", "29.0", "25.3", "-",
                           "2.1e-03 / 2.1e-03 / - / 2.7e-02 / 2.7e-02 / fail"]


def test_plot_from_redraws_a_run_with_experiment_columns(tmp_path, monkeypatch):
    saved = tmp_path / "bench_mma_decode.json"
    saved.write_text(json.dumps({"bw": 4.3e12, "rows": [ROW], "sweep": []}))
    drawn = []
    monkeypatch.setattr(plots, "plot_mma_decode", lambda rows, path: drawn.append((rows, path)))
    monkeypatch.setattr("sys.argv", ["bench_mma_decode", "--plot-from", str(saved), "--plot", str(tmp_path / "p.png")])
    bm.main()
    (rows, path), = drawn
    assert path == tmp_path / "p.png" and rows[0]["mma_us"] == 14.7 and rows[0]["exp_ws32g1_us"] == 15.3


def test_the_other_fp_fusion_setting_is_set_for_the_call_alone_and_tabled_beside_the_shipped_one(capsys):
    import types
    module = types.SimpleNamespace(ENABLE_FP_FUSION=True)
    assert bm.fusion_keys(module) == ("fusion_on", "fusion_off")
    seen = bm.with_fp_fusion(module, False, lambda a: (a, module.ENABLE_FP_FUSION), 7)
    assert seen == (7, False) and module.ENABLE_FP_FUSION is True
    bm.print_fusion_table([{**ROW, "fusion_on_us": 14.7, "fusion_on_err": 2.1e-3, "fusion_off_us": 15.4,
                            "fusion_off_err": 2.2e-3}])
    head, rule, line = capsys.readouterr().out.strip().splitlines()
    cells = lambda s: [c.strip() for c in s.strip("|").split("|")]  # noqa: E731
    assert cells(line) == ["H8/B16/win128+ex512", "14.7", "15.4", "1.05", "2.10e-03 / 2.20e-03"]
    assert len(cells(rule)) == len(cells(head)) == 5


@pytest.mark.parametrize("line", lock_lines(REPO / "pin.lock"))
def test_ours_is_the_lines_kernel_with_register_custom_op_from_the_release_tree_the_slice_or_the_line(
        line, tmp_path, monkeypatch):
    lock = load_lock(REPO / "pin.lock", line)
    kernel, slice_ = line_file(lock, bm.KERNEL), tmp_path / "slice"
    seen = []
    monkeypatch.setattr(bm, "load_mma_backend",
                        lambda path, name, tree=None, line=None: seen.append((path, tree, line)) or name)
    bm.load_ours(lock, None, tmp_path / "release")               # the line's overlay file, the release slice's op
    kernel.in_tree(slice_).parent.mkdir(parents=True)
    kernel.in_tree(slice_).write_text("")
    bm.load_ours(lock, slice_)                                   # the line's tree's file and its own op
    bm.load_ours(lock)                                           # the overlay file, the line's pinned wheel's op
    assert seen == [(kernel.overlay(), tmp_path / "release", None), (kernel.in_tree(slice_), slice_, None),
                    (kernel.overlay(), None, line)]
    assert kernel.overlay() == REPO / "overlay" / line / kernel.path


def test_a_tree_slice_and_a_release_tree_together_are_refused_before_anything_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bm, "load_ours", lambda *a: pytest.fail("ours loaded"))
    monkeypatch.setattr(sys, "argv", ["bench_mma_decode", "--out", str(tmp_path / "o"), "--tree", str(tmp_path),
                                      "--release-tree", str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        bm.main()
    assert exc.value.code == 2
    assert "expected --tree or --release-tree" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
