"""Read one `git format-patch` file: its author and date, subject, message, trailers and the paths it touches."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.header import decode_header, make_header
from pathlib import Path

from . import PatchkitError

_DIFF_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_TRAILER_RE = re.compile(r"^([A-Z][A-Za-z0-9-]*): (.+)$")
REQUIRED_TRAILERS = ("Upstream-Status", "Evidence", "Test")


@dataclass
class PatchFile:
    path: Path
    subject: str
    body: str                       # message between subject and trailers
    trailers: list[tuple[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)      # files the diff touches (post-image paths)
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    author: str = ""                # 'Name <email>' of the From: header; commits made from the patch keep it
    date: str = ""                  # its Date: header, as written (RFC 2822)

    @property
    def name(self) -> str:
        return self.path.name

    def trailer(self, key: str) -> list[str]:
        return [v for k, v in self.trailers if k.lower() == key.lower()]

    @property
    def overlay(self) -> list[str]:
        return self.trailer("Overlay")

    def missing_trailers(self) -> list[str]:
        return [k for k in REQUIRED_TRAILERS if not self.trailer(k)]


def _header(head: str, key: str) -> str:
    """A mail header's value, unfolded and RFC 2047-decoded ('' if absent)."""
    m = re.search(rf"^{key}: (.*(?:\n[ \t].*)*)", head, re.M)
    return str(make_header(decode_header(m.group(1).replace("\n", "")))) if m else ""


def split_message(message: str) -> tuple[str, list[tuple[str, str]]]:
    """The trailer block is the last paragraph when every line of it is `Key: value`."""
    paragraphs = message.strip("\n").split("\n\n")
    last = paragraphs[-1].splitlines() if paragraphs else []
    if last and all(_TRAILER_RE.match(line) for line in last):
        trailers = [tuple(_TRAILER_RE.match(line).groups()) for line in last]
        return "\n\n".join(paragraphs[:-1]).strip("\n"), trailers
    return message.strip("\n"), []


def parse_patch(path: Path) -> PatchFile:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PatchkitError(f"{path}: cannot read patch file ({exc})") from None
    head, sep, diff = text.partition("\ndiff --git ")
    if not sep:
        raise PatchkitError(f"{path}: malformed patch: expected a 'diff --git' section, found none")
    diff = "diff --git " + diff
    subject_m = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", head, re.M)
    if not subject_m:
        raise PatchkitError(f"{path}: malformed patch: expected a 'Subject:' header, found none")
    subject = _header(head, "Subject")
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)
    # The message runs from the blank line after the headers to the '---' separator.
    after_headers = head[subject_m.end():].split("\n\n", 1)
    message = after_headers[1] if len(after_headers) > 1 else ""
    message = message.rsplit("\n---", 1)[0]
    body, trailers = split_message(message)
    paths, created, deleted = [], [], []
    for block in re.split(r"(?=^diff --git )", diff, flags=re.M):
        m = _DIFF_RE.match(block)
        if not m:
            continue
        a, b = m.groups()
        if "\n@@ " not in block and "\nrename " not in block and "Binary" not in block and "new file" not in block and "deleted file" not in block:
            raise PatchkitError(f"{path}: malformed patch: expected hunks for {b}, found none")
        if "\nnew file mode" in block:
            created.append(b)
        if "\ndeleted file mode" in block:
            deleted.append(a)
        if a != b:
            paths.append(a)
        paths.append(b)
    if not paths:
        raise PatchkitError(f"{path}: malformed patch: no file headers in its diff")
    return PatchFile(path, subject, body, trailers, paths, created, deleted,
                     author=_header(head, "From"), date=_header(head, "Date"))
