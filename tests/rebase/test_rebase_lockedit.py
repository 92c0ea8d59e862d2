"""pin.lock rewritten by a rebase: [line."LINE".upstream.NAME] values and (issue 23) [runtime] values, comments and layout kept."""
from __future__ import annotations

import tomllib

import pytest

from tests.conftest import REPO
from patchkit import PatchkitError
from patchkit.lockedit import update_lock_text


def test_runtime_pins_are_rewritten_in_place_with_comments_kept():
    text = (REPO / "pin.lock").read_text()
    new = update_lock_text(text, {"flashinfer": {"version": "0.7.2"}}, {"torch": "2.14.1", "triton": "3.8.0"},
                           line="0.5.14")
    data = tomllib.loads(new)["line"]["0.5.14"]
    assert data["runtime"]["torch"] == "2.14.1" and data["runtime"]["triton"] == "3.8.0"
    assert data["upstream"]["flashinfer"]["version"] == "0.7.2"
    assert data["runtime"]["python"] == tomllib.loads(text)["line"]["0.5.14"]["runtime"]["python"]
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines()) if a != b]
    assert len(changed) == 3 and len(new.splitlines()) == len(text.splitlines())
    assert [l for l in text.splitlines() if l.startswith("#")] == [l for l in new.splitlines() if l.startswith("#")]


def test_a_runtime_key_pin_lock_lacks_is_refused():
    with pytest.raises(PatchkitError, match=r'\[line."0.5.14".runtime\] cuda'):
        update_lock_text((REPO / "pin.lock").read_text(), {}, {"cuda": "13.0"}, line="0.5.14")


def test_a_line_is_copied_under_a_new_name_and_the_old_tables_are_kept_byte_for_byte():
    from patchkit.lockedit import copy_line_text

    text = (REPO / "pin.lock").read_text()
    new = copy_line_text(text, "0.5.14", "0.5.99")
    assert new.startswith(text.rstrip("\n"))
    data = tomllib.loads(new)["line"]
    assert data["0.5.99"] == data["0.5.14"] and data["0.5.23"] == tomllib.loads(text)["line"]["0.5.23"]
    with pytest.raises(PatchkitError, match=r'expected \[line."0.4"...\] tables to copy, found none'):
        copy_line_text(text, "0.4", "0.5")
