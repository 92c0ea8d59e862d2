"""pyproject.toml makes the project's Python an installable distribution: installed outside the checkout, the
`patchkit` console script runs the same CLI as `python apply.py`, with every engine subpackage on board, on the
series it ships as package data (or the checkout it runs in, or `--repo DIR`), and it installs no generic
top-level name (`apply`, `serving`, `harness`): only `patchkit` (the engine) and `dsv4_sm120_overlay`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import attestation
from patchkit.engine import Engine
from tests.engine_fixtures import REPO


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site, script, env): a plain `pip install` of a copy of the sources into a bare directory."""
    tmp = tmp_path_factory.mktemp("package")
    # from a copy of the sources: setuptools builds in the source tree, and a build/lib left there would hide
    # a package the configuration leaves out
    source = tmp / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", "build", ".venv*", "*.egg-info", "bench",
                                                                "__pycache__", ".carry", ".whl"))
    site = tmp / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                              "--target", str(site), str(source)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    script = site / "bin" / "patchkit"
    assert script.is_file(), sorted(p.name for p in site.iterdir())
    # only the installed copy is importable: -P keeps the checkout (cwd) off sys.path
    return site, script, {**os.environ, "PYTHONPATH": str(site)}


def run(installed, *args, cwd):
    site, script, env = installed
    env = {**env, "PATCHKIT_LINE": os.environ["PATCHKIT_LINE"]}    # the test's line (set after the module fixture)
    return subprocess.run([sys.executable, "-P", str(script), *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_installed_patchkit_command_checks_the_series(installed):
    site, _, env = installed
    proc = run(installed, "check", cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "exact, round-trips" in proc.stdout
    probe = subprocess.run([sys.executable, "-P", "-c", "import dsv4_sm120_overlay.apply as a, patchkit; "
                            "print(a.__file__, patchkit.__file__)"], cwd=REPO, env=env, capture_output=True, text=True)
    assert all(Path(p).is_relative_to(site) for p in probe.stdout.split()), probe.stdout + probe.stderr


def test_only_namespaced_packages_are_installed(installed):
    site, _, env = installed
    top = sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info"))
    assert top == ["bin", "dsv4_sm120_overlay", "patchkit"], top
    for name in ("apply", "serving", "harness"):
        probe = subprocess.run([sys.executable, "-P", "-c", f"import {name}"], cwd=site.parent, env=env,
                               capture_output=True, text=True)
        assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr, (name, probe.stderr)
    # every package of the engine and of serving/ is in the wheel (pyproject.toml lists them by hand)
    for src, dest in (("patchkit", site / "patchkit"), ("serving", site / "dsv4_sm120_overlay" / "serving")):
        for d in (REPO / src).rglob("*"):
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py")):
                rel = d.relative_to(REPO / src)
                assert sorted(f.name for f in (dest / rel).glob("*.py")) == sorted(f.name for f in d.glob("*.py")), rel
    for name in ("pin.lock", "CHANGELOG.md", "LICENSE"):
        assert (site / "dsv4_sm120_overlay" / name).read_bytes() == (REPO / name).read_bytes(), name


def test_installed_command_works_outside_a_checkout_on_the_shipped_series(installed, pristine_root, tmp_path):
    site, _, _ = installed
    shipped = site / "dsv4_sm120_overlay"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    helped = run(installed, "--help", cwd=outside)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: patchkit "), helped.stdout + helped.stderr
    ident = Engine.from_repo(REPO).patch_set()
    version = run(installed, "--version", cwd=outside)
    assert version.stdout.startswith(f"patch set: line {ident.line}, version {ident.version}, series digest "
                                     f"{ident.digest} ({shipped})"), version.stdout + version.stderr
    check = run(installed, "check", cwd=outside)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert "exact, round-trips" in check.stdout and f"records series digest {ident.digest[:16]}" in check.stdout

    target = tmp_path / "site"
    shutil.copytree(pristine_root, target)
    shipped_before = {p: p.read_bytes() for p in shipped.rglob("*") if p.is_file()}
    assert run(installed, "apply", "--target", str(target), cwd=outside).returncode == 0
    status = run(installed, "status", "--target", str(target), cwd=outside)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"target {target}: applied" in status.stdout
    assert f"attestation: line {ident.line}, version {ident.version}" in status.stdout and "(this patch set)" in status.stdout
    assert attestation.read(target)["series_digest"] == ident.digest
    # the shipped data is read, never written: no build/ inside the installed package, not one byte changed
    assert {p: p.read_bytes() for p in shipped.rglob("*") if p.is_file()} == shipped_before
    assert not (shipped / "build").exists() and sorted(p.name for p in outside.iterdir()) == []
    # what needs a checkout's build/ is refused in one line
    bare = run(installed, "status", cwd=outside)
    assert bare.returncode == 1 and bare.stderr.count("\n") == 1
    assert "found the read-only series an installed package ships: pass --target DIR, or --repo DIR" in bare.stderr


def test_installed_command_takes_a_repo_it_is_given(installed, tmp_path):
    given = run(installed, "--repo", str(REPO), "--version", cwd=tmp_path)
    assert given.returncode == 0 and given.stdout.rstrip().endswith(f"({REPO})"), given.stdout + given.stderr
    bad = run(installed, "--repo", str(tmp_path), "check", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith(f"error: --repo {tmp_path}: expected a directory holding "
                                                         "pin.lock, found none"), bad.stderr
