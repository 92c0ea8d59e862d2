"""Load pieces of the real upstream source without importing its whole package.

Many upstream modules pull in the full serving runtime at import time. A pure function
can still be tested by compiling just its definition out of the pinned file. The set's kernel
modules register their torch ops with the release's own `register_custom_op`, which this supplies
from the line's pinned source (load_kernel, release_custom_op).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import sys
import types
from contextlib import contextmanager
from pathlib import Path

from harness.scoped import scoped
from serving import REPO


def load_module(path: Path, name: str | None = None) -> types.ModuleType:
    """Import one file by path (its own imports must be satisfiable)."""
    path = Path(path)
    name = name or f"_upstream_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def tree_package(root: Path, package: str):
    """While inside, `import package.x.y` reads root/package/x/y.py: a bare package (its __init__ is not
    run), so one module and what it imports load without the whole runtime. sys.modules is put back after,
    so trees of two versions never share a module."""
    saved = {k: m for k, m in sys.modules.items() if k == package or k.startswith(package + ".")}
    for k in saved:
        del sys.modules[k]
    bare = types.ModuleType(package)
    bare.__path__ = [str(Path(root) / package)]
    sys.modules[package] = bare
    try:
        yield
    finally:
        for k in [k for k in sys.modules if k == package or k.startswith(package + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)


def import_from_tree(root: Path, dotted: str) -> types.ModuleType:
    """The module `dotted` (e.g. sglang.srt.environ) of the tree at root, see tree_package."""
    with tree_package(root, dotted.split(".")[0]):
        return importlib.import_module(dotted)


def top_level_defs(tree: ast.Module) -> dict[str, ast.stmt]:
    """A module's top-level functions, classes and single-name assignments, by name."""
    defs = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            defs[node.targets[0].id] = node
    return defs


def extract_functions(path: Path, names: list[str], namespace: dict) -> dict:
    """Compile only the named top-level functions/assignments of `path` into `namespace`.

    `namespace` supplies what those definitions reference (torch, constants...).
    Returns the namespace. Raises KeyError naming any definition not found.
    """
    source = Path(path).read_text()
    tree = ast.parse(source)
    wanted = set(names)
    picked = []
    for node in tree.body:
        target = None
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            target = node.name
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
        if target in wanted:
            picked.append(node)
            wanted.discard(target)
    if wanted:
        raise KeyError(f"{path}: definitions not found: {sorted(wanted)}")
    module = ast.Module(body=picked, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)
    return namespace


# --------------------------------------------------------------------------- the release's register_custom_op

CUSTOM_OP = "sglang/srt/utils/custom_op.py"
COMMON = "sglang/srt/utils/common.py"
# What direct_register_custom_op reads that common.py imports rather than defines: torch, Library, lru_cache
# and, on 0.5.23, `current_platform.is_out_of_tree()`. current_platform is sglang.srt.platforms' lazily
# resolved platform, whose resolution imports every platform and its plugins: in its place, the answer of
# every in-tree platform (_InTreePlatform).


class _InTreePlatform:
    """The one question direct_register_custom_op asks of sglang.srt.platforms.current_platform: no
    out-of-tree platform plugin is active here (CUDA, ROCm, CPU... answer False)."""

    def is_out_of_tree(self) -> bool:
        return False


_RELEASES: dict[tuple, dict[str, types.ModuleType]] = {}
_CPU_LIBS: dict[str, object] = {}
_cpu_kernels_wanted = 0


def _with_helpers(tree: ast.Module, names: list[str]) -> list[ast.stmt]:
    """The named top-level definitions of a module and the top-level definitions they read, transitively, in
    file order."""
    defs = top_level_defs(tree)
    picked, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in picked:
            continue
        if name not in defs:
            raise KeyError(f"definition not found: {name}")
        picked.add(name)
        todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs]
    return [node for name, node in defs.items() if name in picked]


def _module_from_source(name: str, source: str, filename: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = filename
    exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)
    return module


def _release_reader(tree: Path | None, line: str | None):
    """(read(relpath) -> text, where(relpath) -> file name for tracebacks) of a tree or of a line's pinned wheel."""
    if tree is not None:
        root = Path(tree)
        return (lambda rel: (root / rel).read_text()), (lambda rel: str(root / rel))
    from patchkit.fetch import fetch
    from patchkit.lockfile import load_lock
    from patchkit.pristine import Pristine

    wheel = Pristine(fetch(load_lock(REPO / "pin.lock", line).upstream("sglang"), log=lambda *_: None))
    return (lambda rel: wheel.read(rel).decode()), (lambda rel: f"{wheel.wheel}/{rel}")


def release_custom_op_files(tree: Path) -> list[str]:
    """The files of a tree release_custom_op reads: custom_op.py, the kernel_api_logging it imports, common.py."""
    return [CUSTOM_OP, _logging_module(Path(tree, CUSTOM_OP).read_text()).replace(".", "/") + ".py", COMMON]


def _logging_module(custom_op_source: str) -> str:
    """The kernel_api_logging module custom_op.py imports (sglang.kernel_api_logging on 0.5.14,
    sglang.kernels.kernel_api_logging on 0.5.23)."""
    (name,) = {n.module for n in ast.parse(custom_op_source).body
               if isinstance(n, ast.ImportFrom) and (n.module or "").endswith(".kernel_api_logging")}
    return name


def _cpu_kernel(qualname: str) -> None:
    """Under Triton's interpreter the kernels take CPU tensors, and an op upstream registers for CUDA alone
    cannot be called with them: give the op a CPU kernel that re-dispatches to its CUDA kernel (the function
    upstream registered). Ops with a CPU kernel, or without a CUDA one, are left as they are."""
    import torch

    namespace, name = qualname.split("::")
    if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CPU") or \
            not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CUDA"):
        return
    if namespace not in _CPU_LIBS:  # kept for the process: a Library's registrations end with it
        _CPU_LIBS[namespace] = torch.library.Library(namespace, "FRAGMENT")
    op = getattr(getattr(torch.ops, namespace), name).default
    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    _CPU_LIBS[namespace].impl(name, lambda *args, **kwargs: op.redispatch(cuda, *args, **kwargs), "CPU")


def _release_modules(tree: Path | None, line: str | None) -> dict[str, types.ModuleType]:
    """The modules `from sglang.srt.utils.custom_op import register_custom_op` needs, built once per release
    and kept for the process (the ops registered through a release's `sglang_lib` live as long as it does):
    custom_op.py and the kernel_api_logging it imports, whole, and a sglang.srt.utils.common holding only
    common.py's direct_register_custom_op with the definitions it reads (the module's own imports are the
    serving runtime)."""
    key = ("tree", str(Path(tree).resolve())) if tree is not None else ("line", line)
    if key in _RELEASES:
        return _RELEASES[key]
    import functools

    import torch

    read, where = _release_reader(tree, line)
    custom_op_source = read(CUSTOM_OP)
    logging_name = _logging_module(custom_op_source)
    logging_rel = logging_name.replace(".", "/") + ".py"
    common = types.ModuleType("sglang.srt.utils.common")
    common.__file__ = where(COMMON)
    common.__dict__.update(torch=torch, Library=torch.library.Library, lru_cache=functools.lru_cache,
                           current_platform=_InTreePlatform())
    common_tree = ast.parse(read(COMMON))
    future = [n for n in common_tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    body = future + _with_helpers(common_tree, ["direct_register_custom_op"])
    exec(compile(ast.Module(body=body, type_ignores=[]), where(COMMON), "exec", dont_inherit=True), common.__dict__)
    release = common.direct_register_custom_op

    @functools.wraps(release)
    def direct_register_custom_op(*args, **kwargs):
        release(*args, **kwargs)
        if _cpu_kernels_wanted:
            bound = inspect.signature(release).bind(*args, **kwargs)
            lib = bound.arguments.get("target_lib") or common.sglang_lib
            _cpu_kernel(f"{lib.ns}::{bound.arguments['op_name']}")

    common.direct_register_custom_op = direct_register_custom_op
    modules = {logging_name: _module_from_source(logging_name, read(logging_rel), where(logging_rel))}
    with scoped(sys.modules, dict(modules)):
        modules["sglang.srt.utils.custom_op"] = _module_from_source(
            "sglang.srt.utils.custom_op", custom_op_source, where(CUSTOM_OP))
    modules["sglang.srt.utils.common"] = common
    _RELEASES[key] = modules
    return modules


@contextmanager
def release_custom_op(tree: Path | None = None, line: str | None = None, cpu_kernels: bool = False):
    """While inside, `from sglang.srt.utils.custom_op import register_custom_op` imports the release's own
    custom_op.py: from the tree at `tree` (a directory holding sglang/: an unpacked wheel, a checkout's
    python/), else from the line's pinned sglang wheel (patchkit's cache, sha256-checked). What it imports
    comes from the same release (_release_modules). A tree without custom_op.py gets nothing.

    cpu_kernels: every op registered in the `sglang` namespace, now or while inside, also gets a CPU kernel
    that re-dispatches to its CUDA kernel (_cpu_kernel), so that Triton's interpreter can run it on CPU
    tensors. Upstream registers these ops for CUDA alone: a harness addition, never for a test file run as
    upstream runs it (harness.upstream_test).

    One op name is registered once per process, by whichever module registers it first, as upstream's
    direct_register_custom_op does: a module loaded again, or the other line's copy, calls the first one's
    function through the op (its own functions, called directly, are its own)."""
    global _cpu_kernels_wanted
    if tree is not None and not (Path(tree) / CUSTOM_OP).is_file():
        yield None
        return
    modules = _release_modules(tree, line)
    with scoped(sys.modules, modules):
        if cpu_kernels:
            import torch

            _cpu_kernels_wanted += 1
            for qualname in torch._C._dispatch_get_all_op_names():
                if qualname.startswith("sglang::") and "." not in qualname:
                    _cpu_kernel(qualname)
        try:
            yield modules["sglang.srt.utils.custom_op"]
        finally:
            if cpu_kernels:
                _cpu_kernels_wanted -= 1


def overlay_line(path: Path) -> str | None:
    """The release line of a file under this checkout's overlay/<line>/, else None."""
    overlay = REPO / "overlay"
    try:
        return Path(path).resolve().relative_to(overlay).parts[0]
    except ValueError:
        return None


def kernel_release(path: Path) -> dict:
    """Where a module of the set that registers torch ops gets register_custom_op from: the tree the file lies
    in (the nearest directory above it holding sglang/srt/utils/custom_op.py), else the line of the
    overlay/<line>/ it lies under."""
    for parent in Path(path).resolve().parents:
        if (parent / CUSTOM_OP).is_file():
            return {"tree": parent}
    line = overlay_line(path)
    if line is None:
        raise FileNotFoundError(f"{path}: expected a file in a tree holding {CUSTOM_OP} or under overlay/<line>/, "
                                "found neither (pass tree= or line=)")
    return {"line": line}


def load_kernel(path: Path, name: str | None = None, tree: Path | None = None, line: str | None = None
                ) -> types.ModuleType:
    """load_module for the set's modules that register torch ops through `register_custom_op`
    (flash_mla_sm120_mma.py, mhc_pre_triton.py): loaded inside release_custom_op of `tree` or `line`, or, given
    neither, of kernel_release(path). Under TRITON_INTERPRET=1 (the CPU runs) the ops get CPU kernels."""
    where = {"tree": tree} if tree is not None else {"line": line} if line is not None else kernel_release(path)
    with release_custom_op(**where, cpu_kernels=os.environ.get("TRITON_INTERPRET") == "1"):
        return load_module(path, name)
