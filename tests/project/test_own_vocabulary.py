"""The project speaks of itself alone: no file of it words how its own GPU test machine happens to be reached.

The user's need is an air-gapped GPU machine: what to copy there, what to run, what comes back
(docs/gpu_box.md), and the bundle's own size budget (`make bundle-budget`). Words for one particular way of
lending such a machine (its output variable, its calls and their limits, machine kinds, "lent") belong nowhere
but in the raw outputs recorded as they were printed (the run folders under bench/runs/), which stay byte for byte.
"""
from __future__ import annotations

import re
from pathlib import Path

from tests.project.test_docs_consistency import repo_files

REPO = Path(__file__).resolve().parents[2]
LENDING = re.compile("|".join(p.replace(" ", r"\s+") for p in [
    r"\$OUT\b",                                   # the lent machine's output folder
    r"\bdevice (?:call|time|command)s?\b",
    r"\blent\b",
    r"\bnvidia-h[12]00(?:-x\d)?\b",               # machine kinds
    r"\b64 MiB\b",                                 # the lending limit; the project's own budget is the bundle's
    r"\ba call carries\b", r"\bper-call limit\b",
    r"\bcarry-size\b",
    r"\bH200 box\b",
    r"\bcarry: \[",                               # the lending tool's argument
    r"\bfiles_at\b", r"\bidle_release_s\b",
    r"\bkind[=:]\s*\"?nvidia",
    r"\bfarm-(?:bench|studio)\b",
]), re.I)


def raw_output(path: str) -> bool:
    """Recorded output, kept as printed: everything in a results or run folder but its index and its RUN.md."""
    return path.startswith("bench/runs/") and Path(path).name not in ("INDEX.md", "RUN.md")


def lending_words(files: dict[str, str]) -> list[str]:
    """`file:line: word` for each hit; a phrase broken over two lines counts (prose is wrapped)."""
    return [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {' '.join(m.group(0).split())!r}"
            for name, text in files.items() for m in LENDING.finditer(text)]


def project_texts() -> dict[str, str]:
    out = {}
    for f in repo_files():
        if raw_output(f) or f == "tests/project/test_own_vocabulary.py":
            continue
        data = (REPO / f).read_bytes()
        if b"\0" not in data[:4096]:
            out[f] = data.decode("utf-8", "replace")
    return out


def test_no_file_words_how_the_test_machine_is_lent():
    found = lending_words(project_texts())
    assert not found, (f"expected the project to speak of an air-gapped GPU machine, found {len(found)} words of "
                       "how its own test machine is lent:\n" + "\n".join(found[:40]))


def test_the_check_reads_what_it_should():
    """Raw outputs are exempt, their index is not; the words are caught in any case and in code as in prose."""
    assert raw_output("bench/runs/2026-12-01-live/command.sh") and not raw_output("bench/runs/INDEX.md")
    assert not raw_output("bench/runs/2026-12-01-live/RUN.md")
    sample = {"a.md": "ran on the Lent H200", "b.py": 'out = "$OUT/x"  # a device call', "c.md": "an air-gapped GPU",
              "d.md": "line one, two device\ncalls produced them"}
    assert [w.rsplit(":", 1)[0] for w in lending_words(sample)] == ["a.md:1", "b.py:1", "b.py:1", "d.md:1"]
