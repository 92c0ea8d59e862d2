"""Tests of install, serve, smoke, doctor, the bundle, and the test-only server hooks."""
