"""Each command reads its release line from pin.lock once, at its entry point, and hands that Engine (or its Lock)
down: a function below that re-opened pin.lock could meet another line than the command's (PATCHKIT_LINE, an edit
between two reads) and pays the schema check again. Driven as far as they go without the network."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from patchkit import lockfile
from patchkit.engine import Engine
from serving import bundle, install


class Stop(Exception):
    """Where the command would start downloading: the test has seen what it came for."""


@pytest.fixture
def reads(monkeypatch):
    """The paths of every pin.lock read from now on (load_lock, lock_lines and Engine.from_repo all read here)."""
    seen, real = [], lockfile._read_toml

    def counted(path):
        seen.append(path)
        return real(path)

    monkeypatch.setattr(lockfile, "_read_toml", counted)
    return seen


@pytest.mark.parametrize("line_args", [["--line", "0.5.14"], []], ids=["--line", "the closure's line"])
def test_bundle_build_reads_its_line_once(tmp_path, monkeypatch, reads, line_args):
    """With --line, and without: then build finds the line whose runtime is the closure's (0.5.14's torch 2.11 /
    triton 3.6) from the same one reading, not one reading per line and another for the engine."""
    handed = {}
    monkeypatch.setattr(Engine, "pristine", lambda self, name, log=None: SimpleNamespace(wheel=tmp_path / f"{name}.whl"))
    monkeypatch.setattr(bundle, "pip_download", lambda *a, **k: None)
    monkeypatch.setattr(bundle, "find_wheel", lambda folder, name, version: tmp_path / f"{name}.whl")

    def assemble(out, artifacts, wheels, **kw):
        handed.update(kw)
        raise Stop

    monkeypatch.setattr(bundle, "assemble", assemble)
    with pytest.raises(Stop):
        bundle.main(["build", *line_args, "--out", str(tmp_path / "bundle")])
    assert [p.name for p in reads] == ["pin.lock"]
    assert handed["lock"].line == "0.5.14"   # the manifest's line is the one build read, not a second reading


def test_install_reads_its_line_once(tmp_path, monkeypatch, reads, capsys):
    site = tmp_path / "site"
    site.mkdir()
    applied = []
    monkeypatch.setattr(install, "ensure_venv", lambda venv: tmp_path / "python")
    monkeypatch.setattr(install, "stamp_ok", lambda venv, key: True)
    monkeypatch.setattr(install, "site_packages", lambda python: site)
    monkeypatch.setattr(Engine, "apply", lambda self, target, **kw: applied.append(self.lock.line)
                        or SimpleNamespace(before=None))
    assert install.main(["--venv", str(tmp_path / "venv"), "--line", "0.5.14"]) == 0
    out = capsys.readouterr().out
    assert "install: release line 0.5.14" in out and applied == ["0.5.14"]
    assert [p.name for p in reads] == ["pin.lock"]   # install, apply and doctor: one reading between them


def test_cpu_test_install_reads_its_line_once(tmp_path, monkeypatch, reads):
    fetched = []

    def fetch(upstream, log=None):
        fetched.append(upstream.version)
        raise Stop

    monkeypatch.setattr("patchkit.fetch.fetch", fetch)
    with pytest.raises(Stop):
        install.main(["--cpu-test-venv", str(tmp_path / "venv"), "--line", "0.5.14"])
    assert [p.name for p in reads] == ["pin.lock"] and len(fetched) == 1
