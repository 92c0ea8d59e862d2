"""bench/server/trace_summary.py: kernel time per name from a chrome trace, GPU kernels only."""
from __future__ import annotations

import gzip
import json

from bench.server import trace_summary


def test_kernel_time_is_summed_per_name_and_only_gpu_kernels_count(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "gemm", "dur": 30},
              {"ph": "X", "cat": "Kernel", "name": "gemm", "dur": 20},
              {"ph": "X", "cat": "kernel", "name": "decode", "dur": 40},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "dur": 500},
              {"ph": "i", "cat": "kernel", "name": "marker", "dur": 7}]
    (tmp_path / "p").mkdir()
    with gzip.open(tmp_path / "p" / "a.trace.json.gz", "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    assert trace_summary.summarize(tmp_path, top=1) == {
        "p/a.trace.json.gz": {"kernel_us": 90.0, "top": [{"name": "gemm", "us": 50.0, "launches": 2}]}}


def test_a_missing_folder_is_refused_in_one_line(tmp_path, capsys):
    assert trace_summary.main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
