"""Harness hooks for every Python process of a server started from a bundle (TEST/BOX ONLY).

serving/serve_cmd.py puts this directory first on PYTHONPATH when it serves from a bundle, so the
server and the scheduler/detokenizer processes SGLang spawns all run it at start-up. It loads
serving/test_hooks/emulate_sm120.py by path (the repository is not on the server's sys.path) and installs
its import hooks: OVERLAY_EMULATE_SM120=1, and hc_split_sinkhorn where tilelang is missing.
Then it runs the sitecustomize that this file shadows, if the interpreter has one.
"""
import faulthandler
import importlib.machinery
import importlib.util
import os
import signal
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


try:
    _load("overlay_boxhooks", os.path.join(os.path.dirname(_HERE), "emulate_sm120.py")).install()
except Exception as _exc:   # a broken hook must show in the log, not pass silently
    print(f"[overlay-boxhooks] ERROR: hooks not installed: {type(_exc).__name__}: {_exc} (pid {os.getpid()})",
          file=sys.stderr, flush=True)
    raise

# A server that hangs (e.g. in a CUDA-graph capture) can be asked where: SIGUSR2 writes every thread's Python
# stack to stderr, i.e. the server log (bench/server/server_pool.py does so before it kills a server that timed out).
faulthandler.register(signal.SIGUSR2, all_threads=True)

# Chain to the sitecustomize this one shadows (e.g. a distribution's), as if ours were absent.
_others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _others)
if _spec is not None and _spec.origin and os.path.abspath(_spec.origin) != os.path.abspath(__file__):
    _chained = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_chained)
