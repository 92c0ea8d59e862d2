"""Refusals that said too little or pointed at the wrong fix (issue 54): each now names what it found, where,
and a way out that is right for it, on one line, leaving every tree as it was."""
from __future__ import annotations

import json
import re
import zipfile

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import (LINE, PACKAGE, RELEASES, cli, data_snapshot, demo_repo, demo_target, make_wheel,
                                  one_line_error)


def _series_dir(repo):
    return repo / "patches" / LINE / PACKAGE


def _release_version(repo) -> None:
    """Version the demo's line as a released patch set (pin.lock's [patchset] + a CHANGELOG entry with its digest),
    so that check holds the series to its recorded digest, as it does this repository's."""
    from patchkit.engine import Engine

    with open(repo / "pin.lock", "a") as fh:
        fh.write(f'\n[line."{LINE}".patchset]\nversion = "0.1.0"\n')
    digest = Engine.from_repo(repo, line=LINE).patch_set().digest
    (repo / "CHANGELOG.md").write_text(f"# Changelog\n\n## {LINE} line\n\n### 0.1.0 (2026-12-07)\n\nSeries-Digest: {digest}\n")


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


def test_a_series_listing_with_crlf_endings_is_refused_alike_by_check_and_apply_without_a_version_bump(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    _release_version(repo)
    assert cli(repo, "check", env=env).returncode == 0
    listing = _series_dir(repo) / "series"
    listing.write_bytes(listing.read_bytes().replace(b"\n", b"\r\n"))     # what core.autocrlf=true makes of it
    data, before = data_snapshot(repo), snapshot(site)
    errors = []
    for args in (["check"], ["apply", "--target", str(site)]):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc), (args, proc.stdout, proc.stderr)
        errors.append(proc.stderr)
    assert errors[0] == errors[1], errors        # the same refusal, word for word
    assert str(listing) in errors[0] and "CRLF" in errors[0] and "LF" in errors[0], errors[0]
    assert not re.search(r"bump|CHANGELOG|patch-set version|\[line\.", errors[0]), errors[0]
    assert snapshot(site) == before and data_snapshot(repo) == data


def test_a_directory_where_a_patched_file_should_be_is_described_and_left_alone_never_to_be_removed(tmp_path):
    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    where = site / "demo" / "util.py"            # patch 2 changes this file
    where.unlink()
    where.mkdir()
    (where / "notes.txt").write_text("the user's own file\n")
    before = snapshot(site)
    for args in (["apply"], ["revert"], ["status"]):
        proc = cli(repo, *args, "--target", str(site), env=env)
        assert one_line_error(proc), (args, proc.stdout, proc.stderr)
        assert str(where) in proc.stderr and "found a directory" in proc.stderr, proc.stderr
        assert "1 entry" in proc.stderr and "nothing written" in proc.stderr, proc.stderr
        assert not re.search(r"\b(remove|delete|rm)\b", proc.stderr, re.I), proc.stderr
        assert snapshot(site) == before


def test_a_forged_manifest_naming_the_other_line_is_refused_naming_the_field_that_disagrees(demo, tmp_path):
    repo, env = demo
    assert cli(repo, "rebase", "--line", "1.0", "--to", "1.1", "--new-line", env=env).returncode == 0
    site = tmp_path / "site-1.1"
    with zipfile.ZipFile(make_wheel(tmp_path / "target-wheel", "1.1", RELEASES["1.1"])) as z:
        z.extractall(site)
    assert cli(repo, "apply", "--line", "1.1", "--target", str(site), env=env).returncode == 0
    manifest = site / ".patchkit-attestation.json"
    data = json.loads(manifest.read_text())
    assert data["line"] == "1.1" and data["applied_to"] == ["demo 1.1"], data
    data["line"] = "1.0"                    # forged: the other line, every other field as apply wrote it
    manifest.write_text(json.dumps(data))
    before = snapshot(site)
    for args in (["apply"], ["apply", "--line", "1.0"], ["revert"]):
        proc = cli(repo, *args, "--target", str(site), env=env)
        assert one_line_error(proc), (args, proc.stderr)
        said = proc.stderr
        # the field that disagrees, with what it says and what the tree and the manifest's other field hold
        assert "'line'" in said and "1.0" in said and "demo 1.0" in said and "'applied_to'" in said, (args, said)
        assert "installed over" not in said, (args, said)      # nothing was installed over anything
        assert snapshot(site) == before
    status = cli(repo, "status", "--target", str(site), env=env)
    assert "'line'" in status.stdout and "installed over" not in status.stdout, status.stdout
    assert snapshot(site) == before
