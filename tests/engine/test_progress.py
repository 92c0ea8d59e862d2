"""Long unpacks show a tqdm bar on a terminal and plain lines otherwise; without tqdm, plain lines (issue #15)."""
from __future__ import annotations

import io
import sys

from patchkit.progress import counted


class Terminal(io.StringIO):
    def isatty(self):
        return True


def run(items, monkeypatch, stderr) -> list[str]:
    monkeypatch.setattr(sys, "stderr", stderr)
    lines = []
    assert list(counted(items, "unpacking x.whl", lines.append)) == items
    return lines


def test_plain_lines_at_each_quarter_when_stderr_is_not_a_terminal(monkeypatch):
    lines = run(list(range(8)), monkeypatch, io.StringIO())
    assert lines == [f"unpacking x.whl: {n}/8 files" for n in (2, 4, 6, 8)]


def test_a_tqdm_bar_on_a_terminal(monkeypatch):
    stderr = Terminal()
    assert run(list(range(8)), monkeypatch, stderr) == []
    bar = stderr.getvalue()
    assert "unpacking x.whl:" in bar and "/8 [" in bar and "file/s" in bar, bar   # tqdm's own layout


def test_plain_lines_on_a_terminal_without_tqdm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)   # import tqdm now raises ImportError
    assert run(list(range(4)), monkeypatch, Terminal())[-1] == "unpacking x.whl: 4/4 files"


def test_unpack_reports_progress_through_its_log(tmp_path):
    from tests.fault_fixtures import RELEASES, make_wheel
    from patchkit.pristine import Pristine

    lines = []
    Pristine(make_wheel(tmp_path / "w", "1.0", RELEASES["1.0"])).unpack(tmp_path / "site", log=lines.append)
    assert lines and lines[-1].endswith(" files") and (tmp_path / "site" / "demo" / "core.py").is_file()
