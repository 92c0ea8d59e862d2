"""Tests of rebase."""
