"""OVERLAY_EMULATE_SM120=1 (serving/test_hooks/emulate_sm120.py via serving/test_hooks/boxhooks/sitecustomize.py).

Against the real pinned and patched trees: the hook's module list covers every place the tree
binds is_sm120_supported or an import-time flag computed from it (no sglang import needed), and,
where the pinned sglang's import dependencies are installed (make test-serve), a fresh interpreter
with the hooks dir first on PYTHONPATH imports the DSv4 modules and sees the sm_120 answers --
also in a process it starts with multiprocessing's spawn, as SGLang starts its scheduler.
Without the switch the same imports give the real answer (False on this GPU-less machine).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from serving.test_hooks import emulate_sm120
from tests.serve_env import import_pinned

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / "serving" / "test_hooks" / "boxhooks"

IMPORT_BINDING = re.compile(r"^(?:from\s+\S+\s+import\s+[^\n]*\bis_sm120_supported\b|\s+is_sm120_supported,\s*$)",
                            re.M)
FLAG = re.compile(r"^(_\w+)\s*=\s*is_sm120_supported\(\)", re.M)


def sm120_bindings(root: Path) -> dict[str, set[str]]:
    """module -> import-time flags, for every module that binds is_sm120_supported at module level."""
    found = {}
    for path in (root / "sglang").rglob("*.py"):
        rel = path.relative_to(root)
        if rel.parts[:2] == ("sglang", "multimodal_gen") or rel.as_posix() == "sglang/srt/utils/common.py":
            continue   # the diffusion runtime is not the LLM server; common.py defines the name
        text = path.read_text(errors="replace")
        if IMPORT_BINDING.search(text) or FLAG.search(text):
            module = rel.with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
            found[module] = set(FLAG.findall(text))
    return found


@pytest.mark.parametrize("tree", ["pristine", "patched"])
def test_hook_covers_every_sm120_binding_of_the_tree(tree, pristine_root, patched_root):
    root = pristine_root if tree == "pristine" else patched_root
    found = sm120_bindings(root)
    assert "sglang.srt.layers.attention.deepseek_v4_backend" in found          # the grep works
    missing = sorted(set(found) - set(emulate_sm120.SM120_USERS))
    assert not missing, f"emulate_sm120.SM120_USERS lacks {missing}"
    for module, flags in found.items():
        assert flags <= set(emulate_sm120.SM120_USERS[module]), (module, flags)
    # The entry points whose first call the hook logs exist in both trees.
    for module, (name, _) in emulate_sm120.SM120_ENTRY_POINTS.items():
        path = root / (module.replace(".", "/") + ".py")
        assert re.search(rf"^def {name}\(", path.read_text(), re.M), (module, name)


PROBE = r"""
import json, multiprocessing as mp, sys

def values():
    import sglang.srt.server_args as sa
    import sglang.srt.layers.attention.deepseek_v4_backend as backend
    import sglang.srt.layers.attention.dsv4.indexer as indexer
    import sglang.srt.layers.attention.flash_mla_sm120 as fm
    import sglang.srt.layers.quantization.fp8_utils as fp8_utils
    import sglang.srt.layers.mhc as mhc
    return {"server_args": sa.is_sm120_supported(), "backend_flag": backend._is_sm120,
            "backend_name": backend.is_sm120_supported(), "indexer": indexer.is_sm120_supported(),
            "fp8_utils": fp8_utils.is_sm120_supported(), "fp8_utils_flag": fp8_utils._is_sm120_supported,
            "sglang_file": sa.__file__, "sinkhorn": mhc.hc_split_sinkhorn.__module__,
            "decode_traced": getattr(fm.flash_mla_with_kvcache_sm120, "overlay_traced", False)}

def child(queue):
    queue.put(values())

if __name__ == "__main__":
    out = {"main": values()}
    if "--spawn" in sys.argv:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        proc = ctx.Process(target=child, args=(queue,))
        proc.start()
        out["spawned"] = queue.get(timeout=240)
        proc.join(60)
    if "--call-decode" in sys.argv:
        import sglang.srt.layers.attention.flash_mla_sm120 as fm
        try:
            fm.flash_mla_with_kvcache_sm120(q=None)   # logs "entered", then fails on the bogus input
        except Exception:
            pass
    print("PROBE " + json.dumps(out))
"""


def run_probe(tmp_path: Path, tree: Path, emulate: bool, *flags: str) -> tuple[dict, str]:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVERLAY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(HOOKS), str(tree)])
    if emulate:
        env["OVERLAY_EMULATE_SM120"] = "1"
    out = subprocess.run([sys.executable, str(script), *flags], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("PROBE "))
    return json.loads(line[len("PROBE "):]), out.stderr


@pytest.fixture(scope="module")
def sglang_deps():
    import_pinned("sglang.srt.server_args")   # skips under make test (.venv has no sglang deps)


SM120_KEYS = ("server_args", "backend_flag", "backend_name", "indexer", "fp8_utils", "fp8_utils_flag")


def test_pinned_tree_takes_the_sm120_branches_in_every_process(sglang_deps, pristine_root, tmp_path):
    values, log = run_probe(tmp_path, pristine_root, True, "--spawn", "--call-decode")
    for proc in ("main", "spawned"):
        got = values[proc]
        assert got["sglang_file"].startswith(str(pristine_root)), got["sglang_file"]   # the tree, not the venv
        assert {k: got[k] for k in SM120_KEYS} == dict.fromkeys(SM120_KEYS, True), (proc, got)
        assert got["decode_traced"] is True
    # Loud: the TEST ONLY warning once per process (main + spawned), what was rebound, the first decode call.
    warnings = [l for l in log.splitlines() if "WARNING OVERLAY_EMULATE_SM120=1: TEST ONLY -- sm_120 branches forced on" in l]
    assert len(warnings) == 2 and len({re.search(r"pid (\d+)", l).group(1) for l in warnings}) == 2, log[-3000:]
    assert "sglang.srt.utils.common.is_sm120_supported rebound" in log
    assert "sglang.srt.layers.attention.deepseek_v4_backend: is_sm120_supported, _is_sm120=True emulated" in log
    assert ("sm_120 sparse-decode dispatcher entered: sglang.srt.layers.attention.flash_mla_sm120."
            "flash_mla_with_kvcache_sm120 (backend triton)") in log


def test_patched_tree_reports_the_mma_backend(sglang_deps, patched_root, tmp_path):
    values, log = run_probe(tmp_path, patched_root, True, "--call-decode")
    assert {k: values["main"][k] for k in SM120_KEYS} == dict.fromkeys(SM120_KEYS, True)
    assert "sm_120 sparse-decode dispatcher entered" in log and "(backend mma)" in log


def test_without_the_switch_nothing_is_emulated(sglang_deps, pristine_root, tmp_path):
    values, log = run_probe(tmp_path, pristine_root, False)
    assert {k: values["main"][k] for k in SM120_KEYS} == dict.fromkeys(SM120_KEYS, False)
    assert "OVERLAY_EMULATE_SM120" not in log and values["main"]["decode_traced"] is False


def test_sinkhorn_is_replaced_only_without_tilelang(sglang_deps, pristine_root, tmp_path):
    import importlib.util

    values, log = run_probe(tmp_path, pristine_root, False)
    if importlib.util.find_spec("tilelang") is None:
        assert values["main"]["sinkhorn"] == "overlay_hc_sinkhorn"
        assert "WARNING tilelang is not importable: sglang.srt.layers.mhc.hc_split_sinkhorn replaced" in log
    else:
        assert values["main"]["sinkhorn"] == "sglang.srt.layers.mhc"


def test_narrow_mode_rebinds_only_the_first_trials_three(sglang_deps, pristine_root, tmp_path):
    """OVERLAY_EMULATE_SM120=narrow: the fallback that keeps common.py (and so the FP8 GEMMs) as they are."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVERLAY_")}
    env.update(PYTHONPATH=os.pathsep.join([str(HOOKS), str(pristine_root)]), OVERLAY_EMULATE_SM120="narrow")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(next(l for l in out.stdout.splitlines() if l.startswith("PROBE "))[6:])["main"]
    assert (got["server_args"], got["backend_flag"], got["backend_name"], got["indexer"]) == (True,) * 4
    assert (got["fp8_utils"], got["fp8_utils_flag"]) == (False, False)
    assert "rebound to the emulated check" not in out.stderr and "(rebound late: is_sm120_supported, _is_sm120)" in out.stderr
