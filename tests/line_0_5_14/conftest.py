"""Tests of the 0.5.14 release line: pristine_root / patched_root give that line's trees (skipped, with the
reason, while pin.lock has no such line)."""
PATCH_LINE = "0.5.14"
