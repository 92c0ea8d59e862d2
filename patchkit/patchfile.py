"""Read one `git format-patch` file: its author and date, subject, message, trailers and the paths it touches."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.header import decode_header, make_header
from pathlib import Path

from . import PatchkitError, fsio

_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
REGULAR_MODES = ("100644", "100755")    # what git stores for a file; 120000 is a symlink, 160000 a submodule
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
    raw = fsio.read_regular(path, "a patch file")
    if raw is None:
        raise PatchkitError(f"{path}: expected a patch file, found nothing")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchkitError(f"{path}: expected a UTF-8 patch file, found a byte that is not UTF-8 at offset {exc.start}") from None
    _refuse_crlf(text, path)
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
        if not block.startswith("diff --git "):
            continue
        a, b = diff_names(block, path)
        _check_modes(block, b, path)
        if "\n@@ " not in block and "\nrename " not in block and "\ncopy " not in block and "Binary" not in block \
                and "new file" not in block and "deleted file" not in block:
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


def _refuse_crlf(text: str, path: Path) -> None:
    """git format-patch ends every line of its own (headers, `diff --git`, `@@`) with LF; a CR there means the
    whole file was converted to CRLF (a checkout with core.autocrlf=true, an editor). Content lines may end in
    CR (a patch of a CRLF file), so only git's own lines are looked at."""
    for n, line in enumerate(text.split("\n"), 1):
        if line.endswith("\r") and (line.startswith(("diff --git ", "@@ ", "--- ", "+++ ", "index ", "Subject: "))
                                    or line.startswith("From ")):
            raise PatchkitError(f"{path}: expected LF line endings (as git format-patch writes them), found CRLF "
                                f"(\\r\\n) line endings (line {n}): the file was converted, e.g. by a checkout with "
                                f"core.autocrlf=true; check it out again (git checkout -- PATH: .gitattributes keeps "
                                f"patches LF) or convert it back to LF")


def _unquote(text: str, where: Path) -> str:
    """A file name as git writes it: C-quoted (with octal bytes) when it holds special characters."""
    if not (len(text) >= 2 and text[0] == text[-1] == '"'):
        return text
    out, i, body = bytearray(), 0, text[1:-1]
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
        elif body[i + 1:i + 2] in _ESCAPES:
            out.append(_ESCAPES[body[i + 1]])
            i += 2
        elif re.fullmatch(r"[0-7]{3}", body[i + 1:i + 4]):
            out.append(int(body[i + 1:i + 4], 8))
            i += 4
        else:
            raise PatchkitError(f"{where}: malformed patch: expected a C-quoted file name, found {text!r}")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise PatchkitError(f"{where}: expected UTF-8 file names, found {text!r}") from None


def _split_header(line: str) -> tuple[str, str] | None:
    """a/X b/Y of a `diff --git` line: quoted parts, or an unquoted pair split where both halves agree."""
    m = re.fullmatch(r'("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*")', line) or \
        re.fullmatch(r'("(?:[^"\\]|\\.)*") (.+)', line)
    if m:
        return m.group(1), m.group(2)
    n = (len(line) - 1) // 2
    if len(line) % 2 == 1 and line[n] == " " and line[2:n] == line[n + 3:] and line.startswith("a/") \
            and line[n + 1:n + 3] == "b/":
        return line[:n], line[n + 1:]
    return None


def diff_names(block: str, where: Path) -> tuple[str, str]:
    """(old path, new path) of one `diff --git` section, read as git apply reads them: the ---/+++ lines
    and rename/copy lines name them exactly (any legal name, spaces and quotes too); the header otherwise."""
    lines = block.split("\n")
    header = _split_header(lines[0][len("diff --git "):])
    names = {"a": None, "b": None}
    if header:
        names["a"], names["b"] = (_unquote(h, where) for h in header)
    for line in lines[1:]:
        if line.startswith("@@") or line.startswith("GIT binary patch"):
            break
        for key, prefix in (("a", "rename from "), ("b", "rename to "), ("a", "copy from "), ("b", "copy to ")):
            if line.startswith(prefix):
                names[key] = "ab"[key == "b"] + "/" + _unquote(line[len(prefix):], where)
        for key, prefix in (("a", "--- "), ("b", "+++ ")):
            if line.startswith(prefix) and line[4:].rstrip("\t") != "/dev/null":
                names[key] = _unquote(line[4:].rstrip("\t"), where)
    if "--- /dev/null" in lines and names["b"]:
        names["a"] = names["a"] or "a/" + names["b"][2:]
    if "+++ /dev/null" in lines and names["a"]:
        names["b"] = names["b"] or "b/" + names["a"][2:]
    a, b = names["a"], names["b"]
    if not (a and b and a.startswith("a/") and b.startswith("b/")):
        raise PatchkitError(f"{where}: malformed patch: cannot read the file names of {lines[0][:200]!r}")
    for name in (a, b):
        if _CONTROL_RE.search(name):
            raise PatchkitError(f"{where}: expected file names without control characters (newline, tab), "
                                f"found {name[2:]!r}")
    return a[2:], b[2:]


def _check_modes(block: str, name: str, where: Path) -> None:
    """Only regular files, and no mode change: patchkit applies bytes and keeps each file's mode, so anything
    else (a symlink, a submodule, an executable bit set or cleared) would be dropped without a word."""
    for m in re.finditer(r"^(new file mode|deleted file mode|old mode|new mode|index [0-9a-f]+\.\.[0-9a-f]+) ?(\d*)$",
                         block, re.M):
        kind, mode = m.groups()
        if mode and mode not in REGULAR_MODES:
            what = {"120000": "a symlink", "160000": "a submodule"}.get(mode, f"mode {mode}")
            raise PatchkitError(f"{where}: {name}: expected a regular file (mode 100644), found {what}")
        if kind in ("old mode", "new mode"):
            raise PatchkitError(f"{where}: {name}: expected no mode change (patchkit applies contents only), "
                                "found 'old mode'/'new mode'")
        if kind == "new file mode" and mode != "100644":
            raise PatchkitError(f"{where}: {name}: expected a new file of mode 100644, found mode {mode} "
                                "(patchkit creates files without the executable bit)")
