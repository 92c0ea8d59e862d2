"""P3 (MHC-pre mixing in bf16) on the 0.5.23 line: retired in patch set 0.1.10 (docs/retired_0.5.23.md), so the
patched tree runs the release's own fp32 MHC-pre code and registers no P3 switch; the 0.5.14 line keeps P3
(tests/line_0_5_14/test_mhc_bf16.py runs there)."""
import ast

from tests.conftest import pristine_wheel

MODEL = "sglang/srt/models/deepseek_v4.py"


def _impl(source: bytes) -> str:
    found = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "hc_pre_torch_impl"]
    assert len(found) == 1, f"expected one hc_pre_torch_impl, found {len(found)}"
    return ast.dump(found[0], include_attributes=False)


def test_the_patched_tree_runs_the_releases_own_mhc_pre(pristine_root, patched_root):
    assert _impl((patched_root / MODEL).read_bytes()) == _impl((pristine_root / MODEL).read_bytes())
    assert "SGLANG_SM120_MHC_PRE_TRITON" not in (patched_root / "sglang/srt/environ.py").read_text()
    assert not list((patched_root / "sglang").rglob("mhc_pre_triton.py"))


def test_the_code_p3_would_replace_is_the_one_its_evidence_measured(pristine_root):
    """P3's share on this line (BENCHMARKS.md, "P3's share of a decode forward on the 0.5.23 line") takes its
    per-call saving from the 0.5.14-line bench: that holds only while 0.5.23's hc_pre_torch_impl is the fp32 code
    the bench timed as "fp32"."""
    assert _impl((pristine_root / MODEL).read_bytes()) == _impl(pristine_wheel("sglang", "0.5.14").read(MODEL))
