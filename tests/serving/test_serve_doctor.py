"""`apply.py doctor` (serving/doctor.py): the report on this machine, the verdicts, the gate."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from serving import doctor

REPO = Path(__file__).resolve().parents[2]
PINS = {"sglang": "0.5.14", "flashinfer-python": "0.6.12", "torch": "2.11.0", "triton": "3.6.0"}
VENV = Path("/opt/venv-sglang")


def installed(**kw) -> doctor.Facts:
    base = dict(python=str(VENV / "bin/python"), site="/site", versions=dict(PINS), torch_cuda="12.8",
                driver="580.65", driver_cuda="13.0", nvcc="/usr/local/cuda/bin/nvcc (release 12.8)",
                patch_state="applied")
    base.update(kw)
    return doctor.Facts(**base)


def run_doctor(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "apply.py", "doctor", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_sm120_with_everything_applied_is_ready():
    facts = installed(gpus=[doctor.Gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0))])
    problems = doctor.verdict(facts, PINS, VENV)
    assert problems == []
    assert doctor.summary_line(facts, problems) == "sm_120 detected; all patches applied"


def test_sm90_says_the_sm120_paths_are_inactive():
    facts = installed(gpus=[doctor.Gpu("NVIDIA H200", (9, 0))])
    problems = doctor.verdict(facts, PINS, VENV)
    assert [p.blocking for p in problems] == [False]
    assert doctor.summary_line(facts, problems).startswith("this GPU is sm_90: the sm_120 paths are inactive")


def test_sm120_with_an_old_cuda_torch_or_unapplied_patches_blocks():
    gpu = [doctor.Gpu("NVIDIA GeForce RTX 5090", (12, 0))]
    old = doctor.verdict(installed(gpus=gpu, torch_cuda="12.6"), PINS, VENV)
    assert [p.text for p in old if p.blocking] == [
        "torch is built for CUDA 12.6; sglang takes its sm_120 paths only with CUDA >= 12.8: run make install"]
    pristine = doctor.verdict(installed(gpus=gpu, patch_state="pristine"), PINS, VENV)
    assert [p.text for p in pristine if p.blocking] == [
        "patches are pristine in /site: run make install (or python apply.py apply --target /site)"]
    wrong = doctor.verdict(installed(gpus=gpu, versions={**PINS, "sglang": "0.5.13"}), PINS, VENV)
    assert [p.text for p in wrong] == ["sglang 0.5.13 installed, pin.lock pins 0.5.14: run make install"]


def test_patch_state_comes_from_the_engine(pristine_root, patched_root):
    assert doctor.patch_status(pristine_root)[0] == "pristine"
    state, lines = doctor.patch_status(patched_root)
    assert state == "applied"
    assert "sglang: applied" in lines and any("0001-" in line for line in lines)


def test_report_on_this_machine_names_the_missing_gpu():
    # The interpreter running the tests stands in for the sglang environment: a real probe of a
    # real torch. This machine has no GPU; on a GPU machine the verdict differs, so skip there.
    facts = doctor.gather(Path(sys.prefix))
    if facts.gpus:
        pytest.skip("a GPU is visible here")
    assert facts.python and facts.versions["torch"] and facts.torch_error is None
    problems = doctor.verdict(facts, PINS, Path(sys.prefix))
    assert doctor.summary_line(facts, problems).startswith("no CUDA GPU visible to torch")


def test_gate_is_one_line_and_fails_without_a_gpu():
    facts = doctor.gather(Path(sys.prefix), target=REPO / "build" / "nonexistent")
    if facts.gpus:
        pytest.skip("a GPU is visible here")
    result = run_doctor("--gate", "--venv", sys.prefix)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.count("\n") == 1 and result.stdout.startswith("doctor: no CUDA GPU visible to torch")


def test_gate_without_an_environment_says_to_install(tmp_path):
    result = run_doctor("--gate", "--venv", str(tmp_path / "absent"))
    assert result.returncode == 1
    assert result.stdout == f"doctor: no sglang environment at {tmp_path / 'absent'}: run make install\n"


def test_full_report_lists_versions_against_the_pin(tmp_path):
    result = run_doctor("--venv", str(tmp_path / "absent"))
    assert result.returncode == 1
    out = result.stdout
    for line in ("GPU: none visible", "pin 0.5.14", "pin 0.6.12", "pin 2.11.0", "pin 3.6.0", "nvcc: ",
                 f"verdict: no sglang environment at {tmp_path / 'absent'}: run make install"):
        assert line in out, out


@pytest.mark.parametrize("target", ["serve", "smoke"])
def test_make_serve_and_smoke_stop_at_once_without_a_gpu(target, tmp_path):
    if doctor.gather(Path(sys.prefix), target=tmp_path).gpus:
        pytest.skip("a GPU is visible here")
    result = subprocess.run(["make", "-s", target, f"SGLANG_VENV={sys.prefix}", f"PYTHON={sys.executable}"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert result.stdout.startswith("doctor: no CUDA GPU visible to torch") and result.stdout.count("\n") == 1
    assert "sglang.launch_server" not in result.stdout + result.stderr     # nothing was launched


# -- TREE=pinned: the pinned baseline, asked for explicitly ------------------------------------------

def test_gate_accepts_a_pinned_tree_only_when_asked_for():
    gpu = [doctor.Gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0))]
    pristine = installed(gpus=gpu, patch_state="pristine")
    assert [p.text for p in doctor.verdict(pristine, PINS, VENV) if p.blocking] == [
        "patches are pristine in /site: run make install (or python apply.py apply --target /site)"]
    asked = doctor.verdict(pristine, PINS, VENV, want_tree="pinned")
    assert [p.blocking for p in asked] == [False] and "TREE=pinned" in asked[0].text
    applied = doctor.verdict(installed(gpus=gpu), PINS, VENV, want_tree="pinned")
    assert [p.text for p in applied if p.blocking] == [
        "TREE=pinned asks for the pinned baseline, but patches are applied in /site"]
    partial = doctor.verdict(installed(gpus=gpu, patch_state="partial"), PINS, VENV, want_tree="pinned")
    assert [p.blocking for p in partial] == [True]


def test_sm90_with_the_emulation_switch_says_so():
    facts = installed(gpus=[doctor.Gpu("NVIDIA H200", (9, 0))])
    problems = doctor.verdict(facts, PINS, VENV, environ={"OVERLAY_EMULATE_SM120": "1"})
    assert [p.blocking for p in problems] == [False]
    assert problems[0].text.startswith("this GPU is sm_90: OVERLAY_EMULATE_SM120=1 forces sglang's sm_120 branches")


OVERLAY = REPO / "overlay" / "0.5.14"


def test_overlay_state_of_the_real_trees(pristine_root, patched_root, tmp_path):
    assert doctor.overlay_state(pristine_root, OVERLAY) == "pristine"
    assert doctor.overlay_state(patched_root, OVERLAY) == "applied"
    import shutil
    stale = tmp_path / "stale"
    shutil.copytree(patched_root / "sglang", stale / "sglang")
    victim = next(p for p in (REPO / "overlay" / "0.5.14").rglob("*.py"))
    (stale / victim.relative_to(REPO / "overlay" / "0.5.14")).write_text("# an older overlay\n")
    assert doctor.overlay_state(stale, OVERLAY) == "outdated"
    victim_path = stale / victim.relative_to(REPO / "overlay" / "0.5.14")
    victim_path.unlink()
    assert doctor.overlay_state(stale, OVERLAY) == "partial"


def test_bundle_gate_without_a_gpu_is_one_line(tmp_path, pristine_root):
    site = tmp_path / "site"
    (site / "trees").mkdir(parents=True)
    (site / "trees" / "pinned").symlink_to(pristine_root)
    (site / "common").mkdir()
    lines = []
    rc = doctor.gate_bundle(Path(sys.executable), site, "pinned", log=lines.append)
    if doctor.gather(Path(sys.prefix), target=tmp_path).gpus:
        pytest.skip("a GPU is visible here")
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("doctor: no CUDA GPU visible to torch"), lines
    lines.clear()
    assert doctor.gate_bundle(Path(sys.executable), site, "patched", log=lines.append) == 1
    assert lines[0].startswith("doctor: ") and "trees/patched" in lines[0]


def test_cli_gate_takes_the_tree(tmp_path):
    result = run_doctor("--gate", "--tree", "pinned", "--venv", str(tmp_path / "absent"))
    assert result.returncode == 1 and result.stdout.startswith("doctor: no sglang environment")
