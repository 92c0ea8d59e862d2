"""`apply.py export-pr`: one patch of a series as a branch on an upstream git checkout, with its PR body."""
