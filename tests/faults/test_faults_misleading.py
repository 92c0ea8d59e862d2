"""Refusals that said too little or pointed at the wrong fix (issue 54): each now names what it found, where,
and a way out that is right for it, on one line, leaving every tree as it was."""
from __future__ import annotations

import re

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import LINE, PACKAGE, cli, data_snapshot, demo_repo, demo_target, one_line_error


def _series_dir(repo):
    return repo / "patches" / LINE / PACKAGE


def test_a_hunk_that_no_longer_applies_is_named_by_patch_file_and_line_as_git_apply_names_it(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    patch = sorted(_series_dir(repo).glob("0002-*.patch"))[0]
    text = patch.read_text()
    header = re.search(r"^@@ -(\d+),\d+ \+\d+,\d+ @@", text, re.M)
    context = re.search(r"^ U5 = 5$", text, re.M)           # a context line of the hunk that changes U7
    assert header and context, text
    patch.write_text(text[:context.start()] + " U5 = 'not in the release'" + text[context.end():])
    before = snapshot(site)
    for args in (["check"], ["apply", "--target", str(site)], ["status", "--target", str(site)]):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc), (args, proc.stderr)
        # git apply's own words for it: "patch failed: demo/util.py:LINE", LINE the hunk's first line in the release
        assert patch.name in proc.stderr and f"demo/util.py:{header.group(1)}" in proc.stderr, (args, proc.stderr)
        assert not proc.stderr.rstrip().endswith(":"), proc.stderr
    assert snapshot(site) == before
