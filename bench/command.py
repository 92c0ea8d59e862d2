"""The command line a bench was started with, as typed, for the first line of its output."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path


def command_line() -> str:
    """`python3 -m bench.NAME ARGS...`. Under -m, sys.argv[0] is the module's file (a path of this machine),
    so the module's name is put back; the interpreter is named, not located."""
    spec = sys.modules["__main__"].__spec__
    argv = ["-m", spec.name, *sys.argv[1:]] if spec else sys.argv
    return shlex.join([Path(sys.executable).name, *argv])
