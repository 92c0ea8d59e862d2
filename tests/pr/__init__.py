"""Tests of export-pr: one patch as an upstream branch and PR body, and the claims it makes."""
