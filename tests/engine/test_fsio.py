"""patchkit.fsio: the one atomic writer never follows a link, and the owned-file reader refuses non-files."""
import os

import pytest

from patchkit import PatchkitError, fsio


def test_a_dangling_link_at_the_temp_name_is_replaced_not_followed(tmp_path):
    outside = tmp_path / "outside.txt"          # where the link points: must stay absent
    dest = tmp_path / "d" / "file.py"
    dest.parent.mkdir()
    os.symlink(outside, fsio.temp_path(dest))
    fsio.atomic_write(dest, b"new\n")
    assert dest.read_bytes() == b"new\n"
    assert not outside.exists() and not os.path.lexists(fsio.temp_path(dest))


def test_a_link_at_the_destination_is_replaced_by_a_file_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    dest = tmp_path / "state.json"
    os.symlink(victim, dest)
    fsio.atomic_write(dest, b"{}")
    assert victim.read_text() == "precious\n"
    assert not dest.is_symlink() and dest.read_bytes() == b"{}"


def test_mode_is_applied(tmp_path):
    dest = tmp_path / "run.sh"
    fsio.atomic_write(dest, b"#!/bin/sh\n", mode=0o755)
    assert dest.stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_read_owned_refuses_what_is_not_a_regular_file(tmp_path, kind):
    path = tmp_path / "journal.json"
    if kind == "symlink":
        (tmp_path / "real.json").write_text("{}")
        os.symlink(tmp_path / "real.json", path)
    elif kind == "fifo":
        os.mkfifo(path)                            # a blocking open would hang the test
    else:
        path.mkdir()
    with pytest.raises(PatchkitError, match="expected the journal .a regular file., found a"):
        fsio.read_owned(path, "the journal")


def test_read_owned_limits_size_and_reads_absent_as_none(tmp_path):
    assert fsio.read_owned(tmp_path / "absent", "x") is None
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100)
    assert fsio.read_owned(big, "x", limit=100) == b"x" * 100
    with pytest.raises(PatchkitError, match="at most 99 bytes, found 100"):
        fsio.read_owned(big, "x", limit=99)


def test_stale_temp_files_finds_dangling_links_and_remove_stale_deletes_them(tmp_path):
    os.symlink(tmp_path / "nowhere", tmp_path / ".a.py.patchkit-tmp")
    (tmp_path / ".b.py.patchkit-tmp").write_text("half")
    found = fsio.stale_temp_files(tmp_path)
    assert [p.name for p in found] == [".a.py.patchkit-tmp", ".b.py.patchkit-tmp"]
    fsio.remove_stale(found)
    assert fsio.stale_temp_files(tmp_path) == []
