"""pyproject.toml makes the project's Python an installable distribution: installed outside the checkout, the
`patchkit` console script runs the same CLI as `python apply.py`, with every engine subpackage on board."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.engine_fixtures import REPO


def test_installed_patchkit_command_checks_the_series(tmp_path):
    # from a copy of the sources: setuptools builds in the source tree, and a build/lib left there would hide
    # a package the configuration leaves out
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", "build", ".venv*", "*.egg-info", "bench",
                                                                "__pycache__", ".carry", ".whl"))
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                              "--target", str(site), str(source)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    script = site / "bin" / "patchkit"
    assert script.is_file(), sorted(p.name for p in site.iterdir())
    # only the installed copy is importable: -P keeps the checkout (cwd) off sys.path
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-P", str(script), "check"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "exact, round-trips" in proc.stdout
    probe = subprocess.run([sys.executable, "-P", "-c", "import apply, patchkit; print(apply.__file__, patchkit.__file__)"],
                           cwd=REPO, env=env, capture_output=True, text=True)
    assert all(Path(p).is_relative_to(site) for p in probe.stdout.split()), probe.stdout + probe.stderr
    outside = subprocess.run([sys.executable, "-P", str(script), "status"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)
    assert outside.returncode == 1 and outside.stderr.startswith("error: expected a pin.lock"), outside.stderr
