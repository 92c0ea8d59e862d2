"""Tests of pr."""
