"""Set some keys of a mapping for the length of a `with` block: sys.modules while a piece of an upstream tree
loads against stand-ins, os.environ while a release reads its flags. One owner, so that every caller puts back
exactly what was there (an absent key stays absent) however the block ends."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, MutableMapping


@contextmanager
def scoped(mapping: MutableMapping[str, Any], values: dict[str, Any]) -> Iterator[None]:
    """While inside, mapping[k] is values[k] for each k (a value of None: k absent); after, each k is as it was.
    Keys the block adds under other names are left alone."""
    saved = {k: mapping.get(k) for k in values}
    _put(mapping, values)
    try:
        yield
    finally:
        _put(mapping, saved)


def _put(mapping: MutableMapping[str, Any], values: dict[str, Any]) -> None:
    for k, v in values.items():
        if v is None:
            mapping.pop(k, None)
        else:
            mapping[k] = v
