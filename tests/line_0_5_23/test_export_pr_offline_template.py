"""export-pr onto a base with no pull-request template (a wheel checkout has no .github/): the body follows the
upstream's own template where the series' data keeps one (FlashInfer's, beside its series: upstream-pr.toml
`template`), else generic sections; either way the output tells the user to re-export on a clone of upstream.

Before: FlashInfer's body fell back to SGLang-style headings (Motivation, Modifications, ...), which FlashInfer's
CONTRIBUTING.md asks contributors not to use in place of its template, and nothing was said.
"""
from __future__ import annotations


import pytest

from patchkit.patchfile import parse_patch
from patchkit.pr.export import default_branch
from patchkit.pr.template import DEFAULT_TEMPLATE, sections
from tests.pr.test_export_pr import body_of, cli, delete_branches, pr_data
from tests.line_0_5_23.test_export_pr_names import copy, wheel_checkout  # noqa: F401 (fixture)

LINE = "0.5.23"


def headings(text: str) -> list[str]:
    return [s.heading for s in sections(text) if s.heading and not s.heading.startswith("# ")]


@pytest.fixture(scope="module")
def offline(copy, tmp_path_factory):  # noqa: F811
    where = tmp_path_factory.mktemp("offline")
    return {name: wheel_checkout(copy, name, where) for name in ("flashinfer", "sglang")}


def test_flashinfer_body_follows_flashinfers_kept_template(copy, offline):  # noqa: F811
    data = pr_data(copy, "flashinfer", LINE)
    assert data.template is not None and data.template.path.parent == copy / "patches" / LINE / "flashinfer"
    kept = headings(data.template.text)
    assert kept[0] == "## 📌 Description" and "## 🧪 Tests" in kept      # FlashInfer's own sections
    assert not (offline["flashinfer"] / ".github").exists()
    proc = cli(copy, "export-pr", "P5", "--repo", str(offline["flashinfer"]))
    branch = default_branch(parse_patch(data.path.parent / next(f for f, p in data.patches.items() if p.label == "P5")))
    try:
        assert proc.returncode == 0, proc.stderr
        body = body_of(copy, branch)
        assert headings(body) == kept, headings(body)
        assert "## Motivation" not in body and "## Modifications" not in body
        (note,) = [l for l in proc.stdout.splitlines() if "no pull-request template" in l]
        assert str(data.template.path) in note and "re-export on a clone of https://github.com/flashinfer-ai/flashinfer" in note
    finally:
        delete_branches(offline["flashinfer"], branch)


def test_without_a_kept_template_the_user_is_told_to_re_export_on_a_clone(copy, offline):  # noqa: F811
    data = pr_data(copy, "sglang", LINE)
    assert data.template is None
    proc = cli(copy, "export-pr", "P1", "--repo", str(offline["sglang"]))
    p1 = next(f for f, p in data.patches.items() if p.label == "P1")
    branch = default_branch(parse_patch(data.path.parent / p1))
    try:
        assert proc.returncode == 0, proc.stderr
        (note,) = [l for l in proc.stdout.splitlines() if "no pull-request template" in l]
        assert "generic sections" in note and "re-export on a clone of https://github.com/sgl-project/sglang" in note
        body = body_of(copy, branch)
        assert headings(body)[:len(headings(DEFAULT_TEMPLATE))] == headings(DEFAULT_TEMPLATE)
    finally:
        delete_branches(offline["sglang"], branch)
