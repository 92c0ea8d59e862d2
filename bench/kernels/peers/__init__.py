"""Upstream kernels built as peers for the decode bench: each module lays out, builds or calls one."""
