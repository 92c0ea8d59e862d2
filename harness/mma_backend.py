"""A line's sm_120 mma decode backend as one module, whichever files it spans.

0.5.14 keeps the Triton and Gluon kernels in one file (flash_mla_sm120_mma.py). 0.5.23 keeps one kernel per
file, as its two pull requests ship them: flash_mla_sm120_mma.py (the Triton kernel, its op) and
flash_mla_sm120_mma_gluon.py beside it (the Gluon kernel, its own op; the dispatcher's mma branch asks its
gluon_serves). Benches and tests that drive the backend by config name (MMA_CONFIGS / GLUON_CONFIGS) or ask
what it picks for a shape (pick_config) read the same names either way: load_mma_backend joins the two modules
into one namespace whose mma_sparse_decode takes either kind of config and, given none, routes as the
dispatcher does. The kernels are the files' own, loaded as harness.upstream.load_kernel loads them.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

from harness.scoped import scoped
from harness.upstream import load_kernel

GLUON_FILE = "flash_mla_sm120_mma_gluon.py"
# The name the Gluon module imports the Triton module by (0.5.23's package layout).
TRITON_MODULE = "sglang.kernels.ops.attention.flash_mla_sm120_mma"


def load_mma_backend(kernel: Path, name: str = "flash_mla_sm120_mma", tree: Path | None = None,
                     line: str | None = None) -> types.ModuleType:
    """The backend whose Triton kernel file is `kernel`: that module alone where no Gluon module lies beside it
    (0.5.14), else the two joined (0.5.23). tree, line: as load_kernel's (where register_custom_op comes from)."""
    kernel = Path(kernel)
    triton_mod = load_kernel(kernel, name, tree=tree, line=line)
    gluon_path = kernel.with_name(GLUON_FILE)
    if not gluon_path.is_file():
        return triton_mod
    with scoped(sys.modules, {TRITON_MODULE: triton_mod}):
        gluon_mod = load_kernel(gluon_path, name + "_gluon", tree=tree, line=line)
    return joined(triton_mod, gluon_mod)


def joined(triton_mod: types.ModuleType, gluon_mod: types.ModuleType) -> types.ModuleType:
    """One namespace: the Triton module's names, the Gluon module's over them, and the entry points that take
    a config of either table (`triton` and `gluon`: the two modules themselves)."""
    out = types.ModuleType(triton_mod.__name__ + "_backend")
    for mod in (triton_mod, gluon_mod):
        out.__dict__.update({k: v for k, v in vars(mod).items() if not k.startswith("__")})
    out.triton, out.gluon = triton_mod, gluon_mod
    out.__file__ = triton_mod.__file__      # the backend is named by its Triton kernel's file

    def is_gluon(config) -> bool:
        return config in gluon_mod.GLUON_CONFIGS if isinstance(config, str) else len(config) >= 6

    def mma_sparse_decode(q, k_cache, indices, topk_length, attn_sink, softmax_scale, extra_k_cache=None,
                          extra_indices=None, extra_topk_length=None, config=None, num_splits=None):
        """The backend's decode: `config` from either table (or a launch tuple: 6 entries are Gluon's); None:
        the Gluon kernel where gluon_serves takes the call, as the dispatcher's mma branch routes it."""
        extra = extra_k_cache if extra_indices is not None else None
        if config is None and gluon_mod.gluon_serves(q, k_cache, extra):
            config = gluon_mod.GLUON_CONFIG
        run = gluon_mod.gluon_sparse_decode if config is not None and is_gluon(config) else \
            triton_mod.mma_sparse_decode
        kwargs = {} if config is None else {"config": config}
        return run(q, k_cache, indices, topk_length, attn_sink, softmax_scale, extra_k_cache, extra_indices,
                   extra_topk_length, num_splits=num_splits, **kwargs)

    def pick_num_splits(batch, head_groups, list_width, sms, config=None):
        if isinstance(config, str) and config in gluon_mod.GLUON_CONFIGS:
            return triton_mod.split_count(gluon_mod.GLUON_CONFIGS[config], batch, head_groups, list_width, sms)
        return triton_mod.pick_num_splits(batch, head_groups, list_width, sms, config)

    out.mma_sparse_decode, out.pick_num_splits = mma_sparse_decode, pick_num_splits
    return out
