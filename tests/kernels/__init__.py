"""Tests of kernels."""
