"""export-pr on the default line (0.5.23) finds a patch by its exact name only (label, NNNN, file name or stem),
through the series' one lookup, and reads the line's retired.toml first: a label the line retired is refused with
the recorded reason, exit 1, nothing written.

The checkouts are what `apply.py wheel-checkout` builds from the pinned wheels (the release's files at the
repository's layout, one commit on main tagged as the release). No --line is passed: the default line is the one
these tests run on (tests/conftest.py sets PATCHKIT_LINE as a user's shell would).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.lockfile import load_lock
from patchkit.pr.retired import load_records
from patchkit.series import load_series
from tests.conftest import REPO
from tests.pr.test_export_pr import IDENTITY, cli, git
from tests.rebase_cases import repo_copy

LINE = "0.5.23"


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return repo_copy(tmp_path_factory.mktemp("names") / "repo")


def wheel_checkout(copy: Path, upstream: str, where: Path) -> Path:
    repo = where / upstream
    proc = cli(copy, "wheel-checkout", upstream, "--dir", str(repo), "--line", LINE)
    assert proc.returncode == 0, proc.stderr
    git(repo, "config", "user.name", IDENTITY[0])
    git(repo, "config", "user.email", IDENTITY[1])
    return repo


@pytest.fixture(scope="module")
def flashinfer(copy, tmp_path_factory) -> Path:
    return wheel_checkout(copy, "flashinfer", tmp_path_factory.mktemp("fi"))


@pytest.fixture(scope="module")
def sglang(copy, tmp_path_factory) -> Path:
    return wheel_checkout(copy, "sglang", tmp_path_factory.mktemp("sgl"))


def series(name: str):
    up = load_lock(REPO / "pin.lock", LINE).upstream(name)
    return load_series(name, REPO / "patches" / LINE, REPO / "overlay" / LINE, up.root)


def record(label: str):
    (found,) = [r for r in load_records(REPO / "patches", "sglang") if r.line == LINE and r.label == label]
    return found


def nothing_written(copy: Path, checkout: Path) -> None:
    assert git(checkout, "branch", "--list", "pr/*") == ""
    assert not list((copy / "build" / "pr").glob("*.md")) if (copy / "build" / "pr").is_dir() else True


def test_p4_on_a_flashinfer_checkout_is_refused_with_what_replaced_it(copy, flashinfer):
    """P4 is no patch of this line: its retired.toml says upstream's TileLang indexer replaced it. Before: 'P4' was
    a part of 0001-quantization-keep-torch.compile-out-of-the-FP4-JIT-m.patch ("FP4"): P5's branch, exit 0."""
    r = record("P4")
    proc = cli(copy, "export-pr", "P4", "--repo", str(flashinfer))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "P4" in line and f"line {LINE}" in line and r.release in line, line
    assert all(b.text() in line for b in r.by), line
    nothing_written(copy, flashinfer)


def test_p3_on_the_default_line_prints_the_recorded_reason(copy, sglang):
    """Before: "found none", a usage error listing the line's patches, though retired.toml holds P3 and why."""
    r = record("P3")
    assert r.status == "retired"
    proc = cli(copy, "export-pr", "P3", "--repo", str(sglang))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "P3" in line and r.reason in line and "found none" not in line, line
    nothing_written(copy, sglang)


@pytest.mark.parametrize("spec", ["FP4", "fp4", "quantization", "keep-torch", "jit", "00", "P", "0001-quantization"])
def test_a_part_of_a_name_names_no_patch(copy, flashinfer, spec):
    """Never a substring: a usage error listing the line's patches, exit 2, nothing written."""
    proc = cli(copy, "export-pr", spec, "--repo", str(flashinfer))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"'{spec}'" in line and "found none" in line and "P5 = flashinfer/0001" in line, line
    nothing_written(copy, flashinfer)


def test_the_lookup_knows_labels_numbers_file_names_and_stems():
    fi = series("flashinfer")
    p5 = fi.patches[0]
    assert fi.label_of(p5) == "P5"
    for key in ("P5", "p5", "0001", "1", p5.name, p5.name.removesuffix(".patch")):
        assert fi.by_name(key) is p5, key
    for key in ("FP4", "quantization", p5.name[:-7], "0003", "P1", "", "x0001"):
        assert fi.by_name(key) is None, key
    assert series("sglang").by_name("P1").name.startswith("0001-")
    assert series("sglang").by_name("P4") is None
