"""Tests of the engine on its own: apply, status, revert, check, lines, attestation, the installed package."""
