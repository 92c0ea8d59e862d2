"""CUDA timing shared by the benchmarks: event-timed loops and CUDA-graph capture."""
from __future__ import annotations

import torch


def event_ms(fn, iters: int, warmup: int = 3) -> float:
    """Mean milliseconds per call of fn over `iters` calls, timed with CUDA events after `warmup` calls."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def capture_graph(fn) -> torch.cuda.CUDAGraph:
    """Run fn once on a side stream (lazy init, Triton compile), then capture it in a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph
