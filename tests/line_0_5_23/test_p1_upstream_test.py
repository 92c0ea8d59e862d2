"""The unittest P1's PR adds to SGLang (0.5.23 line): where upstream keeps its attention-kernel tests
(test/registered/kernels/ops/attention/), registered as the release registers them (read by the release's own
collector), and exercising what the PR changes: flash_mla_with_kvcache_sm120 with SGLANG_SM120_FLASHMLA_BACKEND=mma
set before the module reads it, and MqaAttentionBase._kernel_num_heads under that switch. (0.5.23's
sglang.kernels imports server dependencies this CPU venv lacks, so the file is read here, not run.)"""
from __future__ import annotations

import ast
import importlib.util

from patchkit.pr.prdata import load_pr_data
from tests.conftest import REPO, pristine_wheel

LINE = "0.5.23"


def p1():
    data = load_pr_data(REPO / "patches" / LINE / "sglang")
    (pr,) = [p for p in data.patches.values() if p.label == "P1"]
    return pr


def test_it_sits_in_upstreams_attention_kernel_tests_and_registers(tmp_path):
    pr = p1()
    assert pr.test_dest.startswith("test/registered/kernels/ops/attention/test_")
    collector = tmp_path / "ci_register.py"
    collector.write_bytes(pristine_wheel("sglang", LINE).read("sglang/test/ci/ci_register.py"))
    spec = importlib.util.spec_from_file_location("ci_register_0523", collector)
    register = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(register)
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
    stated = {row[0] for m in pr.benchmark + pr.followup.benchmark for row in m.rows}   # its follow-up's too
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
