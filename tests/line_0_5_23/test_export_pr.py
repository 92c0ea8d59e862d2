"""`apply.py export-pr` on the 0.5.23 line: every exportable patch of the line becomes one upstream-ready commit
on a checkout of the real 0.5.23 release, with the line's own PR text (patches/0.5.23/*/upstream-pr.toml) and
unittest, nothing of this repository's vocabulary in any file it ships; the README's names (P1, P3) select
the patches, and a wrong name lists them. The tests are tests/pr/test_export_pr.py's (its refusals of a cited
path and an unrunnable command are line-independent and run once, there), collected here so its
fixtures and the command take this line (tests/conftest.py: PATCHKIT_LINE per test).

The unittests' CPU part is not run here (tests/pr/test_export_pr.py runs it on 0.5.14): under
harness.upstream_test, 0.5.23's flash_mla_sm120 stops at `from sglang.srt.utils import is_hip`, which the
harness's reduced sglang.srt.utils.common (direct_register_custom_op alone) does not hold."""
from tests.pr.test_export_pr import (  # noqa: F401  (fixtures and the test, collected for this line)
    checkouts,
    overlay_repo,
    test_every_patch_exports_as_one_upstream_commit_on_main,
    test_refuses_unknown_or_ambiguous_patch_listing_what_there_is,
    test_the_readme_names_export_pr_accepts,
)
