"""The mhc_bf16 tests, run for the 0.5.23 line (pristine_root / patched_root are 0.5.23 + FlashInfer 0.7.2 here)."""
from tests.kernels.test_mhc_bf16 import *  # noqa: F401,F403


def test_the_code_p3_replaces_is_the_one_its_evidence_measured(pristine_root):
    """P3 is kept on 0.5.23 on the strength of the 0.5.14-line MHC-pre bench (BENCHMARKS.md#mhc-pre): that holds
    only while 0.5.23's hc_pre_torch_impl, the code P3 replaces, is the fp32 code the bench timed as "fp32"."""
    import ast

    from tests.conftest import pristine_wheel

    def impl(source: bytes) -> str:
        found = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "hc_pre_torch_impl"]
        assert len(found) == 1, f"expected one hc_pre_torch_impl, found {len(found)}"
        return ast.dump(found[0], include_attributes=False)

    model = "sglang/srt/models/deepseek_v4.py"
    assert impl((pristine_root / model).read_bytes()) == impl(pristine_wheel("sglang", "0.5.14").read(model))
