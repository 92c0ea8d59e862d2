"""The one place patchkit runs git, in one of two modes chosen by the function called:

* `git()`: patchkit's own scratch repositories (worktrees, rebase repos, round trips), isolated from the
  user's and the system's git config, with a fixed identity and dates so its commits are reproducible.
* `checkout_git()`: the user's own checkout (export-pr), with the user's configuration kept.

Both return the CompletedProcess (stdout as text, or bytes with text=False; stdin through `input`)
and, with check=True, turn a failure into one PatchkitError line.
"""
from __future__ import annotations

import email.utils
import os
import subprocess
from pathlib import Path

from . import PatchkitError

# Fixed identity and dates: commits made by patchkit must be reproducible byte for byte.
IDENTITY = {
    "GIT_AUTHOR_NAME": "patchkit",
    "GIT_AUTHOR_EMAIL": "patchkit@invalid",
    "GIT_COMMITTER_NAME": "patchkit",
    "GIT_COMMITTER_EMAIL": "patchkit@invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+00:00",
}


def _scratch_env(extra: dict | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    env.update(IDENTITY)
    env.update(extra or {})
    return env


def _spawn(cwd: Path, args: tuple[str, ...], env: dict, input, text: bool, check: bool,
           options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", *options, *args], cwd=cwd, env=env, input=input, capture_output=True,
                          **({"encoding": "utf-8", "errors": "replace"} if text else {}))
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        out = proc.stdout if text else proc.stdout.decode(errors="replace")
        msg = (err or out).strip().splitlines()
        raise PatchkitError(f"git {args[0]} failed in {cwd}: {msg[0] if msg else 'exit %d' % proc.returncode}")
    return proc


def git(cwd: Path, *args: str, check: bool = True, env: dict | None = None, input=None,
        text: bool = True) -> subprocess.CompletedProcess:
    """git in a scratch repository of patchkit's, isolated from every git config but its own."""
    return _spawn(cwd, args, _scratch_env(env), input, text, check,
                  options=("-c", "core.autocrlf=false", "-c", "commit.gpgsign=false",
                           "-c", "gc.auto=0"))   # no background gc writing into a repo about to be removed


def identity_line(role: str) -> str:
    """`NAME <EMAIL> SECONDS +HHMM` of IDENTITY's author or committer: what `git commit` writes for it."""
    import datetime as dt

    when = dt.datetime.fromisoformat(IDENTITY[f"GIT_{role}_DATE"])
    offset = int(when.utcoffset().total_seconds() // 60)
    zone = f"{'+' if offset >= 0 else '-'}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
    return f"{IDENTITY[f'GIT_{role}_NAME']} <{IDENTITY[f'GIT_{role}_EMAIL']}> {int(when.timestamp())} {zone}"


def git_import(cwd: Path, chunks) -> None:
    """`git fast-import` in a scratch repository, fed the byte chunks of its stream (a stream that stops short of
    its `done` fails instead of half-importing). A failure is one PatchkitError line, as git() gives."""
    import tempfile

    with tempfile.TemporaryFile() as err:      # a file, not a pipe: git's errors never block the feed
        proc = subprocess.Popen(["git", "-c", "gc.auto=0", "fast-import", "--quiet", "--done"], cwd=cwd,
                                env=_scratch_env(None), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
        try:
            try:
                for chunk in chunks:
                    proc.stdin.write(chunk)
            finally:
                try:
                    proc.stdin.close()         # without `done` first, git refuses the stream
                except BrokenPipeError:
                    pass
        except BrokenPipeError:
            pass                               # git stopped reading: its own error, below, says why
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if proc.wait() != 0:
            err.seek(0)
            msg = err.read().decode(errors="replace").strip().splitlines()
            raise PatchkitError(f"git fast-import failed in {cwd}: {msg[0] if msg else 'exit %d' % proc.returncode}")


def checkout_git(repo: Path, *args: str, check: bool = True, env: dict | None = None, input=None,
                 text: bool = True) -> subprocess.CompletedProcess:
    """git in the user's checkout, with the user's own configuration (signing, hooks, identity)."""
    return _spawn(repo, args, {**os.environ, "LC_ALL": "C", **(env or {})}, input, text, check)


def apply_failure(stderr: str) -> str:
    """Why `git apply` refused, in one line, as git names it: `patch failed: FILE:LINE` for a hunk whose context
    is not there (LINE: the hunk's first line in the file), else its first error. git prints the hunk's
    context after "while searching for:" over many lines; that header alone names nothing."""
    errors = [l[len("error: "):] for l in stderr.splitlines() if l.startswith("error: ")]
    failed = [e for e in errors if e.startswith("patch failed: ")]
    if failed:
        return f"{failed[0]} (its context lines are not at that line or near it)"
    useful = [e for e in errors if e != "while searching for:"]
    return useful[0] if useful else (stderr.strip().splitlines() or ["git apply failed"])[0][:200]


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


def author_env(author: str, date: str) -> dict:
    """GIT_AUTHOR_* for a commit that keeps a patch's author ('Name <email>') and date (as its header says)."""
    env = {}
    if author:
        name, addr = email.utils.parseaddr(author)
        env.update(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=addr)
    if date:
        env["GIT_AUTHOR_DATE"] = date
    return env
