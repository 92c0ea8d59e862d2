"""The unittest P1's PR adds to SGLang (0.5.23 line): where upstream keeps its attention-kernel tests
(test/registered/kernels/ops/attention/), registered as the release registers them (read by the release's own
collector), and exercising what the PR changes: flash_mla_with_kvcache_sm120 with SGLANG_SM120_FLASHMLA_BACKEND=mma
set before the module reads it, and MqaAttentionBase._kernel_num_heads under that switch. (The file is read
here, not run: under harness.upstream_test, 0.5.23's flash_mla_sm120 stops at `from sglang.srt.utils import
is_hip`, which the harness's reduced sglang.srt.utils.common does not hold.)"""
from __future__ import annotations

import ast
import importlib.util

import pytest

from patchkit.pr.prdata import load_pr_data
from tests.conftest import REPO, pristine_wheel

LINE = "0.5.23"


# The per-commit CUDA suites of upstream's test/run_suite.py (PER_COMMIT_SUITES[HWBackend.CUDA]) that hold kernel
# tests and benchmarks, as a stored copy of it lists them; run_suite.py refuses a file registered to a suite it
# does not list (validate_all_suites). A kernel benchmark goes in the benchmark suite.
UPSTREAM_KERNEL_SUITES = {"base-b-kernel-unit-test-1-gpu-large", "base-b-kernel-unit-test-4-gpu-b200",
                          "base-b-kernel-unit-test-8-gpu-h200", "base-b-kernel-benchmark-test-1-gpu-large"}


def p1(label: str = "P1"):
    data = load_pr_data(REPO / "patches" / LINE / "sglang")
    (pr,) = [p for p in data.patches.values() if p.label == label]
    return pr


def _collector(tmp_path):
    collector = tmp_path / "ci_register.py"
    collector.write_bytes(pristine_wheel("sglang", LINE).read("sglang/test/ci/ci_register.py"))
    spec = importlib.util.spec_from_file_location("ci_register_0523", collector)
    register = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(register)
    return register


@pytest.mark.parametrize("label", ["P1", "P1-gluon"])
def test_it_sits_in_upstreams_attention_kernel_tests_and_registers(tmp_path, label):
    pr = p1(label)
    assert pr.test_dest.startswith("test/registered/kernels/ops/attention/test_")
    register = _collector(tmp_path)
    (entry,) = register.collect_tests([str(pr.test_file)], sanity_check=True)
    assert entry.backend == register.HWBackend.CUDA and entry.disabled is None


def test_it_goes_through_the_entry_point_with_the_switch_and_kernel_num_heads():
    tree = ast.parse(p1().test_file.read_text())
    body = list(tree.body)
    switch = next(i for i, n in enumerate(body) if isinstance(n, ast.Assign)
                  and "SGLANG_SM120_FLASHMLA_BACKEND" in ast.unparse(n)
                  and isinstance(n.value, ast.Constant) and n.value.value == "mma")
    first_import = next(i for i, n in enumerate(body) if isinstance(n, ast.ImportFrom)
                        and (n.module or "").startswith("sglang.kernels.ops.attention"))
    assert switch < first_import, "the switch must be set before flash_mla_sm120 reads it at import"
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "flash_mla_with_kvcache_sm120" in calls
    assert any(c.endswith("._kernel_num_heads") for c in calls)
    assert any("SGLANG_SM120_FLASHMLA_BACKEND.override" in c for c in calls)
    # nothing calls the kernel module directly: the PR's entry point is what is tested
    assert not any("mma_sparse_decode" in c for c in calls)


def test_its_kernel_benchmark_covers_every_row_of_the_body_and_registers(tmp_path):
    """The benchmark the PR adds is where 0.5.23 keeps kernel benchmarks, in its marker format, and times every
    shape of every table the body states (mma against flashinfer through the entry point)."""
    pr = p1()
    ((src, dest, _),) = pr.files
    assert dest.startswith("test/registered/kernels/benchmark/attention/bench_")
    tree = ast.parse(src.read_text())
    (shapes,) = [ast.literal_eval(n.value) for n in tree.body
                 if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "SHAPES"]
    stated = {row[0] for m in pr.benchmark + p1("P1-gluon").benchmark for row in m.rows}   # its follow-up's too
    assert stated and stated <= {f"H{h}/B{b}/{kv}" for h, b, kv in shapes}
    decorators = [ast.unparse(d) for n in tree.body if isinstance(n, ast.FunctionDef) for d in n.decorator_list]
    assert "marker.benchmark('backend', ['mma', 'flashinfer'])" in decorators
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "marker.do_bench" in calls and "benchmark.run" in calls
    assert "flash_mla_sm120.flash_mla_with_kvcache_sm120" in {ast.unparse(a) for n in ast.walk(tree)
                                                              if isinstance(n, ast.Call) for a in n.args}
    wheel = pristine_wheel("sglang", LINE)
    assert wheel.has("sglang/kernels/jit/benchmark/marker.py")   # the format is the release's own
    collector = tmp_path / "ci_register.py"
    collector.write_bytes(wheel.read("sglang/test/ci/ci_register.py"))
    spec = importlib.util.spec_from_file_location("ci_register_0523_bench", collector)
    register = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(register)
    (entry,) = register.collect_tests([str(src)], sanity_check=True)
    assert entry.backend == register.HWBackend.CUDA and entry.disabled is None


def test_its_kernel_benchmark_runs_in_the_suite_upstream_lists_for_kernel_benchmarks(tmp_path):
    """Registered as the release's collector reads it, the benchmark lands in the kernel-benchmark suite that
    upstream's run_suite.py lists (red before: base-b-kernel-benchmark-test-1-gpu-small, a suite it does not)."""
    ((src, _, _),) = p1().files
    (entry,) = _collector(tmp_path).collect_tests([str(src)], sanity_check=True)
    assert entry.effective_suite == "base-b-kernel-benchmark-test-1-gpu-large" in UPSTREAM_KERNEL_SUITES


def test_its_kernel_benchmark_reads_cold_kv_and_the_body_prints_its_command():
    """Each captured call reads its own copy of the KV pools (do_bench's graph_clone_kwargs names them; red before:
    None, every replay reading the same KV out of L2), each pool holds the tokens one call reads, and the PR body
    prints the command that runs the benchmark (red before: no command)."""
    pr = p1()
    ((src, dest, _),) = pr.files
    tree = ast.parse(src.read_text())
    (bench,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "marker.do_bench"]
    clone = {k.arg: k.value for k in bench.keywords}["graph_clone_kwargs"]
    assert ast.unparse(clone) == "pools"
    pools = {ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
             and ast.unparse(n.targets[0]) == "pools"}
    assert pools == {"['k_cache']", "['k_cache', 'extra_k_cache']"}
    assert pr.runs == [f"python3 {dest}"]
    from patchkit.pr.body import Stack, pr_body

    body = pr_body(pr, "", [], "main", Stack(0, 0, "", ""))
    assert f"```\npython3 {dest}\n```" in body


def test_the_test_section_asks_an_sm120_owner_for_the_run_it_lacks():
    """No sm_120 card has run the kernel: the PR's test section says so and asks whoever has one (sm_120 / sm_121)
    to run the unittest it prints and post the output, without pointing outside the PR (no link into this
    repository: upstream's reviewers run upstream's own test)."""
    from patchkit.pr.body import Stack, pr_body

    pr = p1()
    command = f"python3 {pr.test_dest}"
    body = pr_body(pr, "", [], "main", Stack(0, 0, "", ""), command)
    section = body[body.index("Unit test added with this PR"):]
    ask = section[section.index(f"```\n{command}\n```") + len(command) + 8:].split("\n\n")[1]
    assert "sm_120" in ask and "sm_121" in ask and "not run" in ask and "post" in ask, ask
    assert "http" not in ask and "docs/" not in ask, ask
