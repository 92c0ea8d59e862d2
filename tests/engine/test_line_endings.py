"""Patches are bytes: a clone whose git converts line endings (core.autocrlf=true) must still check out every
file of patches/ and overlay/ exactly as committed (.gitattributes: -text), and a patch that was converted to
CRLF anyway is refused with words about line endings, not about file names."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.engine_fixtures import REPO, copy_repo_data
from tests.fault_fixtures import cli, demo_repo, one_line_error


def _git(cwd, *args):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def _data(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for d in ("patches", "overlay")
            for p in sorted((root / d).rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def test_a_clone_with_core_autocrlf_true_checks_out_the_patches_byte_for_byte_and_check_passes(tmp_path):
    src = copy_repo_data(tmp_path / "src")
    if (REPO / ".gitattributes").is_file():
        shutil.copy2(REPO / ".gitattributes", src / ".gitattributes")
    _git(src, "init", "-q", "-b", "main")
    _git(src, "-c", "core.autocrlf=false", "add", "-A")
    _git(src, "-c", "core.autocrlf=false", "commit", "-qm", "the repository")
    _git(tmp_path, "clone", "-q", "-c", "core.autocrlf=true", str(src), "clone")
    clone = tmp_path / "clone"
    assert _git(clone, "config", "core.autocrlf").stdout.strip() == "true"
    want, got = _data(src), _data(clone)
    changed = sorted(k for k in want if got.get(k) != want[k])
    assert set(got) == set(want) and changed == [], changed[:5]
    proc = subprocess.run([sys.executable, "apply.py", "check"], cwd=clone, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr


def test_a_patch_converted_to_crlf_is_refused_naming_line_endings(tmp_path):
    """It was refused as "control characters in file names" ('demo/core.py\\r'), without a word about CRLF."""
    repo, env = demo_repo(tmp_path / "r")
    patch = sorted((repo / "patches" / "1.0" / "demo").glob("*.patch"))[0]
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\r\n"))
    for args in (["check"], ["status", "--target", str(tmp_path)]):
        proc = cli(repo, *args, env=env)
        assert one_line_error(proc) and patch.name in proc.stderr, (args, proc.stderr)
        assert "CRLF" in proc.stderr and "line endings" in proc.stderr and "control characters" not in proc.stderr, \
            proc.stderr


def test_a_patch_of_a_crlf_file_is_not_taken_for_a_converted_patch(tmp_path):
    """Content lines may end in CR (a patch of a file with CRLF endings): only git's own lines are looked at."""
    from patchkit.patchfile import parse_patch

    repo, _ = demo_repo(tmp_path / "r")
    patch = sorted((repo / "patches" / "1.0" / "demo").glob("*.patch"))[0]
    text = patch.read_bytes().split(b"\n")
    text = [l + b"\r" if l[:1] in (b"+", b"-", b" ") and not l.startswith((b"+++", b"---")) and l.strip() else l
            for l in text]
    patch.write_bytes(b"\n".join(text))
    assert parse_patch(patch).paths
