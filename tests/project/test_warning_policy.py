"""pytest.ini's warning policy: a warning from this project's own code fails the run, and upstream warnings are
ignored only one by one, each by message, category and module (so `make test` prints none and stays so)."""
from __future__ import annotations

import re
import warnings

import pytest

OURS = ("patchkit.engine", "serving.doctor", "harness.upstream", "bench.server.bench_e2e", "tests.conftest", "apply")
OUR_PACKAGES = re.compile(r"(patchkit|serving|harness|bench|tests|apply)(\.|$)")


def shown(module: str, message: str = "probe", category=UserWarning) -> list[str]:
    """The messages the configured filters let through for a warning attributed to `module`."""
    with warnings.catch_warnings(record=True) as seen:   # keeps the filters in force, records what they show
        warnings.warn_explicit(message, category, f"{module}.py", 1, module=module)
    return [str(w.message) for w in seen]


@pytest.mark.parametrize("module", OURS)
def test_a_warning_from_our_code_is_an_error(module):
    with pytest.raises(UserWarning, match="probe"):
        shown(module)


def test_an_upstream_warning_is_shown_unless_filtered_by_name():
    assert shown("sglang.srt.server_args") == ["probe"]
    assert shown("patchkitten") == ["probe"]   # a prefix of another name is not ours
    assert shown("triton.runtime.interpreter", "divide by zero encountered in log2", RuntimeWarning) == []
    assert shown("triton.runtime.interpreter", "overflow encountered in exp", RuntimeWarning) != []


def test_every_ignore_names_message_category_and_an_upstream_module(pytestconfig):
    ignores = [f for f in pytestconfig.getini("filterwarnings") if f.split(":")[0] == "ignore"]
    assert ignores, "pytest.ini: expected the upstream warnings ignored by name, found no ignore entry"
    for line in ignores:
        _, message, category, module, *_ = line.split(":") + ["", "", ""]
        assert message and category and module, f"pytest.ini: expected ignore:MESSAGE:CATEGORY:MODULE, found {line!r}"
        assert not OUR_PACKAGES.match(module.replace("\\", "")), \
            f"pytest.ini: expected only upstream modules ignored, found {module!r} (fix our warning instead)"
