"""The bundle's slimmed transformers (serving/bundle_slim.py) keeps every module the DeepSeek-V4 server path imports.

The path is imported as the server imports it, against the pinned sglang 0.5.14 and transformers 5.8.1 of
.venv-serve (make test-serve): its config and tokenizer loaders, and the model registry, which imports every sglang
model module at start (the only place on the path that reaches transformers' model code). With the bundle's whole
closure also installed, the HTTP server, scheduler, tokenizer and detokenizer managers import no further transformers
module (traced once, docs/gpu_box.md "The bundle's size").
"""
from __future__ import annotations

import sys
from pathlib import Path

from serving import bundle_slim
from tests.serve_env import import_pinned

SERVER_PATH = ("sglang.srt.server_args", "sglang.srt.configs.model_config", "sglang.srt.utils.hf_transformers_utils",
               "sglang.srt.models.registry", "sglang.srt.models.deepseek_v4")


def test_every_transformers_module_the_server_path_imports_is_kept_in_the_bundle():
    for module in SERVER_PATH:
        import_pinned(module)
    root = Path(sys.modules["transformers"].__file__).parent
    loaded = {name: Path(mod.__file__) for name, mod in list(sys.modules.items())
              if name.startswith("transformers.models.") and getattr(mod, "__file__", None)}
    modeling = sorted(n for n in loaded if ".modeling_" in n)
    assert modeling, "expected the model registry to import some of transformers' model code, found none"
    dropped = {name: why for name, path in loaded.items()
               if (why := bundle_slim.transformers_drop_reason("transformers/" + path.relative_to(root).as_posix()))}
    assert not dropped, f"imported on the server path but left out of the bundle: {sorted(dropped)}"
