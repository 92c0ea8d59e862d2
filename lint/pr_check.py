"""`make pr-check`: for every patch export-pr would send upstream, what its maintainers ask first, one table.

    python -m lint.pr_check [--tools DIR] [--repo DIR] [--line NAME]

Per exportable patch of the line (a `[[patch]]` of upstream-pr.toml, not `Upstream-Status: Inappropriate`):

- applies: `apply.py check` on the pinned release (exact, no offset, round-trips);
- hooks: the lint gate's tools (lint/settings.toml) on what it exports: the lines it adds, its new files, its
  test and benchmark files;
- test on the CPU: the test file it adds, run on the pristine release and on the patched one, as upstream's CI
  runs it (`python3 FILE` through harness/upstream_test.py, or `pytest` from the tree); a PR's test is red
  before and green after; a test with no CPU part is "GPU only";
- benchmark suite: the CI suite its benchmark file registers in (the keywords of its `register_*` call).

Opt-in: outside `make check` and CI, since it runs every upstream test twice. Exit 0 when every row is
clean, 1 otherwise. `build_rows` makes the table from the line's data and three callables (applies, hooks,
test run), so the table is tested without the heavy steps (tests/pr/test_pr_check.py).
"""
from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lint import gate
from patchkit.report import table

HEADER = ["patch", "applies on the pin", "hooks", "test on the CPU (pristine -> patched)", "benchmark suite"]


@dataclass
class Exportable:
    upstream: str
    patch: object           # patchkit.patchfile.PatchFile
    label: str
    pr: object              # patchkit.pr.prdata.UpstreamPR

    @property
    def name(self) -> str:
        return (f"{self.label} " if self.label else "") + f"{self.upstream}/{self.patch.name[:4]}"


def exportables(engine) -> list[Exportable]:
    from patchkit.pr.prdata import load_pr_data

    out = []
    for name in engine.lock.upstreams:
        series = engine.series(name)
        data = load_pr_data(engine.patches_root / name)
        for p in series.patches:
            status = (p.trailer("Upstream-Status") or [""])[0]
            if data is None or p.name not in data.patches or status.lower().startswith("inappropriate"):
                continue
            out.append(Exportable(name, p, series.label_of(p), data.patches[p.name]))
    return out


def exported_paths(item: Exportable, repo: Path) -> set[str]:
    """The paths the lint gate names the patch's files by: wheel paths of what it changes or adds, and the
    repository paths of the test and benchmark files it carries."""
    kept = [f for f in [item.pr.test_file, *(src for src, _, _ in item.pr.files)] if f is not None]
    return set(item.patch.paths) | set(item.patch.overlay) | {str(Path(f).resolve().relative_to(repo)) for f in kept}


def suite_of(pr) -> str:
    """The keywords of the `register_*` call of the PR's benchmark file(s): the CI suite it runs in."""
    found = []
    for src, dest, _ in pr.files:
        if not str(src).endswith(".py"):
            continue
        for node in ast.walk(ast.parse(Path(src).read_text(encoding="utf-8"), str(src))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")).startswith("register"):
                words = [f"{k.arg}={ast.literal_eval(k.value)}" for k in node.keywords
                         if k.arg in ("stage", "runner_config", "suite") and isinstance(k.value, ast.Constant)]
                found.append(f"{dest}: " + (", ".join(words) or "registered, no suite named"))
        if not found:
            found.append(f"{dest}: not registered")
    return "; ".join(found) or "no benchmark"


def hooks_cell(findings: list[str], paths: set[str]) -> str:
    mine = [f for f in findings if f.split(":", 1)[0] in paths]
    return "clean" if not mine else f"{len(mine)} finding(s), first {mine[0].splitlines()[0]}"


def cpu_test_cell(pr, run) -> str:
    """red/green before and after; `run(pr, tree_kind)`: the test's exit status on that tree (or the status and
    the last error line it printed)."""
    if pr.test_file is None:
        return "no test"
    if "cpu" not in pr.test_parts:
        return "GPU only"
    (before, why_before), (after, why_after) = _status(run(pr, "pristine")), _status(run(pr, "patched"))
    said = lambda rc, why: "green" if rc == 0 else f"red (exit {rc}{': ' + why if why else ''})"  # noqa: E731
    verdict = "ok" if before != 0 and after == 0 else "NOT red -> green"
    return f"{said(before, why_before if after != 0 else '')} -> {said(after, why_after)}: {verdict}"


def _status(result) -> tuple[int, str]:
    """A run's (exit status, its last error line): a red on both trees is read by why it failed."""
    return result if isinstance(result, tuple) else (result, "")


def build_rows(engine, repo: Path, applies, findings: list[str], run) -> list[list[str]]:
    """One row per exportable patch. `applies`: patch file name -> its `check` verdict; `findings`: the lint
    gate's lines for this line; `run(pr, "pristine" | "patched")`: a test's exit status."""
    rows = []
    for item in exportables(engine):
        rows.append([item.name, applies.get(item.patch.name, "not checked"),
                     hooks_cell(findings, exported_paths(item, Path(repo).resolve())),
                     cpu_test_cell(item.pr, run), suite_of(item.pr)])
    return rows


def clean(row: list[str]) -> bool:
    return (row[1] == "ok" and row[2] == "clean"
            and (row[3].endswith(": ok") or row[3] in ("GPU only", "no test")))


# -- the heavy steps --------------------------------------------------------------------------------
def check_verdicts(engine) -> dict[str, str]:
    from patchkit.check import check_repository

    return {f.item: f.verdict if f.verdict == "ok" else f"{f.verdict}: {f.detail}"
            for f in check_repository(engine, log=lambda *_: None)}


def trees(engine, where: Path) -> dict[str, Path]:
    """The line's pristine release and the patched one, side by side (site-packages layout)."""
    pristine, patched = where / "pristine", where / "patched"
    for name, up in engine.lock.upstreams.items():
        engine.pristine(name).unpack(pristine, root=up.root)
    shutil.copytree(pristine, patched)
    engine.apply(patched, log=lambda *_: None)
    return {"pristine": pristine, "patched": patched}


def upstream_test_runner(repo: Path, tree_of: dict[str, Path], python: str):
    def run(pr, kind: str) -> int:
        tree = tree_of[kind]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        env.setdefault("TRITON_INTERPRET", "1")     # a CPU check: Triton kernels run in its interpreter
        if pr.test_runner == "pytest":        # from the tree, at its repository path, as upstream's CI runs it
            dest = tree / pr.test_dest
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(pr.test_file, dest)
            try:
                cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", pr.test_dest]
                return _ran(subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=1200))
            finally:
                dest.unlink()
        cmd = [python, "-m", "harness.upstream_test", str(tree), str(pr.test_file)]
        return _ran(subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1200))
    return run


def _ran(proc) -> tuple[int, str]:
    errors = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if "Error" in line]
    return proc.returncode, (errors[-1][:120] if proc.returncode and errors else "")


def main(argv: list[str] | None = None) -> int:
    from patchkit.engine import Engine

    parser = argparse.ArgumentParser(prog="python -m lint.pr_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=Path, default=Path(".venv-lint/bin"), help="the lint tools (make check's venv)")
    parser.add_argument("--repo", type=Path, default=Path("."), help="the checkout (default: here)")
    parser.add_argument("--line", help="the release line (default: the newest)")
    parser.add_argument("--python", default=sys.executable, help="the python that runs the upstream tests")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    if not (args.tools / "ruff").is_file():
        print(f"pr-check: expected the lint tools in {args.tools}, found none (make check installs them)", file=sys.stderr)
        return 2
    engine = Engine.from_repo(repo, line=args.line)
    findings = gate.lint(repo, args.tools, gate.load_settings(), lines=[engine.lock.line])
    with tempfile.TemporaryDirectory(prefix="pr-check-") as tmp:
        rows = build_rows(engine, repo, check_verdicts(engine), findings,
                          upstream_test_runner(repo, trees(engine, Path(tmp)), args.python))
    print(f"pr-check: line {engine.lock.line}")
    print(table(rows, HEADER))
    return 0 if all(clean(r) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
