"""This repository's own vocabulary in what export-pr would ship upstream, without an upstream checkout.

For every patch of every line that export-pr exports, the files of its commit on the pinned release
(lint/shipped.py): every line of a new file (overlay modules, the unittest, a benchmark) and the lines the
patch adds to upstream files are matched against the series' `forbid` list. export-pr refuses the same hits against the real base; this finds them
in `make check`.

    python -m lint.vocabulary [--repo DIR]      exit 0: none, 1: one line per hit
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def findings(repo: Path) -> list[str]:
    from patchkit.pr.claims import file_hits

    from lint.shipped import shipped

    repo = Path(repo).resolve()
    out = []
    for f in shipped(repo):
        if f.after is None:
            continue
        for path, n, term in file_hits(f.forbid, f.path, f.before, f.after):
            out.append(f"{f.line} {f.upstream}/{f.patch[:4]}: {path}:{n}: names this repository's own "
                       f"'{term}' (forbidden by {f.data_path.relative_to(repo)})")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lint.vocabulary", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path("."), help="checkout to check (default: here)")
    args = parser.parse_args(argv)
    hits = findings(args.repo)
    for hit in hits:
        print(hit)
    print(f"vocabulary: {len(hits)} finding(s) in the files export-pr ships")
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
