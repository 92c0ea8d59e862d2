"""What the PR texts claim (patches/LINE/UPSTREAM/upstream-pr.toml) against what they describe, on every line.

- every command a PR prints runs in a checkout of the pinned release with the change: each `python -m MODULE`
  is a module of the pinned wheel (or a file the PR ships) and each `--flag` is one that module, or the server
  arguments it reads, defines; nothing of this repository (`bench.*`);
- what the PR body says of its unittest (what runs without a GPU) is what the unittest's own skips say;
- a count of passed tests is the PR's own unittest's count, never this repository's;
- the Triton releases stated for the Gluon kernel are the kernel's own GLUON_TRITON_RELEASES.

The texts are rendered the way export-pr renders them (facts filled from the shipped files); the unittests and
kernels are read as files (ast), the upstream modules from the pinned wheels. No checkout, no GPU: seconds.
"""
from __future__ import annotations

import ast
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest

from patchkit.lockfile import load_lock, lock_lines
from patchkit.pr.body import Stack, pr_body
from patchkit.pr.prdata import load_pr_data
from patchkit.pr.template import DEFAULT_TEMPLATE
from tests.conftest import REPO, pristine_wheel

LINES = lock_lines(REPO / "pin.lock")


def descriptions():
    """(line, upstream name, its Upstream, the UpstreamPR) of every described patch of every line, and of each
    patch's follow-up PR."""
    for line in LINES:
        for name, up in load_lock(REPO / "pin.lock", line).upstreams.items():
            data = load_pr_data(REPO / "patches" / line / name)
            for pr in data.patches.values():
                yield line, name, up, pr


def _constant(path: Path, name: str):
    for node in ast.parse(path.read_bytes()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path}: no module-level {name}")


def _said(value) -> str:
    items = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def texts(line: str, pr) -> list[str]:
    """The PR's prose as exported: title, motivation, per-file lines, results, with its facts filled in
    from the overlay files it ships (read here independently of the exporter)."""
    facts = {k: _said(_constant(REPO / "overlay" / line / path, const))
             for k, (path, const) in getattr(pr, "facts", {}).items()}
    fill = lambda t: re.sub(r"\{(\w+)\}", lambda m: facts[m.group(1)], t)  # noqa: E731
    return [fill(t) for t in [pr.title, pr.motivation, *pr.modifications.values(),
                              *(m.result for m in pr.accuracy + pr.benchmark),
                              *(m.model for m in pr.accuracy + pr.benchmark if m.model)]]


def printed_commands(pr) -> list[str]:
    """Every command the PR body prints for a reviewer to run."""
    measured = [m.command for m in pr.accuracy + pr.benchmark if getattr(m, "harness", "upstream") == "upstream"]
    return [*getattr(pr, "reproduce", {}).values(), *measured]


# -- commands ---------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _wheel(line: str, name: str):
    return pristine_wheel(name, line)


@lru_cache(maxsize=None)
def _sources(line: str, name: str, *rels: str) -> str:
    wheel = _wheel(line, name)
    return "\n".join(wheel.read(r).decode("utf-8", "replace") for r in rels if wheel.has(r))


def _module_file(line: str, name: str, module: str) -> str | None:
    wheel, base = _wheel(line, name), module.replace(".", "/")
    overlay = REPO / "overlay" / line
    for rel in (base + ".py", base + "/__main__.py"):
        if wheel.has(rel) or (overlay / rel).is_file():
            return rel
    return None


def _runs(command: str):
    """(module, [--flags]) of every `python[3] -m MODULE ...` in a shell command."""
    for part in re.split(r"&&|\|\||;|\|", command.replace("\\\n", " ")):
        words = shlex.split(part)
        for i, w in enumerate(words):
            if re.fullmatch(r"python(\d(\.\d+)?)?", w.rsplit("/", 1)[-1]) and words[i + 1:i + 2] == ["-m"]:
                yield words[i + 2], [a.split("=", 1)[0] for a in words[i + 3:] if a.startswith("--")]


def _defines(line: str, name: str, module_rel: str, flag: str) -> bool:
    """Whether the module (or the server arguments it takes) defines the command-line flag."""
    wheel = _wheel(line, name)   # 0.5.23 derives the server's flags from the fields of srt/arg_groups/
    groups = [n for n in wheel.names if n.startswith("sglang/srt/arg_groups/") and n.endswith(".py")]
    text = _sources(line, name, module_rel, "sglang/srt/server_args.py", *groups)
    field = flag[2:].replace("-", "_")
    return f'"{flag}"' in text or re.search(rf"^\s+{field}\s*:", text, re.M) is not None


@pytest.mark.parametrize("line", LINES)
def test_every_printed_command_runs_in_the_pinned_release(line):
    checked = 0
    for pr_line, name, up, pr in descriptions():
        if pr_line != line:
            continue
        for command in printed_commands(pr):
            runs = list(_runs(command))
            assert runs or "python" not in command, f"{pr.file}: no python module found in {command!r}"
            for module, flags in runs:
                rel = _module_file(line, name, module)
                assert rel, (f"{line} {pr.file}: prints `python3 -m {module}`, which the pinned {up.package} "
                             f"{up.version} does not have")
                for flag in flags:
                    assert _defines(line, name, rel, flag), f"{line} {pr.file}: {module} has no {flag}"
                checked += 1
    if line in ("0.5.14", "0.5.23"):
        assert checked, f"{line}: no PR prints a command to reproduce it"


def test_commands_in_the_data_are_checked_with_their_flags():
    """The check above fails on a module or flag the release lacks (so it cannot pass vacuously)."""
    line = LINES[-1]
    assert _module_file(line, "sglang", "bench.kernels.bench_mma_decode") is None
    rel = _module_file(line, "sglang", "sglang.test.run_eval")
    assert rel and _defines(line, "sglang", rel, "--eval-name") and not _defines(line, "sglang", rel, "--no-such-flag")


# -- what the unittest runs where -----------------------------------------------------------------
def unittest_parts(path: Path) -> set[str]:
    """"cpu" if a test of the file runs without CUDA, "gpu" if one runs only with it, from its skips."""
    parts = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
            continue
        needs = "any"
        for dec in node.decorator_list:
            if not isinstance(dec, ast.Call) or not dec.args:
                continue
            fn = dec.func.attr if isinstance(dec.func, ast.Attribute) else getattr(dec.func, "id", "")
            cond = ast.unparse(dec.args[0]).replace(" ", "")
            if "cuda.is_available()" not in cond:
                continue
            negated = cond.startswith("not")
            if fn == "skipUnless":
                needs = "cpu" if negated else "gpu"
            elif fn in ("skipIf", "skipif"):
                needs = "gpu" if negated else "cpu"
        parts.add("cpu" if needs == "any" else needs)   # a test with no CUDA skip runs without a GPU
    return parts


def test_what_the_body_says_of_its_unittest_is_what_the_unittest_does():
    checked = 0
    for line, name, up, pr in descriptions():
        if pr.test_file is None:
            continue
        parts = unittest_parts(pr.test_file)
        body = pr_body(pr, DEFAULT_TEMPLATE, [], "main", Stack(), f"python3 {pr.test_dest}")
        said = body.split(f"```\npython3 {pr.test_dest}")[0].strip().rsplit("\n\n", 1)[-1]   # the sentence before it
        claims_cpu = re.search(r"(?i)CPU part|without a GPU|runs anywhere", said) is not None
        claims_gpu = re.search(r"(?i)GPU part|GPU only|needs CUDA|skips without CUDA", said) is not None
        assert claims_cpu == ("cpu" in parts), f"{line} {pr.file}: says {said!r}; its tests run on {sorted(parts)}"
        assert claims_gpu == ("gpu" in parts), f"{line} {pr.file}: says {said!r}; its tests run on {sorted(parts)}"
        checked += 1
    assert checked >= 4


def test_a_count_of_passed_tests_is_the_prs_own():
    for line, name, up, pr in descriptions():
        own = None
        if pr.test_file is not None:
            own = sum(1 for n in ast.walk(ast.parse(pr.test_file.read_text()))
                      if isinstance(n, ast.FunctionDef) and n.name.startswith("test"))
        for text in texts(line, pr):
            for count in re.findall(r"\b(\d+) passed\b", text):
                assert own is not None and int(count) == own, \
                    f"{line} {pr.file}: says '{count} passed', its own unittest has {own} test(s)"


# -- facts read from the code ---------------------------------------------------------------------
def test_the_gluon_triton_releases_stated_are_the_kernels():
    checked = 0
    for line, name, up, pr in descriptions():
        kernels = [REPO / "overlay" / line / rel for rel in pr.modifications
                   if (REPO / "overlay" / line / rel).is_file()
                   and "GLUON_TRITON_RELEASES" in (REPO / "overlay" / line / rel).read_text()]
        if not kernels:
            continue
        releases = set(_constant(kernels[0], "GLUON_TRITON_RELEASES"))
        for text in texts(line, pr):
            for sentence in re.split(r"(?<=[.;])\s+", text):
                said = set(re.findall(r"\b3\.\d+\b", sentence)) if re.search(r"Gluon", sentence) else set()
                if said:
                    assert said == releases, (f"{line} {pr.file}: says Gluon runs on Triton {sorted(said)}, the "
                                              f"kernel enables {sorted(releases)}: {sentence!r}")
                    checked += 1
    assert checked, "no PR text states the Gluon kernel's Triton releases"


# What a text says the release runs: "this release runs torch X" / "Triton X, the release this version of SGLang
# runs" / "Triton X (the Triton this release runs)".
_RUNTIME_CLAIMS = [
    ("torch", r"this release runs torch (\d+\.\d+(?:\.\d+)?)"),
    ("triton", r"Triton (\d+\.\d+(?:\.\d+)?),? the release this version of SGLang runs"),
    ("triton", r"Triton (\d+\.\d+(?:\.\d+)?) \(the Triton this release runs\)"),
]


def test_the_runtime_a_text_says_the_release_runs_is_the_pinned_one():
    """A torch or Triton version a PR text says its release runs is that line's pin.lock runtime (a stated
    X.Y matches a pinned X.Y.Z)."""
    checked = 0
    for line, name, up, pr in descriptions():
        runtime = load_lock(REPO / "pin.lock", line).runtime
        for text in texts(line, pr):
            for package, pattern in _RUNTIME_CLAIMS:
                for said in re.findall(pattern, " ".join(text.split())):   # prose wraps anywhere
                    pinned = runtime[package]
                    assert pinned == said or pinned.startswith(said + "."), (
                        f"{line} {pr.file}: says the release runs {package} {said}, pin.lock has {pinned}")
                    checked += 1
    assert checked, "no PR text states the runtime its release runs"


# -- measured or not ------------------------------------------------------------------------------
_PR = '''[[patch]]
file = "0001-x.patch"
title = "t"
motivation = "m"
[patch.reproduce]
server = "python3 -m pkg.launch --model-path M"
accuracy = "python3 -m pkg.eval --eval-name gsm8k"
[[patch.accuracy]]
result = "relative error 2e-3 against float64"
command = "python3 -m bench.our_script --shapes all"
harness = "standalone"
gpu = "G"
versions = "V"
date = "2026-12-01"
'''
_MEASURED = '''[[patch.accuracy]]
result = "GSM8K 0.00 (random weights)"
command = "python3 -m pkg.eval --eval-name gsm8k --data-path /data/test.jsonl"
model = "a random-weight model of the real shapes: the route runs end to end, not model quality"
gpu = "G"
versions = "V"
date = "2026-12-04"
'''


@pytest.mark.parametrize("measured", [False, True], ids=["standalone-only", "measured-upstream"])
def test_the_body_never_pretends_an_end_to_end_measurement(tmp_path, measured):
    """A standalone result is stated with no command to run; the reproduction commands are printed, and unless
    a result was measured with upstream's own commands the body says the end-to-end run is not measured yet;
    a measured one is printed with the model it ran on."""
    (tmp_path / "upstream-pr.toml").write_text(_PR + (_MEASURED if measured else ""))
    pr = load_pr_data(tmp_path).patches["0001-x.patch"]
    body = pr_body(pr, DEFAULT_TEMPLATE, [], "main", Stack())
    accuracy = body.split("## Accuracy Tests", 1)[1].split("\n## ", 1)[0]
    assert "relative error 2e-3 against float64" in accuracy and "bench.our_script" not in body
    assert "python3 -m pkg.launch --model-path M\npython3 -m pkg.eval --eval-name gsm8k" in accuracy
    assert ("not measured yet" in accuracy) is not measured
    if measured:
        assert "- Model: a random-weight model of the real shapes" in accuracy and "--data-path /data/test.jsonl" in accuracy


# -- vocabulary in every shipped file -------------------------------------------------------------
def test_nothing_export_pr_ships_names_this_repository():
    """Every file of every exported commit (new files whole, the lines patches add, the unittests), built on the
    pinned release as export-pr builds it, is free of the series' forbidden vocabulary (lint/vocabulary.py, also
    run by `make check` through lint.gate)."""
    from lint.vocabulary import findings

    assert findings(REPO) == []
