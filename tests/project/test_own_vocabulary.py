"""The project speaks of itself alone: no file of it words how its own GPU test machine happens to be reached.

The user's need is an air-gapped GPU machine: what to copy there, what to run, what comes back
(docs/gpu_box.md), and the bundle's own size budget (`make bundle-budget`). Words for one particular way of
lending such a machine (its output variable, its calls and their limits, machine kinds, the tools around it)
belong nowhere but in the raw outputs recorded as they were printed (the run folders under bench/runs/), which
stay byte for byte. This file is held to that too: it keeps the phrases as sha256 prefixes of their lower-case
words, and test_the_check_finds_the_phrases_in_the_recorded_outputs shows they still catch what the recorded
outputs print.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tests.project.test_docs_consistency import repo_files

REPO = Path(__file__).resolve().parents[2]
# sha256(" ".join(words))[:16] of each phrase (one to three words, lower case): the lending machine's output
# variable, its calls, times and commands, its per-call copy limit and limit words, its machine kinds (alone and
# in a kind= argument), its tool's argument and answer keys, and the names of this workplace's own tools.
PHRASES = frozenset({
    "0437db2ca5c88c29",
    "0749b824452efb28",
    "0a2912fe66f80084",
    "1c5b6113ff431033",
    "2b2f4629290fe0f9",
    "3b98c768513f896c",
    "4a566e3a422f82ad",
    "4c08e2378c9dc8a8",
    "50929cb5544d9010",
    "6a9ed4baa4e2d6f5",
    "730d11907fc5601c",
    "8cf10d1b0e07c1d8",
    "91d380074eb6cf6a",
    "960e41c51c134ca8",
    "9e7089ae4b1745e5",
    "aeda94c9569fe66f",
    "b9726faa1e7e5895",
    "bbb7e4fdad15d6f0",
    "c478fada605073eb",
    "c700a5c376cbd6fa",
    "c79e96c14d8598e4",
    "cfa26405e0becd9a",
    "dde34e0e63d28027",
    "e09e6a87d7b323a2",
    "eaaf89cb918ad632",
    "eb8e8687e75ba167",
    "fbb8037df8cc9050",
    "fcd25b6d406dd2f8",
})
# A word: letters, digits, `_`, inner hyphens, an optional leading `$`; `[` counts as a word of its own.
WORD = re.compile(r"\$?[a-z0-9_]+(?:-[a-z0-9_]+)*|\[")


def _digest(words) -> str:
    return hashlib.sha256(" ".join(words).encode()).hexdigest()[:16]


def raw_output(path: str) -> bool:
    """Recorded output, kept as printed: everything in a results or run folder but its index and its RUN.md."""
    return path.startswith("bench/runs/") and Path(path).name not in ("INDEX.md", "RUN.md")


def lending_words(files: dict[str, str], phrases: frozenset = PHRASES) -> list[str]:
    """`file:line: words` for each phrase found, in any case, in prose or code; a phrase broken over two lines
    counts (prose is wrapped)."""
    found = []
    for name, text in files.items():
        words = list(WORD.finditer(text.lower()))
        for i, first in enumerate(words):
            for n in (1, 2, 3):
                run = words[i:i + n]
                if len(run) == n and _digest(m.group(0) for m in run) in phrases:
                    found.append(f"{name}:{text.count(chr(10), 0, first.start()) + 1}: "
                                 f"{' '.join(m.group(0) for m in run)!r}")
    return found


def _texts(keep) -> dict[str, str]:
    out = {}
    for f in repo_files():
        if keep(f):
            data = (REPO / f).read_bytes()
            if b"\0" not in data[:4096]:
                out[f] = data.decode("utf-8", "replace")
    return out


def test_no_file_words_how_its_own_gpu_machine_is_reached():
    found = lending_words(_texts(lambda f: not raw_output(f)))
    assert not found, (f"expected the project to speak of an air-gapped GPU machine, found {len(found)} words of "
                       "how its own test machine is reached:\n" + "\n".join(found[:40]))


def test_the_check_reads_what_it_should():
    """Raw outputs are exempt, their index and RUN.md are not; phrases are caught in any case, in code as in
    prose, across a line break, and only as whole words."""
    assert raw_output("bench/runs/2026-12-01-live/command.sh") and not raw_output("bench/runs/INDEX.md")
    assert not raw_output("bench/runs/2026-12-01-live/RUN.md")
    phrases = frozenset({_digest(["alpha", "beta"]), _digest(["$gamma"]), _digest(["delta-x2"])})
    sample = {"a.md": "ran on the Alpha Beta", "b.py": 'out = "$GAMMA/x"  # delta-x2', "c.md": "alphabeta $gammas",
              "d.md": "line one, two alpha\nbeta produced them", "e.md": "delta-x24 gamma"}
    assert [w.split(": ", 1)[0] for w in lending_words(sample, phrases)] == ["a.md:1", "b.py:1", "b.py:1", "d.md:1"]


def test_the_check_finds_the_phrases_in_the_recorded_outputs():
    """The recorded raw outputs print the machine's words as they were (its copy limit, its calls, its kinds):
    the hashed phrases must still find them there, or the check above could pass by finding nothing anywhere."""
    found = lending_words(_texts(raw_output))
    distinct = {w.rsplit(": ", 1)[1] for w in found}
    assert len(distinct) >= 3, f"expected the phrases to catch several words of the recorded outputs, found {distinct}"
