"""What PATCH_MAP.md ("Rebase exercise target") predicts for each patch when the pin moves
sglang 0.5.14 -> 0.5.17 and flashinfer-python 0.6.12 -> 0.6.15.post1, and helpers shared by the rebase tests.

Patches are recognised by the files they touch and their subject, not by their file names, so the
expectations hold whatever number a patch has and whichever patches exist yet. Where two patches touch the
same file (P1 and P7 the sm_120 dispatcher, P3 and P7 deepseek_v4.py) the subject pattern tells them apart.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.engine_fixtures import REPO, copy_repo_data
from patchkit.patchfile import PatchFile

TO = {"sglang": "0.5.17", "flashinfer": "0.6.15.post1"}
# The 0.5.17 wheel of the same kind as the pin, and its digest as published by the index.
NEW_SGLANG_WHEEL = "sglang-0.5.17-cp311-cp311-manylinux_2_34_x86_64.whl"
NEW_SGLANG_SHA256 = "575e38f5683624ded3b4bb267f637a098e5ed37d13a1d1ff5ea09bd781a04d16"
NEW_FLASHINFER_WHEEL = "flashinfer_python-0.6.15.post1-py3-none-any.whl"

INDEXER = "sglang/srt/layers/attention/dsv4/indexer.py"


@dataclass
class Expect:
    label: str
    upstream: str
    touches: str
    subject: str            # regex the subject must match ('' = any)
    result: str
    unreached: bool         # the new release routes around it (its reach trailers must say so)

    def matches(self, upstream: str, patch: PatchFile) -> bool:
        return (upstream == self.upstream and self.touches in patch.paths
                and re.search(self.subject, patch.subject, re.I) is not None)


EXPECTED = [
    # P1: the dispatcher moved to sglang/kernels/ops/attention/ and was rewritten; the default backend is FlashInfer.
    Expect("P1 MMA sparse decode", "sglang", "sglang/srt/layers/attention/flash_mla_sm120.py", r"KV tile", "conflict", True),
    # P2: upstream made the same bf16 change in 0.5.16.
    Expect("P2 bf16 indexer", "sglang", INDEXER, r"bf16|bfloat16", "already upstream", False),
    # P3: PATCH_MAP predicts "offset" for the bare fp32 -> bf16 lines (193 lines further down), but the patch
    # also imports its Triton kernel among the model's imports, which 0.5.17 rewrote right there: a conflict.
    Expect("P3 bf16 MHC-pre", "sglang", "sglang/srt/models/deepseek_v4.py", r"MHC", "conflict", False),
    # P4: server_args forces the TileLang indexer on sm_120 (0.5.16+), whose loop stops at each row's real
    # length: its Superseded-By trailers match, so it is dropped as superseded (issue 23).
    Expect("P4 indexer length", "sglang", INDEXER, r"^(?!.*(bf16|bfloat16))", "superseded", False),
    # P7: its dispatcher hunk sits on P1's (moved, rewritten); 0.5.17 reworked MQALayer.forward's padding and
    # already passes a per-call sink (two hunks are in the release); no longer reached like P1 (FlashInfer default).
    Expect("P7 real query heads", "sglang", "sglang/srt/models/deepseek_v4.py", r"query heads", "conflict", True),
    # P5: identical code, +12 lines.
    Expect("P5 FP4 JIT", "flashinfer", "flashinfer/quantization/fp4_quantization.py", "", "offset", False),
    # P6: cpp_ext.py is byte-identical in 0.6.15.post1.
    Expect("P6 CUDA version", "flashinfer", "flashinfer/jit/cpp_ext.py", "", "clean", False),
    # the downstream attestation patch (sglang 0006, not in PATCH_MAP: never sent upstream): its new function sits
    # before _set_envs_and_config, which 0.5.17 moved; git merges it 3-way.
    Expect("attestation log line", "sglang", "sglang/srt/entrypoints/engine.py", r"patch set", "offset", False),
]


def expectation(upstream: str, patch: PatchFile) -> Expect:
    hits = [e for e in EXPECTED if e.matches(upstream, patch)]
    assert len(hits) == 1, f"{upstream}/{patch.name} ({patch.subject}): expected one PATCH_MAP expectation, found {[e.label for e in hits]}"
    return hits[0]


def repo_copy(dest: Path) -> Path:
    """The repo's data and CLI (plus BENCHMARKS.md) in a scratch directory: tests never write the checkout."""
    copy_repo_data(dest)
    if (REPO / "BENCHMARKS.md").exists():
        shutil.copy2(REPO / "BENCHMARKS.md", dest / "BENCHMARKS.md")
    return dest


def _conflict_blocks(text: str) -> list:
    """The file as a list of plain lines (str) and conflict blocks ((ours, theirs) line lists)."""
    out, mode, ours, theirs = [], None, [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("<<<<<<< "):
            mode, ours, theirs = "ours", [], []
        elif mode == "ours" and line.startswith("||||||| "):
            mode = "base"
        elif mode in ("ours", "base") and line.rstrip("\n") == "=======":
            mode = "theirs"
        elif mode == "theirs" and line.startswith(">>>>>>> "):
            out.append((ours, theirs))
            mode = None
        elif mode == "ours":
            ours.append(line)
        elif mode == "theirs":
            theirs.append(line)
        elif mode is None:
            out.append(line)
    return out


def resolve_scripted(path: Path) -> None:
    """A scripted conflict resolution that leaves valid Python: each conflict becomes, of the union (the new
    release's side, then the patch's lines it lacks), the patch's side and the release's side, the first that
    parses with the fewest undefined names. (A plain union leaves unbalanced brackets and names only a
    dropped side defines in sglang's modules, which `--continue` refuses: patchkit/rebase/pydefs.py.)"""
    import ast

    parts = _conflict_blocks(path.read_text())
    import re

    header = re.compile(r"^\s*(class|def)\s+(\w+)")
    def extra(b):
        """The patch's lines the release's side lacks, without a class header where the release's side opens a
        class itself (the release renamed or rebased it) or a def header the release's side has."""
        heads = [m.groups() for l in b[0] if (m := header.match(l))]
        def dup(l):
            m = header.match(l)
            return m and ((m.group(1) == "class" and any(k == "class" for k, _ in heads)) or m.groups() in heads)
        return [l for l in b[1] if l not in b[0] and not dup(l)]
    union = lambda b: b[0] + extra(b)
    union_before = lambda b: extra(b) + b[0]
    choice = {i: b[0] for i, b in enumerate(parts) if isinstance(b, tuple)}

    def text() -> str:
        return "".join("".join(choice[i]) if isinstance(b, tuple) else b for i, b in enumerate(parts))
    from patchkit.rebase.pydefs import _undefined

    from patchkit.rebase.pydefs import _all_defs

    def score(t: str):
        try:
            tree = ast.parse(t)
        except SyntaxError:
            return (1, 0)
        defs = [(d.owner, d.name) for d in _all_defs(tree)]
        return (0, len(_undefined(tree)) + len(defs) - len(set(defs)))
    for _ in range(2):          # a second pass: a later block may define what an earlier one uses
        for i in list(choice):
            options = [union(parts[i]), union_before(parts[i]), parts[i][1], parts[i][0]]
            scored = []
            for n, option in enumerate(options):
                choice[i] = option
                scored.append((score(text()), n))
            choice[i] = options[min(scored)[1]]
    path.write_text(_with_missing_stdlib_imports(text()))


def _with_missing_stdlib_imports(text: str) -> str:
    """What the person resolving does when the release dropped an import the patch's code still needs:
    import each standard-library module the module uses but no longer imports (after any __future__ import)."""
    import ast
    import sys

    from patchkit.rebase.pydefs import _undefined

    missing = sorted(n for n in _undefined(ast.parse(text)) if n in sys.stdlib_module_names)
    if not missing:
        return text
    lines = text.splitlines(keepends=True)
    at = max((i + 1 for i, l in enumerate(lines) if l.startswith("from __future__ import")), default=0)
    return "".join(lines[:at] + [f"import {n}\n" for n in missing] + lines[at:])


def resolve_ours(path: Path) -> None:
    """Keep the new release's side of every conflict (the patch's clean hunks stay)."""
    from patchkit.rebase.replay import ours_side

    path.write_text(ours_side(path.read_text()))
