"""pydefs on the real sglang modules: no finding on a release's own files (0.5.23's deepseek_v4.py against
itself and against the pin's), and the two clashes P7's hunks make when merged onto 0.5.23 by hand here."""
from __future__ import annotations

from tests.conftest import pristine_wheel
from tests.rebase_release_cases import MODEL, release
from patchkit.rebase.pydefs import collisions, shadowed_definitions, undefined_names


def test_0_5_23_model_module_has_no_findings_of_its_own():
    text = release("0.5.23").read(MODEL).decode()
    assert collisions(MODEL, text, text) == []
    pin = pristine_wheel("sglang").read(MODEL).decode()
    assert undefined_names(MODEL, pin, text) == []


def test_0_5_23_a_subclass_method_shadowing_the_base_class_and_an_undefined_name_are_found():
    text = release("0.5.23").read(MODEL).decode()
    anchor = "class MQALayer(MqaAttentionBase):\n"
    assert anchor in text
    added = ("    def _kernel_num_heads(self, forward_batch, padded_num_heads):\n"
             "        return _SM120_DECODE_REAL_HEADS\n\n")
    merged = text.replace(anchor, anchor + added, 1)
    shadow = shadowed_definitions(MODEL, text, merged)
    assert len(shadow) == 1 and "MqaAttentionBase._kernel_num_heads(self, num_tokens: int)" in shadow[0], shadow
    undefined = undefined_names(MODEL, text, merged)
    assert len(undefined) == 1 and "_SM120_DECODE_REAL_HEADS" in undefined[0], undefined
