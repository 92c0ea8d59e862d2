"""P1 (0.5.23) goes upstream as two PRs, the series keeping one patch: the head-group Triton kernel with the
`mma` switch first, the Gluon kernel as its follow-up on that branch (upstream-pr.toml's [patch.followup]).

- The first PR's kernel file is derived from the one the series ships by the data's `held` regions: it is that
  file less exactly the Gluon parts (every definition it drops is Gluon's, every one it keeps is unchanged or
  loses only its Gluon branch), formatted and linted as the release's hooks do, and importable with no Gluon
  in Triton at all.
- Through the release's dispatcher with SGLANG_SM120_FLASHMLA_BACKEND=mma, the Triton-only file runs under
  Triton's interpreter on the CPU and matches the float64 reference, at shapes where the whole file would pick
  the Gluon kernel on a GPU.
- `export-pr P1 --series` on a checkout of the release makes two branches in order: the first without any
  Gluon (its body's table holds the Triton configs' rows only, its unittest needs no Gluon), the second one
  commit on it adding the whole kernel file and its own unittest, its body naming the first PR's branch, its
  rows the Gluon config's; both bodies pass the vocabulary export-pr and tests/pr/test_export_pr.py check.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from contextlib import contextmanager

import pytest
import torch

from patchkit.pr.export import branch_of, default_branch
from patchkit.pr.followup import first_pr_files
from tests.conftest import REPO
from tests.line_0_5_23 import p1_tree as T
from serving.mma_decode_cases import make_case, reference_f64, rel_err
from tests.pr.test_export_pr import (  # noqa: F401  (fixtures, collected for this line)
    CODE_INTERNAL,
    INTERNAL,
    all_patches,
    assert_upstream_clean,
    body_of,
    checkouts,
    cli,
    delete_branches,
    git,
    overlay_repo,
    pr_data,
)
from tests.line_0_5_23.test_p1_upstream_test import p1

LINE = "0.5.23"
KERNEL = "sglang/kernels/ops/attention/flash_mla_sm120_mma.py"
GLUON = re.compile(r"(?i)gluon|\bgl\.|async_copy|mma_v2|_cta_barrier|_async_load")


def whole() -> bytes:
    return (REPO / "overlay" / LINE / KERNEL).read_bytes()


def triton_only() -> str:
    pr = p1()
    return first_pr_files({KERNEL: whole()}, pr.followup.held, "P1")[KERNEL].decode()


def _definitions(source: str) -> dict[str, str]:
    """Top-level name -> the source of the statement defining it (imports: each name bound)."""
    tree = ast.parse(source)
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = ast.get_source_segment(source, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out[ast.unparse(target)] = ast.get_source_segment(source, node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = ast.get_source_segment(source, node)
    return out


def test_the_triton_only_file_is_the_whole_file_less_the_gluon_parts():
    full, first = _definitions(whole().decode()), _definitions(triton_only())
    assert not GLUON.search(triton_only()), "the first PR's kernel file names Gluon"
    dropped = set(full) - set(first)
    assert not set(first) - set(full), "the first PR's file defines something the whole file does not"
    # every definition held back is Gluon's (or chooses it: pick_config's only job over pick_triton_config)
    assert dropped and all(GLUON.search(full[name]) for name in dropped), sorted(dropped)
    assert {"_gluon_sparse_decode_kernel", "GLUON_CONFIGS", "GLUON_TRITON_RELEASES", "pick_config"} <= dropped
    # every definition kept is the whole file's, or loses only what names Gluon (its branch, its fields)
    changed = sorted(n for n in first if first[n] != full[n])
    for name in changed:
        gone = set(full[name].splitlines()) - set(first[name].splitlines())
        assert GLUON.search(full[name]) or name == "SHAPE_RULES", name
        assert gone, name
    # SHAPE_RULES only loses the two Gluon fields ShapeRule no longer has
    rules = ast.literal_eval(first["SHAPE_RULES"].split("=", 1)[1].replace("ShapeRule", "").strip())
    full_rules = ast.literal_eval(full["SHAPE_RULES"].split("=", 1)[1].replace("ShapeRule", "").strip())
    assert full_rules == {k: v + full_rules[k][2:] for k, v in rules.items()}
    assert "gluon_max_heads" not in first["ShapeRule"] and "gluon_max_heads" in full["ShapeRule"]


def test_the_triton_only_file_passes_the_releases_format_and_lint_hooks(tmp_path):
    ruff = REPO / ".venv-lint/bin/ruff"
    if not ruff.is_file():
        pytest.skip("no lint venv with ruff (make lint-venv)")
    path = tmp_path / "flash_mla_sm120_mma.py"
    path.write_text(triton_only())
    for args in (["format", "--isolated", "--check"], ["check", "--isolated", "--select", "F401,F821"]):
        proc = subprocess.run([str(ruff), *args, str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@contextmanager
def gluon_absent():
    """While loading a module: a Triton with no Gluon (importing triton.experimental.gluon fails). Only while
    loading: Triton's own launcher imports parts of that package at call time."""
    import triton.experimental as experimental

    with pytest.MonkeyPatch.context() as mp:
        mp.delattr(experimental, "gluon", raising=False)
        for name in [m for m in sys.modules if m.startswith("triton.experimental.gluon")]:
            mp.delitem(sys.modules, name)
        mp.setitem(sys.modules, "triton.experimental.gluon", None)
        yield


def _triton_only_tree(patched_root, tmp_path):
    T.write_slice(patched_root, tmp_path)
    (tmp_path / T.MMA).write_text(triton_only())
    return tmp_path


def test_without_gluon_the_whole_file_fails_to_import_and_the_triton_only_file_serves(patched_root, tmp_path):
    from harness.upstream import load_kernel

    tree = _triton_only_tree(patched_root, tmp_path)
    with gluon_absent():
        with pytest.raises(ImportError):
            load_kernel(patched_root / T.MMA, name="whole_mma_without_gluon", tree=patched_root)
        module = T.dispatcher(tree, "mma")
    kernel = module._test_mma
    assert kernel is not None and not hasattr(kernel, "GLUON_CONFIGS")
    for heads, rows in ((8, 64), (16, 16), (64, 1)):   # the first two: the whole file's Gluon shapes
        assert kernel.pick_triton_config(heads, rows) in kernel.MMA_CONFIGS


@pytest.mark.parametrize("B,H,topk,extra", [(16, 16, 64, 32), (17, 8, 16, 0)])
def test_the_triton_only_kernel_through_the_dispatcher_matches_float64(patched_root, tmp_path, B, H, topk, extra):
    """mma through flash_mla_with_kvcache_sm120, Triton's interpreter on the CPU (TRITON_INTERPRET=1, set by
    tests/conftest.py), at rows x heads the whole file gives the Gluon kernel on a GPU (>= 16 rows, <= 16 heads)."""
    with gluon_absent():     # loaded (imported) in a Triton without Gluon
        module = T.dispatcher(_triton_only_tree(patched_root, tmp_path), "mma")
    T.run_own_code(module)   # this file's kernel, not that of the first module registering the op
    case = make_case(B=B, H=H, topk=topk, extra_topk=extra, page_size=64, num_pages=4, seed=B)
    kw = case.kwargs()
    kw["extra_indices_in_kvcache"] = kw.pop("extra_indices")
    calls = []
    launch = module._test_mma.flash_mla_sparse_decode_mma
    module._test_mma.flash_mla_sparse_decode_mma = lambda *a, **k: calls.append(a[0].shape) or launch(*a, **k)
    try:
        with T.with_kernels(module):
            out, _ = module.flash_mla_with_kvcache_sm120(**kw)
    finally:
        module._test_mma.flash_mla_sparse_decode_mma = launch
    assert calls == [case.q.shape], f"expected one call of the Triton-only kernel, found {calls}"
    ref, _ = reference_f64(case)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16
    assert rel_err(out.float(), ref) < 2.0 ** -7


def test_two_copies_of_the_kernel_in_one_process_each_run_their_own_code(patched_root, tmp_path):
    """The whole file and the first PR's file loaded side by side (as the PR stack's tests do): with run_own_code
    each call launches its own module's kernel, not that of whichever module registered the torch op first."""
    trees = {"whole": T.dispatcher(patched_root, "mma"), "first": T.dispatcher(_triton_only_tree(patched_root, tmp_path), "mma")}
    spies = {}
    for name, module in trees.items():
        T.run_own_code(module)
        mma = module._test_mma
        spies[name] = mma._mma_sparse_decode_kernel = T.LaunchSpy(mma._mma_sparse_decode_kernel)
    case = make_case(B=2, H=8, topk=16, extra_topk=0, page_size=64, num_pages=2, seed=1)
    kw = case.kwargs()
    kw["extra_indices_in_kvcache"] = kw.pop("extra_indices")
    for name in ("first", "whole"):
        with T.with_kernels(trees[name]):
            trees[name].flash_mla_with_kvcache_sm120(**kw)
    assert {name: len(spy.grids) for name, spy in spies.items()} == {"whole": 1, "first": 1}


def test_the_first_prs_unittest_needs_no_gluon_and_the_follow_ups_tests_it():
    pr = p1()
    first, second = pr.test_file.read_text(), pr.followup.test_file.read_text()
    assert not GLUON.search(first)
    assert pr.followup.test_dest.startswith("test/registered/kernels/ops/attention/test_")
    assert pr.followup.test_dest != pr.test_dest
    calls = {ast.unparse(n.func) for n in ast.walk(ast.parse(second)) if isinstance(n, ast.Call)}
    assert "flash_mla_with_kvcache_sm120" in calls and "mma.pick_config" in calls
    assert "register_cuda_ci" in calls


def test_export_series_makes_the_triton_pr_then_the_gluon_pr_on_it(checkouts, overlay_repo):
    repo, pr = checkouts["sglang"], p1()
    (patch,) = [p for n, _, p in all_patches(overlay_repo, LINE) if p.name == pr.file]
    first, second = default_branch(patch), branch_of(pr.followup.title, patch.name[:4])
    head = git(repo, "rev-parse", "HEAD").strip()
    proc = cli(overlay_repo, "export-pr", "P1", "--repo", str(repo), "--series")
    try:
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert git(repo, "rev-parse", "HEAD").strip() == head and git(repo, "status", "--porcelain") == ""
        # in order: the first on main, the follow-up one commit on the first
        assert git(repo, "rev-parse", f"{first}^").strip() == git(repo, "rev-parse", "main").strip()
        assert git(repo, "rev-parse", f"{second}^").strip() == git(repo, "rev-parse", first).strip()
        dest = "python/" + KERNEL
        shipped = git(repo, "show", f"{first}:{dest}")
        assert shipped == triton_only() and not GLUON.search(shipped)
        assert git(repo, "show", f"{second}:{dest}") == whole().decode()
        assert set(git(repo, "diff", "--name-only", first, second).split()) == {dest, pr.followup.test_dest}
        assert not GLUON.search(git(repo, "show", f"{first}:{pr.test_dest}"))
        one, two = body_of(overlay_repo, first), body_of(overlay_repo, second)
        assert one.startswith(f"# [1/2] {pr.title}\n") and two.startswith(f"# [2/2] {pr.followup.title}\n")
        assert f"Builds on `{first}`" in two and f"Builds on" not in one
        # each body's table: the Triton configs' rows in the first, the Gluon config's in the follow-up
        rows = lambda body: [l for l in body.splitlines() if re.match(r"\| H\d+/B\d+/", l)]  # noqa: E731
        assert rows(one) and all("[g32" not in r for r in rows(one))
        assert rows(two) and all(r.count("[g32dqq]") == 2 for r in rows(two))
        for body, what in ((one, "first PR body"), (two, "follow-up PR body")):
            assert_upstream_clean(body, what)
            assert body.count("```") % 2 == 0
        added = git(repo, "diff", first, second, "--", dest)
        assert_upstream_clean("\n".join(l[1:] for l in added.splitlines() if l.startswith("+")), "follow-up",
                              CODE_INTERNAL)
        assert proc.stdout.index(f"push -u fork {first}") < proc.stdout.index(f"push -u fork {second}")
    finally:
        delete_branches(repo, second, first)


def test_export_alone_makes_the_triton_pr_and_names_its_follow_up(checkouts, overlay_repo):
    repo, pr = checkouts["sglang"], p1()
    (patch,) = [p for n, _, p in all_patches(overlay_repo, LINE) if p.name == pr.file]
    proc = cli(overlay_repo, "export-pr", "P1", "--repo", str(repo))
    try:
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert "--series" in proc.stdout and pr.followup.title in proc.stdout
        assert git(repo, "show", f"{default_branch(patch)}:python/{KERNEL}") == triton_only()
        assert git(repo, "rev-parse", "-q", "--verify", branch_of(pr.followup.title, ""), check=False).strip() == ""
    finally:
        delete_branches(repo, default_branch(patch))


def test_a_held_region_the_file_lacks_refuses_the_export_naming_it(checkouts, overlay_repo, tmp_path):
    """The regions are checked against the file: one whose line is gone refuses the export in one line, no
    branch made."""
    from tests.rebase_cases import repo_copy

    copy = repo_copy(tmp_path / "repo")
    data = copy / "patches" / LINE / "sglang" / "upstream-pr.toml"
    data.write_text(data.read_text().replace('from = "def pick_config("', 'from = "def pick_the_config("'))
    repo = checkouts["sglang"]
    branches = git(repo, "branch", "--list")
    proc = cli(copy, "export-pr", "P1", "--repo", str(repo), "--series")
    assert proc.returncode == 1, proc.stdout + proc.stderr    # export-pr's refusals, as tests/pr/test_export_pr.py's
    (line,) = [l for l in proc.stderr.splitlines() if l.strip()]
    assert "'def pick_the_config('" in line and KERNEL in line
    assert git(repo, "branch", "--list") == branches
