"""export-pr judges a patch by what the data says about the PR's base: a line's retired.toml record that matches
the base (upstream's replacing definitions found there) refuses the export, naming them, unless --force; a
record marking a patch retired refuses it too; "not reached" and "partly reached" on the base only warn; and a
conflict's hint never asks to export first a patch upstream already has.

The base is the real sglang 0.5.23 release, built by `apply.py wheel-checkout` (the wheel's files at the
repository's layout); the 0.5.14 line's patches are exported onto it, as a user exporting onto today's main does.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from patchkit.pr.export import default_branch
from patchkit.pr.retired import load_records
from tests.conftest import REPO
from tests.rebase_cases import repo_copy
from tests.pr.test_export_pr import IDENTITY, cli, delete_branches, git, named


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return repo_copy(tmp_path_factory.mktemp("retired") / "repo")


@pytest.fixture(scope="module")
def base_0523(copy, tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("sglang-0523") / "sglang"
    proc = cli(copy, "wheel-checkout", "sglang", "--dir", str(repo), "--line", "0.5.23")
    assert proc.returncode == 0, proc.stderr
    git(repo, "config", "user.name", IDENTITY[0])
    git(repo, "config", "user.email", IDENTITY[1])
    return repo


def patch_named(copy: Path, line: str, label: str):
    return named(copy, "sglang", label, line)


@pytest.mark.parametrize("label,definition", [
    ("P4", "sglang/kernels/ops/attention/dsa/tilelang_kernel.py:tilelang_fp8_paged_mqa_logits"),
    ("P7", "sglang/srt/models/deepseek_v4.py:MqaAttentionBase._kernel_num_heads"),
    ("P2", "sglang/srt/layers/attention/dsv4/indexer.py:fp8_paged_mqa_logits_torch_sm120"),
])
def test_a_patch_upstream_has_on_the_base_is_refused_naming_what_replaced_it(copy, base_0523, label, definition):
    patch = patch_named(copy, "0.5.14", label)
    proc = cli(copy, "export-pr", label, "--repo", str(base_0523), "--base", "v0.5.23", "--line", "0.5.14")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert patch.name in line and definition in line and "pass --force" in line
    assert git(base_0523, "branch", "--list", "pr/*") == ""


def test_forced_export_never_asks_to_export_first_what_upstream_has(copy, base_0523):
    # P4 changes indexer.py on top of P2, which 0.5.23 already has: whatever --force meets, it is not "P2 first"
    p2, p4 = patch_named(copy, "0.5.14", "P2"), patch_named(copy, "0.5.14", "P4")
    proc = cli(copy, "export-pr", "P4", "--repo", str(base_0523), "--base", "v0.5.23", "--line", "0.5.14", "--force")
    try:
        assert "export that first" not in proc.stderr and p2.name not in proc.stderr, proc.stderr
    finally:
        delete_branches(base_0523, default_branch(p4))


def test_partly_reached_and_not_reached_warn_and_export(copy, base_0523, tmp_path):
    # a reach.toml figure that holds on the base (P3's 1 of 86 hc_pre calls, the fused post/pre boundary's
    # conditions; P3 itself left this line) given to P1: a warning, and the branch is made
    scratch = repo_copy(tmp_path / "partly")
    p1 = patch_named(scratch, "0.5.23", "P1")
    record = (scratch / "patches/0.5.14/sglang/reach.toml").read_text().split("[[partly]]", 1)[1].split("\n\n", 1)[0]
    subject = re.search(r'^subject = "(.*)"$', record, re.M).group(1)
    with open(scratch / "patches/0.5.23/sglang/reach.toml", "a", encoding="utf-8") as f:
        f.write("\n[[partly]]" + record.replace(subject, p1.subject) + "\n")
    proc = cli(scratch, "export-pr", "P1", "--repo", str(base_0523), "--base", "v0.5.23", "--line", "0.5.23")
    try:
        assert proc.returncode == 0, proc.stderr
        assert re.search(rf"warning: {re.escape(p1.name)} is partly reached on the base \(1/86", proc.stderr), proc.stderr
    finally:
        delete_branches(base_0523, default_branch(p1))
    # a condition the base meets that routes around P1: "not reached", a warning, exported all the same
    scratch = repo_copy(tmp_path / "repo")
    p1 = patch_named(scratch, "0.5.23", "P1")
    text = p1.path.read_text()
    p1.path.write_text(text.replace("\nReached-If: ", "\nUnreached-If: sglang/srt/environ.py ~ SGLANG_SM120_FLASHMLA_BACKEND\n"
                                    "Reached-If: ", 1))
    proc = cli(scratch, "export-pr", "P1", "--repo", str(base_0523), "--base", "v0.5.23", "--line", "0.5.23")
    try:
        assert proc.returncode == 0, proc.stderr
        assert f"warning: {p1.name} is not reached on the base (sglang/srt/environ.py now matches" in proc.stderr
    finally:
        delete_branches(base_0523, default_branch(p1))


def test_p3_onto_a_base_like_0_5_23_is_refused_naming_why_the_line_retired_it(copy, base_0523):
    """0.5.23 retired P3 (patch set 0.1.10): its record's conditions (the fused MHC post/pre boundary) hold on the
    0.5.23 base, so the 0.5.14 line's P3 is refused there, the reason named, nothing made; --force exports it."""
    p3 = patch_named(copy, "0.5.14", "P3")
    [record] = [r for r in load_records(copy / "patches", "sglang") if r.subject == p3.subject]
    assert record.line == "0.5.23" and record.status == "retired" and "0.07-0.12 %" in record.reason
    proc = cli(copy, "export-pr", "P3", "--repo", str(base_0523), "--base", "v0.5.23", "--line", "0.5.14")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"{p3.name}: retired by line 0.5.23's retired.toml: {record.reason}; pass --force" in line, line
    assert git(base_0523, "branch", "--list", "pr/*") == ""


def test_a_patch_its_own_line_retired_is_refused_saying_so(base_0523, tmp_path):
    """A record of the patch's own line with no conditions applies on any base."""
    scratch = repo_copy(tmp_path / "repo")
    p1 = patch_named(scratch, "0.5.23", "P1")
    with open(scratch / "patches/0.5.23/sglang/retired.toml", "a", encoding="utf-8") as f:
        f.write(f'\n[[retired]]\nlabel = "P1"\nsubject = "{p1.subject}"\nstatus = "retired"\n'
                'reason = "runs on one call of a forward here; not worth carrying"\n')
    proc = cli(scratch, "export-pr", "P1", "--repo", str(base_0523), "--base", "v0.5.23", "--line", "0.5.23")
    assert proc.returncode == 1
    assert (f"{p1.name}: retired by line 0.5.23's retired.toml: runs on one call of a forward here; not worth "
            "carrying; pass --force") in proc.stderr
    proc = cli(scratch, "export-pr", "P1", "--repo", str(base_0523), "--base", "v0.5.23", "--line", "0.5.23", "--force")
    try:
        assert proc.returncode == 0, proc.stderr
    finally:
        delete_branches(base_0523, default_branch(p1))


def test_the_retired_records_tell_what_the_readers_page_tells():
    """docs/retired_0.5.23.md's table and the line's retired.toml: the same patches, definitions and releases."""
    rows = [r for r in (REPO / "docs/retired_0.5.23.md").read_text().splitlines() if re.match(r"\| P\d", r)]
    records = {r.subject: r for r in load_records(REPO / "patches", "sglang") if r.line == "0.5.23"}
    assert len(rows) == len(records)
    labels = re.compile(r'label = "(P\d)"\nsubject = "(.*)"')
    by_label = dict(labels.findall((REPO / "patches/0.5.23/sglang/retired.toml").read_text()))
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        record = records[by_label[cells[0].split()[0]]]
        if record.status == "retired":     # not replaced upstream: the page says so, with no definition or release
            assert cells[1].startswith("retired") and cells[2] == "none" and cells[3] == "-", cells
            continue
        assert cells[3] == record.release
        names = [r.name for r in record.by if r.name]     # a literal is the data's evidence line, not the page's
        assert names and all(n in cells[2] for n in names), (cells[0], names)
