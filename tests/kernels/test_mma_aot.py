"""P1: every MMA decode config compiles ahead of time for sm_120 and sm_90, on the CPU, under each release
line's own Triton (0.5.14: triton 3.6, this venv; 0.5.23: triton 3.8, `.venv-triton38`, which `make test` builds)
and under the Triton the gate follows ahead of any line (3.9, `.venv-triton39`, on the 0.5.23 line's file:
harness.aot.aot_runs).

sm_120 (RTX PRO 6000 / 5090) gives a block at most 101376 bytes of shared memory and has
mma.sync only (no wgmma); Triton's metadata reports the shared memory, and the ptxas that ships with
Triton reports registers and spills (`-v`: its log of the very cubin Triton built, the release's own ptxas
and flags).
Compiles run in a subprocess so this process's TRITON_INTERPRET setting (the numerics tests use the
interpreter) cannot leak in, and so another line's Triton can run them. A line's mma backend is read whole
(harness/mma_backend.py: 0.5.14's one file, 0.5.23's Triton file and its Gluon module beside it). The Gluon kernel
is built only on the Triton releases the overlay names (GLUON_TRITON_RELEASES); on any other the gate shows that it does not build (recording the build error's
text) and that the dispatcher of that very runtime picks the Triton kernel for Gluon's shapes.
The compile helpers and the production specialisation are harness/aot.py's (bench/experiments/
count_instructions.py compiles the same).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from harness.aot import (DIV16, MAIN_SIGNATURE, aot_runs, aot_venv, build_report, compile_for_run, compile_kernel,
                         decode_constexprs, error_text, requirements_release)
from harness.mma_backend import GLUON_FILE, load_mma_backend
from harness.upstream import extract_functions

REPO = Path(__file__).resolve().parents[2]
KERNEL = "flash_mla_sm120_mma.py"
SM120_SHARED_LIMIT = 101376
ARCHS = (120, 90)
COMBINE_SIGNATURE = dict(
    part_out_ptr="*fp32", part_lse_ptr="*fp32", sink_ptr="*fp32", out_ptr="*bf16",
    lse_ptr="*fp32", H="i32", num_splits="i32",
)
# A shape the dispatcher sends to Gluon where Gluon builds: 8 heads (TP = 8), 128 rows.
GLUON_SHAPE = (8, 128)

# Registers sit at 240-255, so the one-cache build (e.g. the top-k 2048 shape) gets its own check.
CACHE_VARIANTS = {"": {}, "/one-cache": dict(HAS_EXTRA=False, HAS_EXTRA_LEN=False)}


def overlay_of(line: str) -> Path:
    (path,) = (REPO / "overlay" / line).rglob(KERNEL)
    return path


@gluon.jit
def _calls_a_missing_builtin(x_ptr):
    gl.no_such_builtin(x_ptr)


@gluon.jit
def _broken_gluon_kernel(x_ptr):
    # The error sits one call deep, as the shipped kernel's did under 3.8 and 3.9: the outer CompilationError's
    # text then ends in a source excerpt and its '^' marker.
    _calls_a_missing_builtin(x_ptr)


def gluon_constexprs(config: tuple, split: bool) -> dict:
    """The Gluon decode kernel's constexprs in the production specialisation."""
    block_t, stages, warps, q_smem, bits, dq = config
    return dict(HAS_MAIN_LEN=True, HAS_EXTRA=True, HAS_EXTRA_LEN=True, HAS_SINK=True, SPLIT=split,
                POW2_PAGES=True, BLOCK_T=block_t, STAGES=stages, NUM_WARPS=warps, Q_SMEM=q_smem, BITS=bits,
                DQ=dq)


def _compile_all(overlay: Path) -> dict:
    """Subprocess body: compile every config the runtime ships (and the combine kernel) for every arch."""
    import triton

    mod = load_mma_backend(overlay, "flash_mla_sm120_mma_aot")
    rows = []

    def build(fn, signature, constexprs, div16, num_warps, num_stages, arch):
        k = compile_kernel(fn, signature, constexprs, div16, num_warps, num_stages, arch)
        ptx = k.asm["ptx"]
        return {"shared": k.metadata.shared, "wgmma": "wgmma" in ptx, "mma_sync": "mma.sync" in ptx,
                **build_report(k)}

    gluon_probe = None
    # What this runtime's dispatcher can pick: the tuned table less the release's substitutes (their stand-ins
    # included), or off TUNED_TRITON_RELEASES one config. The others are still built, to show why they are left out.
    if mod.tuned_for():
        substitutes = mod.TUNED_TRITON_RELEASES[mod._release(triton.__version__)]
        shipped = (set(mod.MMA_CONFIGS) - set(substitutes)) | set(substitutes.values())
    else:
        substitutes, shipped = {}, {mod.UNTUNED_RELEASE_CONFIG}
    for arch in ARCHS:
        for name, cfg in mod.MMA_CONFIGS.items():
            bh, bt, warps, stages = cfg["launch"]
            for split in (False, True):
                for suffix, over in CACHE_VARIANTS.items():
                    const = {**decode_constexprs(bh, bt, split), **over}
                    info = build(mod._mma_sparse_decode_kernel, MAIN_SIGNATURE, const, DIV16, warps, stages, arch)
                    rows.append({"arch": arch, "kernel": f"decode/{name}/split={split}{suffix}",
                                 "shipped": name in shipped, **info})
        for name, cfg in mod.GLUON_CONFIGS.items():
            launch = cfg["launch"]
            if not mod.gluon_builds():
                # Not shipped on this runtime: the gate records that it indeed does not build here.
                if gluon_probe is None:
                    try:
                        build(mod._gluon_sparse_decode_kernel, MAIN_SIGNATURE, gluon_constexprs(launch, False),
                              DIV16, launch[2], 1, arch)
                        gluon_probe = "built"
                    except Exception as exc:   # the probe's whole point: which error this Triton gives
                        gluon_probe = error_text(exc)
                continue
            for split in (False, True):
                for suffix, over in CACHE_VARIANTS.items():
                    const = {**gluon_constexprs(launch, split), **over}
                    info = build(mod._gluon_sparse_decode_kernel, MAIN_SIGNATURE, const, DIV16, launch[2], 1, arch)
                    rows.append({"arch": arch, "kernel": f"gluon/{name}/split={split}{suffix}", **info})
        # Both combine shapes combine_launch picks: few rows (all splits at once), many rows.
        for label, (batch, heads, splits) in {"combine/few-rows": (1, 64, 40), "combine/many-rows": (16, 64, 4)}.items():
            _, cbh, cbd, at_once, cwarps = mod.combine_launch(batch, heads, splits)
            const = dict(HAS_SINK=True, BLOCK_H=cbh, BLOCK_D=cbd, SPLITS_AT_ONCE=at_once)
            info = build(mod._combine_splits_kernel, COMBINE_SIGNATURE, const, ["H"], cwarps, 1, arch)
            rows.append({"arch": arch, "kernel": label, **info})
    try:
        compile_kernel(_broken_gluon_kernel, dict(x_ptr="*fp32"), {}, [], 4, 1, 120)
        broken_probe = "built"
    except Exception as exc:   # what error_text makes of a real build error under this Triton
        broken_probe = error_text(exc)
    return {"triton": triton.__version__, "gluon_builds": mod.gluon_builds(), "gluon_probe": gluon_probe,
            "broken_probe": broken_probe,
            "tuned": mod.tuned_for(), "untuned_config": mod.UNTUNED_RELEASE_CONFIG, "substitutes": substitutes,
            "untuned_picks": sorted({mod.pick_config(h, b) for h in (8, 16, 64, 128) for b in (1, 16, 64, 128)}),
            "pick": {"gluon_shape": mod.pick_config(*GLUON_SHAPE), "gluon_config": mod.GLUON_CONFIG,
                     "triton_config": mod.pick_triton_config(*GLUON_SHAPE)},
            "rows": rows}


RUNS = aot_runs(REPO)


@pytest.fixture(scope="module", params=RUNS, ids=lambda run: run.name)
def compiled(request) -> dict:
    run = request.param
    return {**compile_for_run(__name__, REPO, run, (overlay_of(run.line),)), "line": run.line}


def test_every_shipped_config_compiles_for_both_archs(compiled):
    # The config table, read without importing the module (no GPU, no interpreter).
    kernel = overlay_of(compiled["line"])
    gluon_file = kernel.with_name(GLUON_FILE) if kernel.with_name(GLUON_FILE).is_file() else kernel
    ns = {**extract_functions(kernel, ["MMA_CONFIGS"], {}), **extract_functions(gluon_file, ["GLUON_CONFIGS"], {})}
    kinds = {(r["arch"], r["kernel"]) for r in compiled["rows"]}
    gluon = [f"gluon/{name}" for name in ns["GLUON_CONFIGS"]] if compiled["gluon_builds"] else []
    for arch in ARCHS:
        assert (arch, "combine/few-rows") in kinds and (arch, "combine/many-rows") in kinds
        for name in [f"decode/{name}" for name in ns["MMA_CONFIGS"]] + gluon:
            for split in (False, True):
                for suffix in CACHE_VARIANTS:
                    assert (arch, f"{name}/split={split}{suffix}") in kinds


def test_gluon_is_used_exactly_on_the_triton_releases_it_builds_on(compiled):
    """GLUON_TRITON_RELEASES agrees with the gate: on a listed release every Gluon config built (above); on any
    other the Gluon kernel fails to build and that runtime's dispatcher sends Gluon's shapes to Triton."""
    pick = compiled["pick"]
    if compiled["gluon_builds"]:
        assert compiled["gluon_probe"] is None and pick["gluon_shape"] == pick["gluon_config"], compiled
    else:
        assert compiled["gluon_probe"] not in (None, "built"), (
            f"the Gluon kernel builds under triton {compiled['triton']}: gate it and list the release in "
            "GLUON_TRITON_RELEASES")
        # The gate keeps why it does not build: an error name and its message, not a bare source marker.
        assert re.fullmatch(r"\w+: .*[A-Za-z]{3}.*", compiled["gluon_probe"]), compiled["gluon_probe"]
        assert pick["gluon_shape"] == pick["triton_config"] != pick["gluon_config"], compiled


def test_a_build_error_is_recorded_by_its_text(compiled):
    """error_text digs the message out of a real CompilationError under this Triton (the outer one ends in '^')."""
    probe = compiled["broken_probe"]
    assert probe.startswith("CompilationError: ") and "no_such_builtin" in probe, probe


def test_sm120_shared_memory_fits(compiled):
    for row in compiled["rows"]:
        if row["arch"] == 120:
            assert 0 < row["shared"] <= SM120_SHARED_LIMIT, row


def test_sm120_uses_mma_sync_only(compiled):
    for row in compiled["rows"]:
        if row["arch"] == 120 and not row["kernel"].startswith("combine/"):
            assert row["mma_sync"] and not row["wgmma"], row


@pytest.mark.parametrize("arch", ARCHS)
def test_no_register_spills(compiled, arch):
    """Every config this runtime ships (on a tuned release MMA_CONFIGS less its substitutes, else the one it takes)
    is spill-free."""
    for row in compiled["rows"]:
        if row["arch"] == arch and row.get("shipped", True):
            assert row["spill_stores"] == 0 and row["spill_loads"] == 0, row
            assert row["regs"] <= 255, row


def test_tuned_releases_agree_with_the_gate(compiled):
    """TUNED_TRITON_RELEASES agrees with what this runtime builds. On a listed release each config it substitutes
    does spill here (else drop the substitute) and its stand-in ships (spill-free: above); off the list, some tuned
    config spills here, which is why every shape goes to UNTUNED_RELEASE_CONFIG (spill-free: above)."""
    decode = [r for r in compiled["rows"] if r["kernel"].startswith("decode/")]
    unshipped = [r for r in decode if not r["shipped"]]
    if compiled["tuned"]:
        for name, stand_in in compiled["substitutes"].items():
            assert any(r["spill_stores"] for r in unshipped if r["kernel"].startswith(f"decode/{name}/")), (
                f"{name} builds spill-free under triton {compiled['triton']}: drop it from TUNED_TRITON_RELEASES")
            assert any(r["shipped"] for r in decode if r["kernel"].startswith(f"decode/{stand_in}/")), stand_in
        assert {r["kernel"].split("/")[1] for r in unshipped} == set(compiled["substitutes"]), compiled["substitutes"]
        return
    assert any(r["spill_stores"] for r in unshipped), (
        f"every config builds spill-free under triton {compiled['triton']}: list the release in TUNED_TRITON_RELEASES")
    assert compiled["untuned_picks"] == [compiled["untuned_config"]], compiled["untuned_picks"]


def test_each_aot_venv_pins_the_triton_of_its_lines():
    """requirements-aot-tritonXY.txt installs exactly the Triton pin.lock gives the lines of release X.Y; a file
    whose release no line runs is a followed release, gated on the newest line (a run of its own above)."""
    from patchkit.lockfile import load_lock

    files = sorted(REPO.glob("requirements-aot-triton*.txt"))
    assert files
    for req in files:
        pins = dict(l.split("==", 1) for l in req.read_text().splitlines() if "==" in l and not l.startswith("#"))
        release = requirements_release(req)
        assert aot_venv(REPO, release).name == ".venv-" + req.stem.removeprefix("requirements-aot-"), req.name
        runs = [run for run in RUNS if run.release == release]
        assert runs, f"{req.name}: no run of the gate uses triton {release}"
        for run in runs:
            if run.own:
                assert pins["triton"] == load_lock(REPO / "pin.lock", run.line).runtime["triton"], (req.name, run)


def test_make_test_builds_every_aot_venv():
    """`make test` builds the venv of every requirements-aot-tritonXY.txt (AOT_VENVS, by the one pattern rule), so
    no run of the gate is skipped in CI for want of its Triton."""
    makefile = (REPO / "Makefile").read_text()
    listed = re.search(r"^AOT_VENVS\s*:=(.*)$", makefile, re.M).group(1).split()
    wanted = sorted(aot_venv(REPO, requirements_release(req)).name for req in REPO.glob("requirements-aot-triton*.txt"))
    assert sorted(listed) == wanted, listed
    assert re.search(r"^\.venv-triton%/\.installed: requirements-aot-triton%\.txt\b", makefile, re.M)


if __name__ == "__main__":
    print(json.dumps(_compile_all(Path(sys.argv[1]))))
