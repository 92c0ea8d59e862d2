"""harness.scoped: what every loader of an upstream piece uses to put sys.modules / os.environ back."""
import os
import sys
import types

import pytest

from harness.scoped import scoped


def test_keys_are_set_inside_and_put_back_after_even_an_error():
    mapping = {"kept": 1, "replaced": 2, "removed": 3}
    with pytest.raises(RuntimeError):
        with scoped(mapping, {"replaced": 20, "removed": None, "added": 40}):
            assert mapping == {"kept": 1, "replaced": 20, "added": 40}
            mapping["other"] = 5        # a key the block adds on its own stays
            raise RuntimeError("the block fails")
    assert mapping == {"kept": 1, "replaced": 2, "removed": 3, "other": 5}


def test_sys_modules_and_environ():
    name = "_harness_scoped_probe"
    stand_in = types.ModuleType(name)
    os.environ.pop(name, None)
    with scoped(sys.modules, {name: stand_in}), scoped(os.environ, {name: "1"}):
        import _harness_scoped_probe

        assert _harness_scoped_probe is stand_in and os.environ[name] == "1"
    assert name not in sys.modules and name not in os.environ
