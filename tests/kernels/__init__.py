"""Tests of the shipped kernels and patches on the real pinned sources: numerics, AOT builds, env switches."""
