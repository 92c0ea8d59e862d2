"""The lint gate of `make check`: upstream's own formatters and linters on what this set ships.

What is checked: every overlay file and every .py file kept under patches/<upstream>/ (the tests a PR
carries) as whole files, in every file a patch changes the lines the series adds (difflib against the
pinned release's bytes), and every .py file export-pr ships for an exportable patch as its commit holds
it (lint/shipped.py: a new file whole, a changed one for the lines the commit adds; those that are not
already among the above, byte for byte, are named export-pr/LINE/NNNN/PATH), and, by lint/vocabulary.py,
every file export-pr ships against the series' forbidden vocabulary. The patched files are checked whole, then only
findings on added lines are reported: upstream's own lines are upstream's business, and its pinned 0.5.14
files are not clean under the 0.5.23 tools. Which checks run, and their settings, come from
lint/settings.toml, per upstream; the tools run isolated from any config file.

    python -m lint.gate [--tools DIR] [--repo DIR] [--fix]

--fix first runs the formatters in place on the whole files (overlay/, patches/*/**.py); a patch's own
lines are changed only through its worktree (python apply.py worktree / export).

Exit 0: nothing found. 1: findings (one line each, a formatter's change shown as a diff), or a tool that
failed. 2: usage (no tools in DIR: `make check` installs them in .venv-lint).
"""
from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from lint import vocabulary  # noqa: E402

SETTINGS = Path(__file__).with_name("settings.toml")
FORMATTERS = ("isort", "ruff-format")
TOOL_EXE = {"isort": "isort", "ruff-format": "ruff", "ruff-check": "ruff", "codespell": "codespell"}


@dataclass
class Source:
    """One file to lint: its path in wheel layout, its bytes after the series, the lines to report."""

    upstream: str
    path: str
    text: str
    lines: set[int] | None  # 1-based line numbers the set adds; None = the whole file is ours
    origin: Path | None = None  # the file in the checkout, for a whole file (what --fix rewrites)

    def reports(self, first: int, last: int) -> bool:
        if self.lines is None:
            return True
        return any(n in self.lines for n in range(first, last + 1))


def added_lines(pristine: str, final: str) -> set[int]:
    """1-based numbers of the lines of `final` that are not carried over from `pristine`."""
    matcher = difflib.SequenceMatcher(None, pristine.splitlines(), final.splitlines(), autojunk=False)
    added = set()
    for op, _, _, j1, j2 in matcher.get_opcodes():
        if op in ("insert", "replace"):
            added.update(range(j1 + 1, j2 + 1))
    return added


def sources(repo: Path, lines: list[str] | None = None) -> list[Source]:
    """Every .py file the series of each upstream writes (patched or overlay), from the pinned wheels, and
    the .py files kept under patches/<line>/<upstream>/, on every release line (or on `lines`)."""
    from patchkit.engine import Engine

    repo = Path(repo).resolve()
    newest = Engine.from_repo(repo)
    found = []
    for line in lines or newest.lock.lines:   # every release line, each on its own pinned wheels
        engine = newest.for_line(line)
        for name in engine.lock.upstreams:
            for path, fc in sorted(engine.chain(name).files.items()):
                if not path.endswith(".py") or fc.final is None:
                    continue
                final = fc.final.decode()
                if fc.pristine is None:
                    found.append(Source(name, path, final, None, engine.overlay_root / path))
                elif lines := added_lines(fc.pristine.decode(), final):
                    found.append(Source(name, path, final, lines))
            for f in sorted((engine.patches_root / name).rglob("*.py")):
                found.append(Source(name, str(f.relative_to(repo)), f.read_text(), None, f))
    return found + exported_sources(repo, found)


def exported_sources(repo: Path, found: list[Source]) -> list[Source]:
    """Every .py file export-pr ships for an exportable patch (lint/shipped.py), as its commit holds it, that
    is not already among `found` with the same text: a new file whole, a changed one for the lines the commit
    adds to its parent. Named export-pr/LINE/NNNN/PATH (the patch's commit)."""
    from lint.shipped import shipped

    whole = {(src.upstream, src.text) for src in found if src.lines is None}
    patched = {(src.upstream, src.path, src.text) for src in found}
    out = []
    for f in shipped(repo):
        if not f.path.endswith(".py") or f.after is None:
            continue
        text = f.after.decode()
        if f.before is None and (f.upstream, text) in whole:
            continue
        if f.before is not None and (f.upstream, f.path, text) in patched:
            continue
        lines = None if f.before is None else added_lines(f.before.decode(), text)
        if lines is None or lines:
            out.append(Source(f.upstream, f"export-pr/{f.line}/{f.patch[:4]}/{f.path}", text, lines))
    return out


def fix(repo: Path, tools: Path, settings: dict) -> list[str]:
    """Run each upstream's formatters in place on its whole files; the files they changed."""
    changed = []
    for upstream, group in _by_upstream(sources(repo)).items():
        conf = settings.get(upstream, {})
        files = [src.origin for src in group if src.origin is not None]
        if not files:  # a formatter given no path formats the working directory
            continue
        before = {f: f.read_bytes() for f in files}
        for check in conf.get("checks", []):
            if check == "isort":
                run_tool(tools / "isort", [*conf.get(check, []), "--quiet", *map(str, files)], ok=(0,))
            elif check == "ruff-format":
                run_tool(tools / "ruff", ["format", "--isolated", "--no-cache", *conf.get(check, []),
                                          *map(str, files)], ok=(0,))
        changed += [str(f.relative_to(repo)) for f in files if f.read_bytes() != before[f]]
    return changed


def run_tool(exe: Path, args: list[str], ok: tuple[int, ...]) -> str:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True)
    if proc.returncode not in ok:
        raise RuntimeError(f"{exe.name} {' '.join(args[:3])} ...: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def formatter_findings(check: str, exe: Path, settings: list[str], files: dict[Path, Source], root: Path) -> list[str]:
    """Run the formatter in place on a copy; every changed range that touches reported lines is a finding."""
    copy = root.parent / f"{root.name}-{check}"
    shutil.copytree(root, copy)
    targets = [str(copy / p.relative_to(root)) for p in files]
    if check == "isort":
        run_tool(exe, [*settings, "--quiet", *targets], ok=(0,))
    else:
        run_tool(exe, ["format", "--isolated", "--no-cache", *settings, *targets], ok=(0,))
    findings = []
    for path, src in files.items():
        before = src.text.splitlines()
        after = (copy / path.relative_to(root)).read_text().splitlines()
        matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                continue
            first, last = i1 + 1, max(i1 + 1, i2)  # an insertion counts at the line it goes before
            if src.reports(first, last):
                diff = [f"    -{line}" for line in before[i1:i2]] + [f"    +{line}" for line in after[j1:j2]]
                findings.append(f"{src.path}:{first}: {check} would change lines {first}-{last}:\n" + "\n".join(diff))
    return findings


LINE_FINDING = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?:\d+:)? ?(?P<what>.*)$")


def line_findings(check: str, exe: Path, settings: list[str], files: dict[Path, Source], root: Path) -> list[str]:
    """ruff check / codespell print `path:line[:col]: message`; keep those on reported lines."""
    targets = [str(p) for p in files]
    if check == "ruff-check":
        out = run_tool(exe, ["check", "--isolated", "--no-cache", "--no-fix", "--output-format", "concise",
                             *settings, *targets], ok=(0, 1))
    else:
        out = run_tool(exe, [*settings, *targets], ok=(0, 65))  # 65: codespell found misspellings
    by_path = {str(p): src for p, src in files.items()}
    findings = []
    for raw in out.splitlines():
        m = LINE_FINDING.match(raw.strip())
        if not m or m["path"] not in by_path:
            continue
        src, line = by_path[m["path"]], int(m["line"])
        if src.reports(line, line):
            findings.append(f"{src.path}:{line}: {check}: {m['what'].strip()}")
    return findings


def lint(repo: Path, tools: Path, settings: dict, lines: list[str] | None = None) -> list[str]:
    findings = []
    with tempfile.TemporaryDirectory(prefix="lint-gate-") as tmp:
        for upstream, group in _by_upstream(sources(repo, lines)).items():
            conf = settings.get(upstream)
            if conf is None:
                raise RuntimeError(f"lint/settings.toml: expected a [{upstream}] table, found none")
            root = Path(tmp) / upstream
            files = {}
            for src in group:
                dest = root / src.path
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(src.text)
                files[dest] = src
            for check in conf["checks"]:
                exe = tools / TOOL_EXE[check]
                run = formatter_findings if check in FORMATTERS else line_findings
                findings += run(check, exe, list(conf.get(check, [])), files, root)
    return findings


def _by_upstream(found: list[Source]) -> dict[str, list[Source]]:
    groups: dict[str, list[Source]] = {}
    for src in found:
        groups.setdefault(src.upstream, []).append(src)
    return groups


def load_settings(path: Path = SETTINGS) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lint.gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=Path, default=Path(".venv-lint/bin"),
                        help="directory holding isort, ruff and codespell (default .venv-lint/bin)")
    parser.add_argument("--repo", type=Path, default=Path("."), help="checkout to lint (default: here)")
    parser.add_argument("--fix", action="store_true", help="format the whole files in place first")
    args = parser.parse_args(argv)
    settings = load_settings()
    missing = sorted({TOOL_EXE[c] for up in settings.values() if isinstance(up, dict) and "checks" in up
                      for c in up["checks"] if not (args.tools / TOOL_EXE[c]).is_file()})
    if missing:
        print(f"error: expected {', '.join(missing)} in {args.tools} (make check installs them into .venv-lint), "
              "found none", file=sys.stderr)
        return 2
    try:
        if args.fix:
            for rel in fix(args.repo.resolve(), args.tools, settings):
                print(f"formatted {rel}")
        findings = lint(args.repo, args.tools, settings)
        findings += vocabulary.findings(args.repo)   # what export-pr ships: none of this repository's vocabulary
    except Exception as exc:  # a tool or a pinned wheel failed: one line, exit 1
        print(f"error: lint gate: {exc}", file=sys.stderr)
        return 1
    for finding in findings:
        print(finding)
    checked = sum(len(up["checks"]) for up in settings.values() if isinstance(up, dict) and "checks" in up)
    print(f"lint: {len(findings)} finding(s); {checked} checks over the overlay files, the patches' added lines"
          " and the files under patches/")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
