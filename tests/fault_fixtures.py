"""Small crafted upstreams for the fault-injection suite (tests/test_faults_*.py).

A two-file package `demo` is built as real wheels (with a RECORD) in tmp_path, pinned by a pin.lock of
its own, and patched by a two-patch series made with git format-patch, as the real series is. A PEP 503
index on disk serves its releases through pip's own configuration (pip_env), so that `rebase` runs as it
does against a package index, offline and in seconds. Nothing here imitates SGLang: these tests exercise
patchkit, which is generic; the real pinned wheels are used where the property depends on them
(tests/faults/test_faults_unpack.py).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from tests.engine_fixtures import REPO
from patchkit.hashing import record_digest, sha256_file

PACKAGE = "demo"

CORE_10 = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12))
UTIL_10 = "".join(f"U{i} = {i}\n" for i in range(20))
# 1.1 inserts lines at the top of core.py (patch 1 applies with an offset) and leaves util.py alone
RELEASES = {
    "1.0": {"demo/__init__.py": "", "demo/core.py": CORE_10, "demo/util.py": UTIL_10},
    "1.1": {"demo/__init__.py": "", "demo/core.py": '"""demo 1.1"""\nimport os\n\n\n' + CORE_10,
            "demo/util.py": UTIL_10},
}
EXTRA = "demo/extra.py"   # the overlay file patch 1 claims


def wheel_name(version: str) -> str:
    return f"{PACKAGE}-{version}-py3-none-any.whl"


def make_wheel(dest: Path, version: str, files: dict[str, bytes | str], extra: dict[str, bytes] | None = None,
               record_override: dict[str, str] | None = None) -> Path:
    """A wheel holding `files` and a RECORD of them; `extra` entries are added without a RECORD line
    (a crafted wheel), `record_override` replaces the RECORD line of a path."""
    dest.mkdir(parents=True, exist_ok=True)
    info = f"{PACKAGE}-{version}.dist-info"
    entries = {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}
    entries[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {version}\n\n".encode()
    entries[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    lines = []
    for name, data in entries.items():
        lines.append((record_override or {}).get(name, f"{name},{record_digest(data)},{len(data)}"))
    lines.append(f"{info}/RECORD,,")
    entries[f"{info}/RECORD"] = ("\n".join(lines) + "\n").encode()
    entries.update(extra or {})
    path = dest / wheel_name(version)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries.items():
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    return path


def sha256(path: Path) -> str:
    return sha256_file(path)


LINE = "1.0"          # the demo repository's one release line (patches/1.0/demo, overlay/1.0/demo)


def pin_lock(wheel: Path, version: str, line: str = LINE) -> str:
    return (f'[line."{line}".upstream.{PACKAGE}]\npackage = "{PACKAGE}"\nversion = "{version}"\nartifact = "{wheel.name}"\n'
            f'sha256 = "{sha256(wheel)}"\nroot = "{PACKAGE}"\nrepo_prefix = ""\ntag = "v{version}"\n')


def _series(dest: Path) -> list[Path]:
    """Two patches on demo 1.0, made and exported with patchkit's own git settings."""
    from patchkit.gitcmd import git, init_repo
    from patchkit.worktree import FORMAT_PATCH_ARGS, PRISTINE_TAG

    wt = init_repo(dest / "author")
    for rel, text in RELEASES["1.0"].items():
        (wt / rel).parent.mkdir(parents=True, exist_ok=True)
        (wt / rel).write_text(text)
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "pristine demo 1.0")
    git(wt, "tag", PRISTINE_TAG)
    trailers = "Upstream-Status: Pending\nEvidence: none\nTest: tests/faults/test_faults_paths.py"
    core = (wt / "demo/core.py").read_text().replace("return x + 5\n", "from demo.extra import g\n    return g(x) + 5\n")
    (wt / "demo/core.py").write_text(core)
    git(wt, "commit", "-qam", f"demo: route f5 through extra.g\n\nwhy\n\n{trailers}\nOverlay: {EXTRA}\n")
    (wt / "demo/util.py").write_text(UTIL_10.replace("U7 = 7\n", "U7 = 70\n"))
    git(wt, "commit", "-qam", f"demo: U7 is seventy\n\nwhy\n\n{trailers}\n")
    out = git(wt, *FORMAT_PATCH_ARGS, "-o", str(dest / "out"), f"{PRISTINE_TAG}..HEAD").stdout.split()
    return [Path(p) for p in out]


def demo_repo(tmp: Path) -> tuple[Path, dict]:
    """(repository, environment): patchkit's CLI + pin.lock + patches/demo + overlay/ pinned to demo 1.0,
    and a private artifact cache already holding the 1.0 wheel."""
    repo = tmp / "repo"
    repo.mkdir(parents=True)
    shutil.copy2(REPO / "apply.py", repo / "apply.py")
    for code in ("patchkit", "serving"):   # the CLI: apply.py adds serving's doctor subcommand
        shutil.copytree(REPO / code, repo / code, ignore=shutil.ignore_patterns("__pycache__"))
    wheel = make_wheel(tmp / "wheels", "1.0", RELEASES["1.0"])
    cache = tmp / "cache" / "artifacts"
    cache.mkdir(parents=True)
    shutil.copy2(wheel, cache / wheel.name)
    (repo / "pin.lock").write_text(pin_lock(wheel, "1.0"))
    patches = _series(tmp / "series")
    (repo / "patches" / LINE / PACKAGE).mkdir(parents=True)
    for p in patches:
        shutil.copy2(p, repo / "patches" / LINE / PACKAGE / p.name)
    (repo / "patches" / LINE / PACKAGE / "series").write_text("".join(p.name + "\n" for p in patches))
    (repo / "overlay" / LINE / EXTRA).parent.mkdir(parents=True)
    (repo / "overlay" / LINE / EXTRA).write_text("def g(x):\n    return 2 * x\n")
    # PATCHKIT_LINE unset: the test session's line (tests/conftest.py) is not one of this repository's
    return repo, {"PATCHKIT_CACHE": str(tmp / "cache"), "PATCHKIT_LOCK_WAIT": "0", "PATCHKIT_LINE": None}


def demo_target(tmp: Path, name: str = "site") -> Path:
    """A site-packages-like directory holding pristine demo 1.0 (unpacked by hand: no patchkit code)."""
    site = tmp / name
    with zipfile.ZipFile(make_wheel(tmp / "target-wheel", "1.0", RELEASES["1.0"])) as z:
        z.extractall(site)
    return site


def cli(repo: Path, *args, env: dict | None = None, background: bool = False):
    """apply.py in `repo`, with os.environ updated by `env` (a None value unsets the variable)."""
    cmd = [sys.executable, str(repo / "apply.py"), *args]
    full_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    if background:
        return subprocess.Popen(cmd, cwd=repo, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=repo, env=full_env, capture_output=True, text=True, timeout=120)


def one_line_error(proc) -> bool:
    """A failure as the CLI promises it: exit 1, one `error:` line (last on stderr, after any notes), no traceback."""
    lines = proc.stderr.strip().splitlines()
    return (proc.returncode == 1 and bool(lines) and lines[-1].startswith("error: ")
            and sum(l.startswith("error") for l in lines) == 1 and "Traceback" not in proc.stderr)


def wait_for(path: Path, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not Path(path).exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def data_snapshot(repo: Path) -> dict[str, bytes]:
    """pin.lock, patches/ and overlay/ of a repository, byte for byte."""
    out = {"pin.lock": (repo / "pin.lock").read_bytes()}
    for d in ("patches", "overlay"):
        if (repo / d).is_dir():
            out.update({f"{d}/{f.relative_to(repo / d).as_posix()}": f.read_bytes()
                        for f in sorted((repo / d).rglob("*")) if f.is_file() and "__pycache__" not in f.parts})
    return out


def file_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 simple index on disk serving `wheels` (with #sha256= fragments); its file:// URL."""
    from patchkit.names import canonical_name

    names = sorted({canonical_name(w.name.split("-")[0]) for w in wheels})
    for name in names:
        page = root / "simple" / name
        page.mkdir(parents=True)
        links = []
        for w in (w for w in wheels if canonical_name(w.name.split("-")[0]) == name):
            shutil.copy2(w, page / w.name)
            links.append(f'<a href="{w.name}#sha256={sha256(w)}">{w.name}</a>')
        (page / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    (root / "simple" / "index.html").write_text("".join(f'<a href="{n}/">{n}</a>\n' for n in names))
    return (root / "simple").as_uri()


def pip_env(tmp: Path, conf: str | None = None, **variables: str) -> dict:
    """Environment updates (for cli()) under which pip reads only what is given here.

    The machine's PIP_* variables are unset; `conf` becomes the only pip.conf that can name an index
    (PIP_CONFIG_FILE also drops the user's pip.conf; XDG_CONFIG_DIRS drops /etc/xdg/pip/pip.conf; pip
    still reads /etc/pip.conf, so tests check that nothing of the machine's shows in `pip config list`).
    Without `conf` pip reads no file at all (PIP_CONFIG_FILE=os.devnull). `variables` are added last.
    """
    env: dict = {k: None for k in os.environ if k.startswith("PIP_")}
    (tmp / "no-xdg").mkdir(parents=True, exist_ok=True)
    env["XDG_CONFIG_DIRS"] = str(tmp / "no-xdg")
    if conf is None:
        env["PIP_CONFIG_FILE"] = os.devnull
    else:
        (tmp / "pip.conf").write_text(conf)
        env["PIP_CONFIG_FILE"] = str(tmp / "pip.conf")
    return {**env, **variables}


def start_paused(repo, env, tmp_path, *args, point: str):
    """Start `apply.py ARGS` in the background and return once it is paused at `point` (holding its lock)."""
    flag = tmp_path / "release"
    env = {**env, "PATCHKIT_TEST_FAULT": point, "PATCHKIT_TEST_PAUSE": str(flag)}
    proc = cli(repo, *args, env=env, background=True)
    if not wait_for(str(flag) + ".waiting", 60):
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{args} never reached the pause point {point}: rc {proc.returncode}\n{out}\n{err}")
    return proc, flag


def finish_paused(proc, flag):
    flag.touch()
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err
