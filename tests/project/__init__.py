"""Tests of the repository itself: docs and citations, its vocabulary, the import rules, lint, CI's checks."""
