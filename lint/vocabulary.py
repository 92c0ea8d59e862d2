"""This repository's own vocabulary in what export-pr would ship upstream, without an upstream checkout.

For every patch of every line that export-pr exports (its upstream-pr.toml describes it), the files of its
commit on the pinned release are what `export-pr` builds (patchkit.pr.carry, onto the pinned files): every
line of a new file (overlay modules, the unittest) and the lines the patch adds to upstream files are matched
against the series' `forbid` list. export-pr refuses the same hits against the real base; this finds them
in `make check`.

    python -m lint.vocabulary [--repo DIR]      exit 0: none, 1: one line per hit
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def findings(repo: Path) -> list[str]:
    from patchkit.engine import Engine
    from patchkit.pr.carry import carried_change
    from patchkit.pr.claims import file_hits
    from patchkit.pr.prdata import load_pr_data

    repo = Path(repo).resolve()
    newest = Engine.from_repo(repo, read_only=True)
    out = []
    for line in newest.lock.lines:
        engine = newest.for_line(line)
        for name in engine.lock.upstreams:
            data = load_pr_data(engine.patches_root / name)
            if data is None:
                continue
            series, pristine = engine.series(name), engine.pristine(name)
            pinned = lambda rel: pristine.read(rel) if pristine.has(rel) else None  # noqa: E731
            for i, patch in enumerate(series.patches):
                pr = data.patches.get(patch.name)
                if pr is None:      # not exported (downstream only)
                    continue
                files = {rel: (pinned(rel), after)
                         for rel, after in carried_change(series, i, pristine, pinned, "the pin", "").items()}
                files.update({rel: (None, series.overlay_bytes(rel)) for rel in patch.overlay})
                for described in (pr, pr.followup):   # the unittests of the PR and of its follow-up PR
                    if described is not None and described.test_file is not None:
                        files[described.test_dest] = (None, described.test_file.read_bytes())
                for rel, (before, after) in files.items():
                    if after is None:
                        continue
                    for path, n, term in file_hits(data.forbid, rel, before, after):
                        out.append(f"{line} {name}/{patch.name[:4]}: {path}:{n}: names this repository's own "
                                   f"'{term}' (forbidden by {data.path.relative_to(repo)})")
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
