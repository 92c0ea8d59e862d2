"""Progress of a long loop: a tqdm bar on a terminal, plain lines otherwise (and wherever tqdm is missing)."""
from __future__ import annotations

import sys


def counted(items: list, label: str, log, unit: str = "files"):
    """Yield `items`; on a terminal a tqdm bar on stderr, else a `log` line at each quarter."""
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:   # tqdm is optional: the engine runs without it
            pass
        else:
            yield from tqdm(items, desc=label, unit=unit.rstrip("s"), leave=False, file=sys.stderr)
            return
    total = len(items)
    quarters = {total * q // 4 for q in (1, 2, 3, 4)}
    for done, item in enumerate(items, 1):
        yield item
        if done in quarters:
            log(f"{label}: {done}/{total} {unit}")
