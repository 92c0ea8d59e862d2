"""Tests of rebase: carrying a series to new releases, the compatibility matrix, undo."""
