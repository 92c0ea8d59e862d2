"""Helpers for the issue-23 tests against the real SGLang releases after the pin (0.5.16 ... 0.5.23).

Patches are found by the files they touch and their subject (as in rebase_cases.py), so the tests hold
whatever number a patch has. Wheels come through pip into the patchkit cache (fetch.find_release), as
every rebase gets them.
"""
from __future__ import annotations

import re

from tests.conftest import LOCK
from patchkit.fetch import find_release
from patchkit.pristine import Pristine

SGLANG = LOCK.upstream("sglang")
DISPATCHER = "sglang/srt/layers/attention/flash_mla_sm120.py"
DISPATCHER_0_5_16 = "sglang/kernels/ops/attention/flash_mla_sm120.py"     # where 0.5.16+ keep it
INDEXER = "sglang/srt/layers/attention/dsv4/indexer.py"
MODEL = "sglang/srt/models/deepseek_v4.py"

# (label, series, a file it touches, subject regex)
P1 = ("P1", "sglang", DISPATCHER, r"KV tile")
P4 = ("P4", "sglang", INDEXER, r"real length")
P7 = ("P7", "sglang", MODEL, r"query heads")


def release(version: str) -> Pristine:
    """The sglang `version` wheel with the pin's tags, through pip into the cache."""
    return Pristine(find_release(SGLANG.package, version, SGLANG.artifact, log=lambda *_: None).path)


def reader(pristine: Pristine):
    return lambda rel: pristine.read(rel) if pristine.has(rel) else None


def patch_of(series, which):
    label, _, touches, subject = which
    hits = [p for p in series.patches if touches in p.paths and re.search(subject, p.subject, re.I)]
    assert len(hits) == 1, f"{label}: expected one patch touching {touches} with subject ~ {subject!r}, found {hits}"
    return hits[0]


def result_of(report: dict, which, patches) -> dict:
    """The report entry (a --json dry-run report) of the patch `which` names."""
    name = patch_of(patches, which).name
    hits = [r for e in report["upstreams"] if e["name"] == which[1] for r in e["results"] if r["patch"] == name]
    assert len(hits) == 1, f"{which[0]} ({name}) not in the report"
    return hits[0]
