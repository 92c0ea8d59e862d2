"""Fetching goes through pip's own configuration (issue #15): a pip.conf naming a mirror, or an offline
`--find-links` wheelhouse, is all a user needs for `make apply`.

Every pip here runs under an isolated configuration (fault_fixtures.pip_env): a PEP 503 index on disk named
by a pip.conf alone, or PIP_NO_INDEX=1 with PIP_FIND_LINKS=<wheelhouse> and no config file at all. The
machine's own pip settings never reach it, and nothing needs the network.
"""
from __future__ import annotations

import dataclasses
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fault_fixtures import (EXTRA, LINE, PACKAGE, RELEASES, cli, demo_repo, demo_target, file_index, make_wheel,
                                  one_line_error, pip_env, sha256)
from patchkit import PatchkitError
from patchkit import fetch as fetch_mod
from patchkit.lockfile import Upstream, load_lock

PINNED = f"{PACKAGE}-1.0-py3-none-any.whl"
# The same release built for other hosts: pip must still pick the pinned file, whatever host it runs on.
OTHER_BUILDS = (f"{PACKAGE}-1.0-cp311-cp311-manylinux_2_34_x86_64.whl", f"{PACKAGE}-1.0-cp312-cp312-win_amd64.whl")


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """A plain --find-links directory: demo 1.0 (three builds), demo 1.1, and the real pinned FlashInfer wheel."""
    from tests.conftest import LOCK

    house = tmp_path_factory.mktemp("wheelhouse")
    one = make_wheel(house, "1.0", RELEASES["1.0"])
    make_wheel(house, "1.1", RELEASES["1.1"])
    for name in OTHER_BUILDS:   # same bytes under another name: pip chooses by file name only
        shutil.copy2(one, house / name)
    shutil.copy2(fetch_mod.fetch(LOCK.upstream("flashinfer"), log=lambda *_: None), house)
    return house


@pytest.fixture
def index_url(wheelhouse, tmp_path):
    """A PEP 503 index on disk (simple/<name>/index.html, #sha256= links) serving the wheelhouse."""
    return file_index(tmp_path / "index", sorted(wheelhouse.glob("*.whl")))


def use(monkeypatch, tmp_path, env: dict):
    """This process's environment as `env` updates it (None unsets), with an empty private cache."""
    for key, value in {**env, "PATCHKIT_CACHE": str(tmp_path / "cache")}.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)


def pin(wheelhouse, artifact: str = PINNED, **changes) -> Upstream:
    up = Upstream(name=PACKAGE, package=PACKAGE, version="1.0", artifact=artifact,
                  sha256=sha256(wheelhouse / artifact), root=PACKAGE)
    return dataclasses.replace(up, **changes)


def cached(tmp_path) -> list[str]:
    """Everything in the private cache, temp directories of downloads included."""
    root = tmp_path / "cache" / "artifacts"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def pip_conf(index_url: str) -> str:
    return f"[global]\nindex-url = {index_url}\n"


def pip_sources(env: dict) -> list[str]:
    """The settings of `pip config list` under `env` that say where files come from."""
    full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], env=full, capture_output=True, text=True,
                         check=True).stdout
    keys = ("index-url", "find-links", "no-index", "constraint", "proxy")
    return [line for line in out.splitlines() if any(k in line for k in keys)]


def test_isolated_pip_reads_nothing_of_the_machines_configuration(tmp_path, index_url):
    """What the tests below run under: only the sources given here (the machine may add a cert, never a source)."""
    assert pip_sources(pip_env(tmp_path / "conf", pip_conf(index_url))) == [f"global.index-url='{index_url}'"]
    assert pip_sources(pip_env(tmp_path / "env", PIP_NO_INDEX="1")) == [":env:.no-index='1'"]


def test_pip_conf_naming_a_file_index_serves_the_pinned_wheel_verified(tmp_path, monkeypatch, wheelhouse, index_url):
    use(monkeypatch, tmp_path, pip_env(tmp_path / "pip", pip_conf(index_url)))
    path = fetch_mod.fetch(pin(wheelhouse), log=lambda *_: None)
    assert path == tmp_path / "cache" / "artifacts" / PINNED
    assert sha256(path) == sha256(wheelhouse / PINNED)
    assert cached(tmp_path) == [PINNED]   # no download directory left behind


def test_find_links_wheelhouse_works_with_no_index_at_all(tmp_path, monkeypatch, wheelhouse):
    """Offline: PIP_NO_INDEX=1 and a wheelhouse; the real pinned FlashInfer wheel comes out of it verified."""
    from tests.conftest import LOCK

    use(monkeypatch, tmp_path, pip_env(tmp_path / "pip", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse)))
    flashinfer = LOCK.upstream("flashinfer")
    assert fetch_mod.fetch(flashinfer, log=lambda *_: None).name == flashinfer.artifact
    assert fetch_mod.fetch(pin(wheelhouse), log=lambda *_: None).name == PINNED
    assert cached(tmp_path) == sorted([flashinfer.artifact, PINNED])


@pytest.mark.parametrize("artifact", [PINNED, *OTHER_BUILDS])
def test_pip_picks_the_pinned_build_whatever_the_host(tmp_path, monkeypatch, wheelhouse, index_url, artifact):
    """The target tags come from the pinned file name: a py3-none-any pin is not traded for this host's
    cp311 wheel, and a Windows pin is fetched on Linux."""
    use(monkeypatch, tmp_path, pip_env(tmp_path / "pip", pip_conf(index_url)))
    assert fetch_mod.fetch(pin(wheelhouse, artifact), log=lambda *_: None).name == artifact


def test_wrong_sha256_in_pin_lock_is_one_line_and_caches_nothing(tmp_path, monkeypatch, wheelhouse, index_url):
    use(monkeypatch, tmp_path, pip_env(tmp_path / "pip", pip_conf(index_url)))
    wrong = "0" * 64
    with pytest.raises(PatchkitError) as exc:
        fetch_mod.fetch(pin(wheelhouse, sha256=wrong), log=lambda *_: None)
    msg = str(exc.value)
    assert "\n" not in msg and f"expected {wrong}, found {sha256(wheelhouse / PINNED)}" in msg
    assert "nothing cached" in msg and cached(tmp_path) == []


def test_missing_version_names_the_package_version_and_pips_reason(tmp_path, monkeypatch, wheelhouse, index_url):
    use(monkeypatch, tmp_path, pip_env(tmp_path / "pip", pip_conf(index_url)))
    with pytest.raises(PatchkitError) as exc:
        fetch_mod.fetch(pin(wheelhouse, version="9.9"), log=lambda *_: None)
    msg = str(exc.value)
    assert "\n" not in msg and f"{PACKAGE}==9.9" in msg and "No matching distribution found" in msg, msg
    assert cached(tmp_path) == []


def test_cached_file_with_the_right_sha256_needs_no_pip(tmp_path, monkeypatch, wheelhouse):
    use(monkeypatch, tmp_path, {})
    (tmp_path / "cache" / "artifacts").mkdir(parents=True)
    shutil.copy2(wheelhouse / PINNED, tmp_path / "cache" / "artifacts")
    monkeypatch.setattr(fetch_mod.subprocess, "run", lambda *a, **k: pytest.fail(f"pip was called: {a}"))
    assert fetch_mod.fetch(pin(wheelhouse), log=lambda *_: None).name == PINNED


def test_find_release_downloads_the_new_version_with_the_pinned_tags(tmp_path, monkeypatch, wheelhouse, index_url):
    use(monkeypatch, tmp_path, pip_env(tmp_path / "pip", pip_conf(index_url)))
    rel = fetch_mod.find_release(PACKAGE, "1.1", OTHER_BUILDS[0], log=lambda *_: None)   # only py3-none-any exists
    assert rel == fetch_mod.Release(f"{PACKAGE}-1.1-py3-none-any.whl", sha256(wheelhouse / rel.artifact), rel.path)
    assert rel.path == tmp_path / "cache" / "artifacts" / rel.artifact and sha256(rel.path) == rel.sha256


@pytest.mark.parametrize("tty", [True, False])
def test_pip_shows_its_progress_bar_on_a_terminal_only(tmp_path, monkeypatch, tty):
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, stderr="ERROR: stop here")

    monkeypatch.setattr(fetch_mod.subprocess, "run", run)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    use(monkeypatch, tmp_path, {})
    with pytest.raises(PatchkitError, match="stop here"):
        fetch_mod.find_release(PACKAGE, "1.0", PINNED, log=lambda *_: None)
    quiet = "--quiet" in calls[0] and "--progress-bar" in calls[0]
    assert quiet is not tty


# -- the CLI, as `make apply` runs it --------------------------------------------------------------
def test_make_apply_with_only_a_pip_conf_fetches_verifies_and_applies(tmp_path, index_url):
    repo, env = demo_repo(tmp_path / "r")
    shutil.rmtree(tmp_path / "r" / "cache")          # nothing cached: pip must fetch it
    env = {**env, **pip_env(tmp_path / "pip", pip_conf(index_url))}
    proc = cli(repo, "fetch", "--into", str(tmp_path / "carry" / "artifacts"), env=env)
    assert proc.returncode == 0 and f"{PACKAGE} 1.0:" in proc.stdout and "sha256 ok" in proc.stdout, proc.stderr
    assert (tmp_path / "r" / "cache" / "artifacts" / PINNED).is_file()
    # the offline carry: no index, no wheelhouse, only PATCHKIT_CACHE=<carry>
    offline = {**env, **pip_env(tmp_path / "offline", PIP_NO_INDEX="1"), "PATCHKIT_CACHE": str(tmp_path / "carry")}
    proc = cli(repo, "apply", env=offline)
    assert proc.returncode == 0, proc.stderr
    assert load_lock(repo / "pin.lock", LINE).upstream(PACKAGE).artifact == PINNED
    assert (repo / "build" / "site-1.0" / EXTRA).is_file()


@pytest.mark.parametrize("source", ["pip.conf index-url", "find-links wheelhouse"])
def test_make_apply_straight_from_the_users_pip_configuration(tmp_path, wheelhouse, index_url, source):
    """`apply` with an empty cache and nothing but the user's pip configuration: a pip.conf naming a mirror
    (here a file index), or an offline --find-links wheelhouse with no index at all."""
    repo, env = demo_repo(tmp_path / "r")
    shutil.rmtree(tmp_path / "r" / "cache")
    if source == "pip.conf index-url":
        pip = pip_env(tmp_path / "pip", pip_conf(index_url))
    else:
        pip = pip_env(tmp_path / "pip", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse))
    proc = cli(repo, "apply", env={**env, **pip})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r" / "cache" / "artifacts" / PINNED).is_file()
    assert (repo / "build" / "site-1.0" / EXTRA).is_file()
    assert cli(repo, "status", env={**env, **pip}).returncode == 0


def test_make_apply_with_a_wrong_sha256_is_one_line_and_caches_nothing(tmp_path, index_url):
    repo, env = demo_repo(tmp_path / "r")
    shutil.rmtree(tmp_path / "r" / "cache")
    lock = repo / "pin.lock"
    lock.write_text(lock.read_text().replace(load_lock(lock, LINE).upstream(PACKAGE).sha256, "f" * 64))
    site = demo_target(tmp_path / "t")
    proc = cli(repo, "apply", "--target", str(site), env={**env, **pip_env(tmp_path / "pip", pip_conf(index_url))})
    assert one_line_error(proc) and "sha256 mismatch" in proc.stderr and "nothing cached" in proc.stderr, proc.stderr
    assert [p.name for p in (tmp_path / "r" / "cache" / "artifacts").iterdir()] == []


def test_a_wrong_sha256_in_pin_lock_names_both_digests_and_never_advises_deleting_the_cached_wheel(tmp_path):
    """A pin.lock whose sha256 was mistyped said "delete the file to fetch it again" of the good cached wheel
    (and a fetch again would only disagree with the pin once more)."""
    from tests.engine_fixtures import snapshot

    repo, env = demo_repo(tmp_path / "r")
    site = demo_target(tmp_path / "t")
    lock = (repo / "pin.lock").read_text()
    good = re.search(r'sha256 = "([0-9a-f]{64})"', lock).group(1)
    wrong = "0" * 64
    (repo / "pin.lock").write_text(lock.replace(good, wrong))
    cached = Path(env["PATCHKIT_CACHE"]) / "artifacts" / "demo-1.0-py3-none-any.whl"
    wheel, before = cached.read_bytes(), snapshot(site)
    proc = cli(repo, "apply", "--target", str(site), env=env)
    assert one_line_error(proc) and wrong in proc.stderr and good in proc.stderr, proc.stderr
    assert "pin.lock" in proc.stderr and "disagree" in proc.stderr and "delete" not in proc.stderr, proc.stderr
    assert cached.read_bytes() == wheel and snapshot(site) == before


def test_a_download_folder_left_by_a_killed_fetch_is_removed_at_the_next_fetch(tmp_path, index_url):
    """A kill during the download left `.pip-download-*` (with a whole wheel in it) in the cache for ever; the
    next fetch removes it, as pip removes its own temp directories. One still in use is left alone."""
    repo, env = demo_repo(tmp_path / "r")
    artifacts = tmp_path / "r" / "cache" / "artifacts"
    shutil.rmtree(artifacts.parent)
    env = {**env, **pip_env(tmp_path / "pip", pip_conf(index_url))}
    killed = cli(repo, "fetch", env={**env, "PATCHKIT_TEST_FAULT": "downloaded:kill:0"})
    assert killed.returncode == 137, killed.stderr
    left = [p.name for p in artifacts.iterdir()]
    assert len(left) == 1 and left[0].startswith(fetch_mod.DOWNLOAD_PREFIX), left
    again = cli(repo, "fetch", env=env)
    assert again.returncode == 0 and left[0] in again.stdout and "interrupted fetch" in again.stdout, again.stdout
    assert [p.name for p in artifacts.iterdir()] == [PINNED]


def test_a_download_folder_in_use_by_another_run_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    with fetch_mod._download_dir() as files:
        (files / "partial.whl").write_bytes(b"half a wheel")
        assert fetch_mod.remove_abandoned_downloads(log=lambda *_: None) == []
        assert (files / "partial.whl").is_file()
    assert list(fetch_mod.cache_dir().iterdir()) == []


def test_a_download_folder_an_earlier_version_left_is_removed_at_the_next_fetch(tmp_path, index_url):
    """Left by a run killed during the download before download folders carried their lock file (no lock file,
    and older than a folder being created this instant can be): removed at the next fetch too."""
    repo, env = demo_repo(tmp_path / "r")
    artifacts = tmp_path / "r" / "cache" / "artifacts"
    (artifacts / PINNED).unlink()
    left = artifacts / ".pip-download-k1ll3d"
    left.mkdir()
    (left / PINNED).write_bytes(b"the first half of a wheel")
    os.utime(left, (1_000_000_000, 1_000_000_000))
    proc = cli(repo, "fetch", env={**env, **pip_env(tmp_path / "pip", pip_conf(index_url))})
    assert proc.returncode == 0 and str(left) in proc.stdout, proc.stdout + proc.stderr
    assert [p.name for p in artifacts.iterdir()] == [PINNED]
