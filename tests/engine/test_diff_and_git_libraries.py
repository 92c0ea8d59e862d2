"""Why the engine reads diffs and drives git itself rather than through unidiff and GitPython (ARCHITECTURE.md,
"The libraries it does not use"): for each, the case the library gets wrong for what the engine promises, beside
the engine's own answer. Both halves run in the test venv (requirements-test.txt pins both libraries for this
file alone); elsewhere the library half skips."""
from __future__ import annotations

from pathlib import Path

import pytest

from patchkit import gitcmd
from patchkit.patchfile import diff_names

# (what, one `diff --git` section as git writes it, (old path, new path) as git apply reads it)
NAMES = [
    ("a name git C-quotes, UTF-8 in octal escapes",
     'diff --git "a/caf\\303\\251 x.py" "b/caf\\303\\251 x.py"\nindex 1111111..2222222 100644\n'
     '--- "a/caf\\303\\251 x.py"\n+++ "b/caf\\303\\251 x.py"\n@@ -1 +1 @@\n-a\n+b\n',
     ("caf\u00e9 x.py", "caf\u00e9 x.py")),
    ("a name holding ' b/', which git leaves unquoted",
     "diff --git a/a b/c b/a b/c\nindex 1111111..2222222 100644\n--- a/a b/c\n+++ b/a b/c\n@@ -1 +1 @@\n-a\n+b\n",
     ("a b/c", "a b/c")),
]


@pytest.mark.parametrize("what, block, names", NAMES, ids=[n[0] for n in NAMES])
def test_the_engine_reads_the_names_git_writes(what, block, names):
    assert diff_names(block.rstrip("\n"), Path("x.patch")) == names, what


@pytest.mark.parametrize("what, block, names", NAMES, ids=[n[0] for n in NAMES])
def test_unidiff_misreads_them(what, block, names):
    """unidiff keeps git's quoting and octal escapes in the path, and refuses a legal name holding ' b/': the
    engine promises to apply any name git can write (docs/usage.md, "Guarantees")."""
    unidiff = pytest.importorskip("unidiff")
    try:
        read = [(f.source_file, f.target_file) for f in unidiff.PatchSet(block)]
    except unidiff.UnidiffParseError:
        return                                  # refused: a patch the engine applies would be an error
    assert read != [("a/" + names[0], "b/" + names[1])], f"unidiff reads {what} right now: adopt it"


def test_gitpython_drops_the_last_newline_of_what_git_prints(tmp_path):
    """The round trip (export, import: byte-identical files) needs git's output byte for byte; GitPython's
    `repo.git.X()` strips the final newline of stdout unless the call opts out, so a file read back through a
    call that forgets loses its last line ending. The engine's runner (patchkit/gitcmd.py) returns the bytes git
    printed, always."""
    repo = gitcmd.init_repo(tmp_path / "repo")
    body = b"line\n\n"
    (repo / "f.txt").write_bytes(body)
    gitcmd.git(repo, "add", "f.txt")
    gitcmd.git(repo, "commit", "-qm", "f")
    assert gitcmd.git(repo, "show", "HEAD:f.txt", text=False).stdout == body
    gitpython = pytest.importorskip("git")
    wrapper = gitpython.Repo(repo).git
    assert wrapper.show("HEAD:f.txt").encode() != body, "GitPython's default returns git's bytes now: revisit " \
                                                       "ARCHITECTURE.md, 'The libraries it does not use'"
    # what every call site would have to say instead
    assert wrapper.show("HEAD:f.txt", stdout_as_string=False, strip_newline_in_stdout=False) == body
