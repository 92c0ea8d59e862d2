"""docs/usage.md's trailer table names every `Key:` a patch header in patches/ uses: the trailers patchkit parses
(patchkit/patchfile.py) and the labelled paragraphs of the message body (Measured:, Reach:), each with its meaning
and the module that reads it (red before: the table did not exist; the patch format named five trailers and two
more in prose, and Measured, Reach, Reached-If, Unreached-If, Superseded-By were in headers without a row)."""
from __future__ import annotations

import re

from patchkit.patchfile import parse_patch
from tests.conftest import REPO

USAGE = REPO / "docs" / "usage.md"
MAIL_HEADERS = {"From", "Date", "Subject"}     # git format-patch's own header, not the message
LABEL_RE = re.compile(r"(?m)^([A-Z][a-z]+(?:-[A-Z][a-z]+)*): ")


def _table_rows() -> dict[str, list[str]]:
    text = USAGE.read_text()
    assert "<!-- trailer-table -->" in text, f"{USAGE}: expected the <!-- trailer-table --> marker, found none"
    rows = {}
    for line in text.split("<!-- trailer-table -->", 1)[1].lstrip("\n").splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        rows[cells[0].strip("`").rstrip(":")] = cells
    return rows


def _keys_used() -> dict[str, str]:
    """{key: a patch that uses it} over every patch of every line: parsed trailers and labelled paragraphs."""
    used = {}
    for path in sorted((REPO / "patches").glob("*/*/*.patch")):
        patch = parse_patch(path)
        message = path.read_text(encoding="utf-8").split("\n---\n", 1)[0]
        keys = {k for k, _ in patch.trailers} | set(LABEL_RE.findall(message)) - MAIL_HEADERS
        for key in keys:
            used.setdefault(key, str(path.relative_to(REPO)))
    return used


def test_every_trailer_a_patch_uses_has_a_row_with_its_meaning_and_reader():
    rows, used = _table_rows(), _keys_used()
    missing = {k: where for k, where in used.items() if k not in rows}
    assert not missing, f"{USAGE.name}: expected a trailer-table row for every key the headers use, found none for {missing}"
    for key, cells in rows.items():
        assert len(cells) == 3 and all(cells), f"{key}: expected name, meaning and reader, found {cells}"
        assert re.search(r"`patchkit/[\w/]+\.py`", cells[2]) or cells[2].startswith("no module"), \
            f"{key}: expected the module that reads it, found {cells[2]!r}"


def test_every_module_the_table_names_exists():
    for key, cells in _table_rows().items():
        for module in re.findall(r"`(patchkit/[\w/]+\.py)`", cells[2]):
            assert (REPO / module).is_file(), f"{key}: {module}: no such file"


def test_the_table_holds_the_trailers_patchkit_parses():
    """The keys the engine itself acts on are rows, whether or not a header uses them today."""
    from patchkit.conditions import KEYS, SUPERSEDED_BY
    from patchkit.patchfile import REQUIRED_TRAILERS
    from patchkit.rebase.replay import KEPT

    assert {*REQUIRED_TRAILERS, *KEYS, SUPERSEDED_BY, KEPT, "Overlay", "Depends-On"} <= set(_table_rows())
