"""DeepGEMM as sglang 0.5.23 imports it, on a machine without a GPU: the pinned sgl-deep-gemm wheel's own Python
package with its compiled ops declared from the op schemas its `_C.so` registers.

sglang 0.5.23 requires sgl-deep-gemm 0.2.3.post2. The wheel is fetched through pip's configuration into patchkit's
cache and checked against its sha256 (PINNED). Its `deep_gemm/__init__.py` runs as shipped; only
`torch.ops.load_library` of `_C.so` is replaced by declaring each op with the schema string `_C.so` carries
(`torch.library`), so every call goes through torch's own argument checking against DeepGEMM's schema (a None
where the schema says `Tensor` raises there, as it does on a GPU) and then into a recorder that stands in for
the kernel: it writes down (op, arguments) and returns what the caller hands it for that op.
"""
from __future__ import annotations

import importlib
import re
import sys
import zipfile
from contextlib import contextmanager
from pathlib import Path

import torch

from harness.scoped import scoped
from patchkit.fetch import fetch
from patchkit.lockfile import Upstream

PINNED = Upstream(name="deep_gemm", package="sgl-deep-gemm", version="0.2.3.post2",
                  artifact="sgl_deep_gemm-0.2.3.post2-py3-none-manylinux2014_x86_64.whl",
                  sha256="d1e3e1421d6624a16f32f2dee35c026d64d2f77799e5c0c5eaba68c27023630c", root="deep_gemm")
NAMESPACE = "deep_gemm"
_SCHEMA = re.compile(r"([a-z_][a-z0-9_]*)\(.*\) -> .+")


def wheel() -> Path:
    """The pinned wheel in patchkit's cache (pip's configuration says where it comes from)."""
    return fetch(PINNED, log=lambda *_: None)


def op_schemas(path: Path) -> dict[str, str]:
    """name -> schema of every op the wheel's `_C.so` registers, as the strings it carries."""
    with zipfile.ZipFile(path) as z:
        blob = z.read("deep_gemm/_C.so")
    strings = (s.decode("ascii", "replace") for s in blob.split(b"\x00"))
    return {m.group(1): m.group(0) for m in map(_SCHEMA.fullmatch, strings) if m}


class Recorder:
    """What each op call was given, in order; `answers[name](*args)` is what it returns (None if absent)."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []
        self.answers: dict = {}

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def __call__(self, name, *args):
        self.calls.append((name, args))
        answer = self.answers.get(name)
        return answer(*args) if answer is not None else None


_ACTIVE: list[Recorder] = []
_DECLARED: dict[str, str] = {}
_LIBRARY: list = []


def _refuse_undefined(name: str, args: tuple) -> None:
    """torch hands a None given for a `Tensor` argument on as an undefined tensor; DeepGEMM's host code then reads
    its sizes (for a schedule: `schedule_meta.size(0) == num_sms + 1`) and fails. Fail here, naming it."""
    schema = getattr(torch.ops, NAMESPACE).__getattr__(name).default._schema
    for arg, value in zip(schema.arguments, args):
        if str(arg.type) == "Tensor" and value is None:
            raise RuntimeError(f"deep_gemm.{name}: argument {arg.name!r} is a Tensor in DeepGEMM's schema "
                               f"({schema}); found None")


def _declare(schemas: dict[str, str]) -> None:
    """Declare the ops once per process (torch keeps a namespace's schemas for its lifetime)."""
    if _DECLARED:
        assert _DECLARED == schemas, "another DeepGEMM schema set is already declared in this process"
        return
    lib = torch.library.Library(NAMESPACE, "DEF")
    for name, schema in schemas.items():
        lib.define(schema)

        def kernel(*args, _name=name):
            _refuse_undefined(_name, args)
            return _ACTIVE[-1](_name, *args)
        lib.impl(name, kernel, "CompositeExplicitAutograd")
    _LIBRARY.append(lib)
    _DECLARED.update(schemas)


def _unpack_python(path: Path, dest: Path) -> Path:
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.startswith("deep_gemm/") and n.endswith((".py", "VERSION"))]
        z.extractall(dest, names)
    # the package loads `_C.so` when the file is there (and builds it otherwise): an empty file keeps the path it
    # takes, and load_library is replaced while it imports
    (dest / NAMESPACE / "_C.so").write_bytes(b"")
    return dest


@contextmanager
def deep_gemm(tmp: Path, recorder: Recorder):
    """While inside, `import deep_gemm` is the pinned wheel's package over the declared ops, answering through
    `recorder`; sys.modules and sys.path are put back after."""
    path = wheel()
    _declare(op_schemas(path))
    site = _unpack_python(path, Path(tmp))
    _ACTIVE.append(recorder)
    saved = {k: m for k, m in sys.modules.items() if k == NAMESPACE or k.startswith(NAMESPACE + ".")}
    for k in saved:
        del sys.modules[k]
    load_library = torch.ops.load_library
    torch.ops.load_library = lambda *_: None          # the ops are declared above, from the same file's schemas
    sys.path.insert(0, str(site))
    try:
        with scoped(__import__("os").environ, {"CUDA_HOME": str(site)}):   # _C.init asks where CUDA is
            module = importlib.import_module(NAMESPACE)
        yield module
    finally:
        sys.path.remove(str(site))
        torch.ops.load_library = load_library
        for k in [k for k in sys.modules if k == NAMESPACE or k.startswith(NAMESPACE + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)
        _ACTIVE.pop()
