"""A tree whose attestation names one release line while it holds another line's releases (issue 45, D1).

After `apply --line 1.0 --target T` and a `pip install -U` of the newer release into T, every command used to
send the user to the other line: `apply` said "apply it with --line 1.0", `apply --line 1.0` said "pass --line
1.1", revert and --discard-edits repeated them, and nothing named the way out. The refusal now names the
attestation file, the releases the tree holds, and the one command that resets it.
"""
from __future__ import annotations

import os
import subprocess
import sys

from tests.engine_fixtures import snapshot
from tests.fault_fixtures import cli, one_line_error


def _pip_install(venv, env, requirement):
    """`pip install -U` of one pinned release into the virtual environment, from the test's own index only."""
    full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                           "--disable-pip-version-check", "--no-deps", "--upgrade", requirement],
                          env=full, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def _venv(path):
    """A virtual environment (no pip of its own: the test's pip installs into it) and its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return next((path / "lib").glob("python3*/site-packages"))


def test_a_release_installed_over_an_attested_tree_names_the_attestation_and_the_command_that_resets_it(demo, tmp_path):
    repo, env = demo
    assert cli(repo, "rebase", "--line", "1.0", "--to", "1.1", "--new-line", env=env).returncode == 0
    venv = tmp_path / "venv"
    site = _venv(venv)
    _pip_install(venv, env, "demo==1.0")          # the release of line 1.0, pinned
    assert cli(repo, "apply", "--line", "1.0", "--target", str(site), env=env).returncode == 0
    _pip_install(venv, env, "demo==1.1")          # then -U to the release of line 1.1, pinned
    assert sorted(p.name for p in site.glob("demo-*.dist-info")) == ["demo-1.1.dist-info"]
    manifest = site / ".patchkit-attestation.json"
    assert manifest.is_file()
    before = snapshot(site)
    for args in (["apply"], ["apply", "--line", "1.0"], ["revert"], ["revert", "--line", "1.0"],
                 ["apply", "--discard-edits"], ["apply", "--line", "1.0", "--discard-edits"]):
        proc = cli(repo, *args, "--target", str(site), env=env)
        assert one_line_error(proc), (args, proc.stderr)
        said = proc.stderr
        assert str(manifest) in said and "line 1.0" in said and "demo 1.1" in said, (args, said)
        assert "on demo 1.0" not in said, (args, said)        # the releases the tree holds, not those recorded
        assert f"rm {manifest}" in said and "--line 1.1" in said, (args, said)
        assert snapshot(site) == before
    # status names the same way out (it used to say only "NOT this patch set")
    for line_args in ([], ["--line", "1.0"]):
        status = cli(repo, "status", *line_args, "--target", str(site), env=env)
        assert f"rm {manifest}" in status.stdout and "--line 1.1" in status.stdout, (line_args, status.stdout)
    assert snapshot(site) == before
    # the way out the message gives works
    os.unlink(manifest)
    proc = cli(repo, "apply", "--line", "1.1", "--target", str(site), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = cli(repo, "status", "--line", "1.1", "--target", str(site), env=env)
    assert status.returncode == 0 and status.stdout.rstrip().endswith(": applied"), status.stdout
    assert "line: 1.1; the target carries line 1.1" in status.stdout, status.stdout
