"""pyproject.toml makes the project's Python an installable distribution: installed outside the checkout, the
`patchkit` console script runs the same CLI as `python apply.py`, with every engine subpackage on board, on the
series it ships as package data (or the checkout it runs in, or `--repo DIR`), and it installs no generic
top-level name (`apply`, `serving`, `harness`): only `patchkit` (the engine) and `dsv4_sm120_overlay`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
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


@pytest.fixture
def outside():
    """A folder in the system's temporary directory, outside every checkout: `make test` keeps pytest's own
    temporary files inside this checkout (build/pytest-tmp), where the installed command would find the checkout
    by walking up from its working directory."""
    where = Path(tempfile.mkdtemp(prefix="patchkit-outside-"))
    assert not any((d / ".git").exists() for d in (where, *where.parents)), where
    yield where
    shutil.rmtree(where, ignore_errors=True)


def test_installed_command_works_outside_a_checkout_on_the_shipped_series(installed, pristine_root, tmp_path, outside):
    site, _, _ = installed
    shipped = site / "dsv4_sm120_overlay"
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


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    proc = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def test_the_installed_package_ships_every_file_of_the_series_and_runs_export_pr(installed, tmp_path, outside):
    """Everything under patches/ and overlay/ is package data (the PR texts and upstream tests export-pr needs),
    and installed export-pr, run outside any checkout, makes the branch and writes the PR body into the upstream
    checkout's own git directory (the only tree the command writes to), not into the read-only package."""
    site, _, _ = installed
    shipped = site / "dsv4_sm120_overlay"
    for top in ("patches", "overlay"):
        want = sorted(p.relative_to(REPO).as_posix() for p in (REPO / top).rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts)
        have = sorted(p.relative_to(shipped).as_posix() for p in (shipped / top).rglob("*") if p.is_file())
        assert have == want, sorted(set(want) ^ set(have))

    # an upstream checkout holding only the pinned files the patch touches, in repo layout, tagged as the release:
    # enough for a patch whose PR prints no command needing more of upstream's tree (tests/pr/test_export_pr.py
    # exports every patch on whole checkouts)
    from patchkit.pr.prdata import load_pr_data

    engine = Engine.from_repo(REPO)
    name, patch = next((n, p) for n in engine.lock.upstreams for p in engine.series(n).patches
                       if (data := load_pr_data(engine.patches_root / n)) and p.name in data.patches
                       and not getattr(data.patches[p.name], "reproduce", None) and not p.trailer("Depends-On"))
    up = engine.lock.upstream(name)
    checkout = tmp_path / "upstream"
    checkout.mkdir()
    _git(checkout, "init", "-q", "-b", "main")
    pristine = engine.pristine(name)
    for rel in patch.paths:
        (checkout / up.repo_prefix / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / up.repo_prefix / rel).write_bytes(pristine.read(rel))
    _git(checkout, "add", "-A")
    _git(checkout, "-c", "user.name=u", "-c", "user.email=u@example.invalid", "commit", "-qm", f"Release {up.tag}")
    _git(checkout, "tag", up.tag)
    _git(checkout, "config", "user.name", "Jane Reviewer")
    _git(checkout, "config", "user.email", "jane@example.org")
    proc = run(installed, "export-pr", f"{name}/{patch.name}", "--repo", str(checkout), cwd=outside)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    branch = next(line.split()[3] for line in proc.stdout.splitlines() if ": branch " in line)
    body = Path(_git(checkout, "rev-parse", "--absolute-git-dir").strip()) / "pr-bodies" / (branch.replace("/", "-") + ".md")
    assert f"PR body written to {body}" in proc.stdout and body.read_text().strip(), proc.stdout
    assert _git(checkout, "status", "--porcelain") == "" and sorted(p.name for p in outside.iterdir()) == []
    assert not (shipped / "build").exists()
    # a command that needs a checkout's build/ names only flags it has
    worktree = run(installed, "worktree", name, cwd=outside)
    assert worktree.returncode == 1 and "--target" not in worktree.stderr and "--dir DIR" in worktree.stderr, \
        worktree.stderr


def test_installed_doctor_names_the_install_command_of_the_package_not_make(installed, tmp_path):
    """Outside a checkout `make install` means nothing: doctor names the module the package ships, and it runs."""
    missing = tmp_path / "no-env"
    proc = run(installed, "doctor", "--venv", str(missing), cwd=tmp_path)
    assert proc.returncode == 1 and "make install" not in proc.stdout, proc.stdout + proc.stderr
    command = f"-m dsv4_sm120_overlay.serving.install --venv {missing}"
    assert f"no sglang environment at {missing}: run " in proc.stdout and command in proc.stdout, proc.stdout
    helped = subprocess.run([sys.executable, "-P", "-m", "dsv4_sm120_overlay.serving.install", "--help"], cwd=tmp_path,
                            env=installed[2], capture_output=True, text=True)
    assert helped.returncode == 0 and "--venv" in helped.stdout, helped.stdout + helped.stderr


def test_the_distribution_version_is_the_patch_set_version_pin_lock_gives(installed):
    """One copy of the version: pin.lock's [line.*.patchset] version. Where lines differ, the highest: a change
    released on any line under a version above every other line's raises the distribution's version too."""
    from importlib import metadata

    from patchkit.lockfile import load_lock, version_key

    site, _, _ = installed
    lock = load_lock(REPO / "pin.lock")
    want = max(lock.patchsets.values(), key=version_key)
    dist = next(metadata.distributions(path=[str(site)]))
    assert (dist.metadata["Name"], dist.version) == ("dsv4-sm120-overlay", want)


def test_where_the_lines_versions_differ_the_distribution_takes_the_highest(tmp_path):
    from version import distribution_version

    lock = tmp_path / "pin.lock"
    lock.write_text('[line."0.5.14".patchset]\nversion = "0.1.10"\n\n[line."0.5.23".patchset]\nversion = "0.1.9"\n')
    assert distribution_version(lock) == "0.1.10"         # by number, not by text, and not the newest line's
    lock.write_text('[line."0.5.14".runtime]\ntorch = "2.11.0"\n')
    with pytest.raises(ValueError, match=r'expected a \[line."NAME".patchset\] version .*, found none'):
        distribution_version(lock)


def test_installed_field_check_runs_outside_a_checkout(installed, tmp_path):
    """field-check is the installed package's own: without a GPU it refuses in one line (exit 2); its stages, decode
    cases and float64 check import from the package alone (bench/, harness/ and the checkout absent) and write a
    report, here with the card's hardware query stood in and no sglang installed (every kernel row: kernel missing)."""
    proc = run(installed, "field-check", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("field-check: expected a CUDA GPU visible to torch") and not (tmp_path / "out").exists()
    script = (
        "import datetime, types\n"
        "from dsv4_sm120_overlay.serving import field_check as F, field_kernels as K, field_rows as R, mma_decode_cases\n"
        "from patchkit.engine import Engine\n"
        "import pathlib\nfrom dsv4_sm120_overlay.serving import REPO\n"
        "props = types.SimpleNamespace(name='NVIDIA RTX PRO 6000', major=12, minor=0, multi_processor_count=188,"
        " total_memory=96 * 2 ** 30)\n"
        "torch = types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_properties=lambda i: props,"
        " device_count=lambda: 1), version=types.SimpleNamespace(cuda='12.9'))\n"
        "engine = Engine.from_repo(REPO, read_only=True, line='0.5.23')\n"
        "report = F.new_report(engine.patch_set(), '0.5.23', datetime.date(2026, 12, 7))\n"
        "F.run(report, K.InstalledCall(R.LINES['0.5.23']), torch, pathlib.Path('out'), print, rows=R.p1_rows()[:2])\n"
        "print(*F.write_report(report, pathlib.Path('out'), F.private_words()))\n")
    site, _, env = installed
    proc = subprocess.run([sys.executable, "-P", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    js = tmp_path / "out" / "field-report-nvidia-rtx-pro-6000-2026-12-07.json"
    data = json.loads(js.read_text())
    assert data["machine"]["sm"] == "sm_120" and len(data["stages"]["p1"]) == 2
    assert all(r["reason"].startswith("kernel missing:") for r in data["stages"]["p1"] + data["stages"]["release"])
