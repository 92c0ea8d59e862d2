"""docs/rebase.md's offline recipe, run as written: build an upstream checkout from the pinned wheel with
`apply.py wheel-checkout`, give it an identity, and export a patch onto it."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from tests.conftest import REPO
from tests.rebase_cases import repo_copy


def documented_block() -> list[str]:
    text = (REPO / "docs/rebase.md").read_text(encoding="utf-8")
    after = text.split("**Without the git host**", 1)[1]
    block = re.search(r"```\n(.*?)```", after, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_the_documented_offline_checkout_runs_as_written(tmp_path):
    copy = repo_copy(tmp_path / "repo")
    # as a user's shell runs it: no test-run line selection, no git identity but the one the recipe sets
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "PATCHKIT_LINE"}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", PY=sys.executable)
    lines = documented_block()
    assert [shlex.split(line)[:2] for line in lines if line.startswith("python ")] == [
        ["python", "apply.py"], ["python", "apply.py"]]
    for line in lines:      # `python` is this venv's interpreter
        proc = subprocess.run(["bash", "-c", 'python() { "$PY" "$@"; }; set -e; ' + line], cwd=copy, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{line}: {proc.stderr}"
    checkout = copy / "build/upstream/sglang"
    log = subprocess.run(["git", "-C", str(checkout), "log", "--format=%s%n%b", "main"], capture_output=True,
                         text=True, env=env).stdout
    assert "not sgl-project/sglang's history" in log.replace("https://github.com/", "")
    assert subprocess.run(["git", "-C", str(checkout), "tag"], capture_output=True, text=True).stdout.split() == ["v0.5.23"]
    branches = subprocess.run(["git", "-C", str(checkout), "branch", "--list", "pr/*"], capture_output=True,
                              text=True).stdout.split()
    assert len(branches) == 1 and (copy / "build/pr" / (branches[0].replace("/", "-") + ".md")).is_file()
