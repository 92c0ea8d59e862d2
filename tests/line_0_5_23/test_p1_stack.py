"""P1 (0.5.23) goes upstream as two PRs, one kernel per file: sglang 0001 adds the `mma` switch with the Triton
kernel (flash_mla_sm120_mma.py), sglang 0003 (Depends-On 0001) the Gluon kernel in a module of its own
(flash_mla_sm120_mma_gluon.py) and the dispatcher's choice of it.

- Each file is one kernel: the Triton file names no Gluon and imports in a Triton without it; the Gluon module
  holds every Gluon definition; each registers its own torch op.
- The first PR's tree (the pinned release with what export-pr ships for 0001, lint/shipped.py) runs the Triton
  kernel through the release's dispatcher with SGLANG_SM120_FLASHMLA_BACKEND=mma under Triton's interpreter and
  matches float64, at shapes where the follow-up picks the Gluon kernel on a GPU; the follow-up's dispatcher calls
  the Gluon entry exactly where gluon_serves says so, the Triton entry elsewhere.
- `export-pr P1-gluon --series` on a checkout of the release makes two branches in order: the first ships the
  overlay's Triton file byte for byte and no Gluon, the second one commit on it adding the Gluon module, the
  dispatcher's wiring and its unittest; every .py file of both commits is what the lint gate lints
  (lint/shipped.py), and both bodies pass the vocabulary export-pr checks.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from contextlib import contextmanager

import pytest
import torch

from serving.mma_decode_cases import make_case, reference_f64, rel_err
from lint.shipped import shipped
from patchkit.pr.export import default_branch
from tests.conftest import REPO
from tests.line_0_5_23 import p1_tree as T
from tests.line_0_5_23.test_p1_upstream_test import p1
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

LINE = "0.5.23"
GLUON = re.compile(r"(?i)gluon|\bgl\.|async_copy|mma_v2|_cta_barrier|_async_load")
FIRST = "0001-dsv4-an-mma-choice-for-the-sm_120-sparse-decode-back.patch"
SECOND = "0003-dsv4-a-Gluon-kernel-for-the-sm_120-mma-decode-backen.patch"


def overlay(rel: str) -> str:
    return (REPO / "overlay" / LINE / rel).read_text()


def gluon_pr():
    data = pr_data(REPO, "sglang", LINE)
    return data.patches[SECOND]


def _op_names(source: str) -> list[str]:
    """The op_name of every register_custom_op decorator of a module."""
    return [kw.value.value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and ast.unparse(node.func) == "register_custom_op" for kw in node.keywords if kw.arg == "op_name"]


def _definitions(source: str) -> set[str]:
    tree = ast.parse(source)
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {ast.unparse(t) for t in node.targets}
    return out


def test_each_file_holds_one_kernel_and_registers_its_own_op():
    triton_src, gluon_src = overlay(T.MMA), overlay(T.GLUON)
    assert not GLUON.search(triton_src), "the Triton kernel's file names Gluon"
    assert {"_mma_sparse_decode_kernel", "_combine_splits_kernel", "MMA_CONFIGS", "pick_triton_config",
            "launch_sparse_decode"} <= _definitions(triton_src)
    assert {"_gluon_sparse_decode_kernel", "GLUON_CONFIGS", "GLUON_TRITON_RELEASES", "gluon_builds", "pick_config",
            "gluon_serves", "flash_mla_sparse_decode_mma_gluon"} <= _definitions(gluon_src)
    assert not {"_mma_sparse_decode_kernel", "MMA_CONFIGS"} & _definitions(gluon_src)
    assert _op_names(triton_src) == ["sm120_mma_sparse_decode"]
    assert _op_names(gluon_src) == ["sm120_mma_gluon_sparse_decode"]


@pytest.mark.parametrize("rel", [T.MMA, T.GLUON])
def test_each_file_passes_the_releases_format_and_lint_hooks(rel, tmp_path):
    tools = REPO / ".venv-lint/bin"
    if not (tools / "ruff").is_file() or not (tools / "isort").is_file():
        pytest.skip("no lint venv with ruff and isort (make lint-venv)")
    path = tmp_path / rel.rsplit("/", 1)[1]
    path.write_text(overlay(rel))
    for exe, args in (("isort", ["--profile", "black", "--project", "sglang", "--check-only"]),
                      ("ruff", ["format", "--isolated", "--check"]),
                      ("ruff", ["check", "--isolated", "--select", "F401,F821"])):
        proc = subprocess.run([str(tools / exe), *args, str(path)], capture_output=True, text=True)
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


@pytest.fixture(scope="module")
def pr_trees(pristine_root, tmp_path_factory):
    """{"first": the release with what export-pr ships for 0001, "second": that plus what it ships for 0003}: the
    files the dispatcher reads (p1_tree.SLICE), as the two PR branches hold them (lint/shipped.py)."""
    files = {}
    for f in shipped(REPO):
        if f.line == LINE and f.upstream == "sglang" and f.after is not None:
            files.setdefault(f.patch, {})[f.path] = f.after
    out = {}
    for name, patches in (("first", [FIRST]), ("second", [FIRST, SECOND])):
        root = tmp_path_factory.mktemp(f"p1-{name}-pr")
        T.write_slice(pristine_root, root)
        for patch in patches:
            for rel, data in files[patch].items():
                if rel in T.SLICE:
                    (root / rel).parent.mkdir(parents=True, exist_ok=True)
                    (root / rel).write_bytes(data)
        out[name] = root
    assert not (out["first"] / T.GLUON).exists() and (out["second"] / T.GLUON).is_file()
    assert (out["first"] / T.MMA).read_text() == overlay(T.MMA) == (out["second"] / T.MMA).read_text()
    return out


def test_without_gluon_the_first_prs_tree_serves_and_the_gluon_module_does_not_import(pr_trees):
    from harness.upstream import load_kernel

    with gluon_absent():
        module = T.dispatcher(pr_trees["first"], "mma")
        with pytest.raises(ImportError):
            load_kernel(pr_trees["second"] / T.GLUON, name="gluon_without_gluon", tree=pr_trees["second"])
    assert module._test_mma is not None and module._test_gluon is None
    assert "flash_mla_sm120_mma_gluon" not in (pr_trees["first"] / T.DISPATCHER).read_text()
    for heads, rows in ((8, 64), (16, 16), (64, 1)):   # the first two: the follow-up's Gluon shapes
        assert module._test_mma.pick_triton_config(heads, rows) in module._test_mma.MMA_CONFIGS


def _kwargs(case):
    kw = case.kwargs()
    kw["extra_indices_in_kvcache"] = kw.pop("extra_indices")
    return kw


@pytest.mark.parametrize("B,H,topk,extra", [(16, 16, 64, 32), (17, 8, 16, 0)])
def test_the_first_prs_triton_kernel_through_the_dispatcher_matches_float64(pr_trees, B, H, topk, extra):
    """mma through the first PR's flash_mla_with_kvcache_sm120, Triton's interpreter on the CPU (TRITON_INTERPRET=1,
    tests/conftest.py), at rows x heads the follow-up gives the Gluon kernel on a GPU (>= 16 rows, <= 16 heads)."""
    with gluon_absent():     # loaded (imported) in a Triton without Gluon
        module = T.dispatcher(pr_trees["first"], "mma")
    case = make_case(B=B, H=H, topk=topk, extra_topk=extra, page_size=64, num_pages=4, seed=B)
    calls = []
    launch = module._test_mma.flash_mla_sparse_decode_mma
    module._test_mma.flash_mla_sparse_decode_mma = lambda *a, **k: calls.append(a[0].shape) or launch(*a, **k)
    try:
        with T.with_kernels(module):
            out, _ = module.flash_mla_with_kvcache_sm120(**_kwargs(case))
    finally:
        module._test_mma.flash_mla_sparse_decode_mma = launch
    assert calls == [case.q.shape], f"expected one call of the Triton kernel's entry, found {calls}"
    ref, _ = reference_f64(case)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16
    assert rel_err(out.float(), ref) < 2.0 ** -7


@pytest.mark.parametrize("serves", [True, False])
def test_the_follow_ups_dispatcher_calls_the_gluon_entry_exactly_where_gluon_serves(pr_trees, monkeypatch, serves):
    """The wiring of 0003: the mma branch asks gluon_serves(q, k_cache, extra_k_cache) and calls one entry with the
    call's arguments (each entry a recording stub here: the Gluon kernel needs a GPU, tests/line_0_5_23/gpu/)."""
    module = T.dispatcher(pr_trees["second"], "mma")
    gluon, mma = module._test_gluon, module._test_mma
    case = make_case(B=16, H=8, topk=16, extra_topk=16, page_size=64, num_pages=2, seed=3)
    asked, ran = [], []
    monkeypatch.setattr(gluon, "gluon_serves", lambda q, k, extra: asked.append((q, k, extra)) or serves)
    for owner, name in ((gluon, "flash_mla_sparse_decode_mma_gluon"), (mma, "flash_mla_sparse_decode_mma")):
        monkeypatch.setattr(owner, name, lambda *a, name=name: ran.append((name, a)) or ("out", "lse"))
    kw = _kwargs(case)
    with T.with_kernels(module):
        assert module.flash_mla_with_kvcache_sm120(**kw) == ("out", "lse")
    assert len(asked) == 1 and asked[0][0] is kw["q"] and asked[0][1] is kw["k_cache"]
    assert asked[0][2] is kw["extra_k_cache"]
    assert [name for name, _ in ran] == ["flash_mla_sparse_decode_mma_gluon" if serves else "flash_mla_sparse_decode_mma"]
    assert ran[0][1][0] is kw["q"] and ran[0][1][2] is kw["indices"]


def test_gluon_serves_no_call_on_the_cpu_nor_with_pages_of_other_sizes(pr_trees):
    """On the CPU (the interpreter) every call keeps the Triton kernel; pick_config says which shapes Gluon
    would take on a GPU, and a page size that is not a power of two rules it out (checked with the shape
    rule alone: no CUDA tensor on this machine)."""
    module = T.dispatcher(pr_trees["second"], "mma")
    gluon = module._test_gluon
    case = make_case(B=16, H=8, topk=16, extra_topk=16, page_size=64, num_pages=2, seed=3)
    assert gluon.pick_config(8, 16) == gluon.GLUON_CONFIG and gluon.gluon_builds("3.8.0")
    kw = _kwargs(case)
    assert not gluon.gluon_serves(kw["q"], kw["k_cache"], kw["extra_k_cache"])
    assert gluon._page_shift(64) == 6 and gluon._page_shift(48) is None


def test_the_gluon_prs_unittest_tests_the_gluon_module_and_the_first_needs_no_gluon():
    first, second = p1(), gluon_pr()
    assert not GLUON.search(first.test_file.read_text())
    assert second.test_dest.startswith("test/registered/kernels/ops/attention/test_")
    assert second.test_dest != first.test_dest
    calls = {ast.unparse(n.func) for n in ast.walk(ast.parse(second.test_file.read_text())) if isinstance(n, ast.Call)}
    assert {"flash_mla_with_kvcache_sm120", "gluon.pick_config", "register_cuda_ci"} <= calls


def _py_files(repo, branch, parent) -> dict[str, str]:
    names = git(repo, "diff", "--name-only", parent, branch).split()
    return {n: git(repo, "show", f"{branch}:{n}") for n in names if n.endswith(".py")}


def test_export_series_makes_the_triton_pr_then_the_gluon_pr_on_it(checkouts, overlay_repo):
    repo, first_pr, second_pr = checkouts["sglang"], p1(), gluon_pr()
    patches = {p.name: p for n, _, p in all_patches(overlay_repo, LINE) if n == "sglang"}
    first, second = default_branch(patches[FIRST]), default_branch(patches[SECOND])
    head = git(repo, "rev-parse", "HEAD").strip()
    proc = cli(overlay_repo, "export-pr", "P1-gluon", "--repo", str(repo), "--series")
    try:
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert git(repo, "rev-parse", "HEAD").strip() == head and git(repo, "status", "--porcelain") == ""
        # in order: the first on main, the follow-up one commit on the first
        assert git(repo, "rev-parse", f"{first}^").strip() == git(repo, "rev-parse", "main").strip()
        assert git(repo, "rev-parse", f"{second}^").strip() == git(repo, "rev-parse", first).strip()
        kernel, gluon = "python/" + T.MMA, "python/" + T.GLUON
        assert git(repo, "show", f"{first}:{kernel}") == overlay(T.MMA)
        assert git(repo, "show", f"{second}:{gluon}") == overlay(T.GLUON)
        assert git(repo, "rev-parse", "-q", "--verify", f"{first}:{gluon}", check=False).strip() == ""
        assert set(git(repo, "diff", "--name-only", first, second).split()) == {
            gluon, "python/" + T.DISPATCHER, second_pr.test_dest}
        assert not GLUON.search(git(repo, "show", f"{first}:{first_pr.test_dest}"))
        # every .py file of both commits is one the lint gate lints, as the commit holds it
        gated = {}
        for f in shipped(REPO):
            if f.line == LINE and f.upstream == "sglang" and f.patch in (FIRST, SECOND) and f.after is not None:
                path = f.path if f.path.startswith("test/") else "python/" + f.path
                gated.setdefault(f.patch, {})[path] = f.after.decode()
        assert _py_files(repo, first, "main") == {p: t for p, t in gated[FIRST].items() if p.endswith(".py")}
        assert _py_files(repo, second, first) == {p: t for p, t in gated[SECOND].items() if p.endswith(".py")}
        one, two = body_of(overlay_repo, first), body_of(overlay_repo, second)
        assert one.startswith(f"# [1/2] {first_pr.title}\n") and two.startswith(f"# [2/2] {second_pr.title}\n")
        assert f"Builds on `{first}`" in two and "Builds on" not in one
        assert f"One commit on `{first}` (itself on `main`):" in two and "One commit on `main`:" in one
        # each body's table: the Triton configs' rows in the first, the Gluon config's in the follow-up
        rows = lambda body: [l for l in body.splitlines() if re.match(r"\| H\d+/B\d+/", l)]  # noqa: E731
        assert rows(one) and all("[g32" not in r for r in rows(one))
        assert rows(two) and all(r.count("[g32dqq]") == 2 for r in rows(two))
        for body, what in ((one, "first PR body"), (two, "follow-up PR body")):
            assert_upstream_clean(body, what)
            assert body.count("```") % 2 == 0
        added = git(repo, "diff", first, second)
        assert_upstream_clean("\n".join(l[1:] for l in added.splitlines() if l.startswith("+")), "follow-up",
                              CODE_INTERNAL)
        assert proc.stdout.index(f"push -u fork {first}") < proc.stdout.index(f"push -u fork {second}")
    finally:
        delete_branches(repo, second, first)


def test_export_alone_makes_the_triton_pr_with_the_overlay_file_as_it_is(checkouts, overlay_repo):
    repo = checkouts["sglang"]
    patches = {p.name: p for n, _, p in all_patches(overlay_repo, LINE) if n == "sglang"}
    branch = default_branch(patches[FIRST])
    proc = cli(overlay_repo, "export-pr", "P1", "--repo", str(repo))
    try:
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert git(repo, "show", f"{branch}:python/{T.MMA}") == overlay(T.MMA)
        assert git(repo, "rev-parse", "-q", "--verify", f"{branch}:python/{T.GLUON}", check=False).strip() == ""
        assert git(repo, "rev-parse", "-q", "--verify", default_branch(patches[SECOND]), check=False).strip() == ""
    finally:
        delete_branches(repo, branch)


def test_the_gluon_pr_alone_needs_the_first_prs_branch(checkouts, overlay_repo):
    """Without --series and without the first PR's branch, the follow-up is refused in one line naming it; no
    branch made."""
    repo = checkouts["sglang"]
    branches = git(repo, "branch", "--list")
    proc = cli(overlay_repo, "export-pr", "P1-gluon", "--repo", str(repo))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [l for l in proc.stderr.splitlines() if l.strip()]
    assert FIRST in line and "--series" in line
    assert git(repo, "branch", "--list") == branches
