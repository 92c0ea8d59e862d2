"""Issue 23 against the real SGLang release wheels where each bug was found (the release is in the test id).

One dry run carries the series to 0.5.23 keeping P7 (superseded there) so its clean merge is checked; the
rest reads single files out of the 0.5.19 / 0.5.20 / 0.5.23 wheels. The matrix tests
(tests/rebase/test_rebase_matrix.py) cover the 0.5.16 and 0.5.23 columns, renames, supersession and pins.
"""
from __future__ import annotations

import json

import pytest

from tests.conftest import LOCK, REPO, pristine_wheel
from tests.rebase_cases import repo_copy
from tests.rebase_release_cases import DISPATCHER, INDEXER, MODEL, P1, P4, P7, patch_of, reader, release, result_of
from tests.rebase.test_rebase import cli
from patchkit.conditions import (conditions_of, parse_condition, pin_problems, replacements_of, stale_reasons,
                                 superseded_by, unreached_reasons)
from patchkit.series import load_series

SERIES = load_series("sglang", REPO / "patches" / "0.5.14", REPO / "overlay" / "0.5.14", LOCK.upstream("sglang").root)


@pytest.fixture(scope="module")
def keep_p7_0_5_23(tmp_path_factory):
    repo = repo_copy(tmp_path_factory.mktemp("keep") / "repo")
    report = repo / "report.json"
    p7 = patch_of(SERIES, P7).name
    proc = cli(repo, "rebase", "--to", "0.5.23", "--keep", f"{p7}=measured faster than upstream's", "--dry-run",
               "--json", str(report))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return json.loads(report.read_text()), proc


@pytest.mark.slow   # one dry run onto 0.5.23 (about three minutes on the 2-core CI machine)
def test_0_5_23_p7_clean_merge_that_shadows_the_base_class_method_stops_like_a_conflict(keep_p7_0_5_23):
    report, proc = keep_p7_0_5_23
    r = result_of(report, P7, SERIES)
    assert r["kept"] == "measured faster than upstream's" and r["superseded"], r
    assert r["result"] == "conflict" and MODEL in r["conflicted"], r
    shadow = [d for d in r["detail"] if "MQALayer._kernel_num_heads" in d]
    assert shadow and "MqaAttentionBase._kernel_num_heads" in shadow[0], r["detail"]
    # both places named: where the merge adds it, and where the release defines it
    assert shadow[0].count(f"{MODEL}:") == 2, shadow[0]
    # the hunk uses a name only a conflicted hunk of the patch defines
    assert any("_SM120_DECODE_REAL_HEADS" in d and "nothing" in d for d in r["detail"]), r["detail"]


def test_0_5_23_flashinfer_must_satisfy_the_release(tmp_path):
    repo = repo_copy(tmp_path / "repo")
    proc = cli(repo, "rebase", "--to", "0.5.23", "--to", "flashinfer=0.6.12", "--dry-run")
    lines = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    # a usage refusal (exit 2) that says how to go on anyway, like --to flashinfer=X alone (test_rebase_other_upstream)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "flashinfer-python==0.7.2" in lines[0] and "found 0.6.12" in lines[0], lines[0]
    assert "sglang 0.5.23 accepts" in lines[0] and "--force" in lines[0], lines[0]


def test_0_5_19_p4_condition_reads_the_setting_where_it_moved():
    """0.5.19 moved the sm_120 block that forces the TileLang indexer from server_args.py to
    arg_groups/model_hook.py: the old condition said 'reached', the fixed one says 'not reached'."""
    new = reader(release("0.5.19"))
    old = parse_condition("Unreached-If", r"sglang/srt/server_args.py ~ SGLANG_OPT_USE_TILELANG_INDEXER\.set\(True\)")
    assert unreached_reasons([old], new) == []            # the rot: silently "reached"
    fixed = conditions_of(patch_of(SERIES, P4).trailers)
    assert fixed and stale_reasons(fixed, new) == []
    reasons = unreached_reasons(fixed, new)
    assert reasons and "sglang/srt/arg_groups/model_hook.py" in reasons[0], reasons


def test_0_5_19_a_condition_whose_anchor_is_gone_is_stale_not_reached():
    new = reader(release("0.5.19"))
    cond = parse_condition("Unreached-If", r"sglang/srt/server_args.py ~ TILELANG_INDEXER\.set\(True\) "
                                           r"[anchor: SGLANG_FP8_PAGED_MQA_LOGITS_TORCH.set(True)]")
    assert unreached_reasons([cond], new) == []
    stale = stale_reasons([cond], new)
    assert len(stale) == 1 and "server_args.py" in stale[0] and "anchor" in stale[0], stale


def test_0_5_23_a_condition_whose_file_is_gone_is_stale():
    new = reader(release("0.5.23"))
    cond = parse_condition("Reached-If", f"{DISPATCHER} ~ flash_mla_sparse_decode_triton")
    assert unreached_reasons([cond], new) == []
    assert stale_reasons([cond], new) == [f"stale condition '{cond.text()}': {DISPATCHER} is gone"]


def test_0_5_20_p7_replacement_matches_on_the_release_and_not_on_the_pin():
    p7 = replacements_of(patch_of(SERIES, P7).trailers)
    assert p7, "P7 carries no Superseded-By trailer"
    assert superseded_by(p7, reader(pristine_wheel("sglang"))) is None
    assert superseded_by(p7, reader(release("0.5.19"))) is None         # no _kernel_num_heads before 0.5.20
    assert superseded_by(p7, reader(release("0.5.20"))) == [f"{MODEL}:MqaAttentionBase._kernel_num_heads"]


def test_every_condition_names_a_file_and_anchor_that_exist_on_the_pin(pristine_root):
    read = lambda rel: (pristine_root / rel).read_bytes() if (pristine_root / rel).is_file() else None
    for p in SERIES.patches:
        assert pin_problems(conditions_of(p.trailers), read) == [], p.name
        assert superseded_by(replacements_of(p.trailers), read) is None, p.name
    bad = parse_condition("Unreached-If", f"{INDEXER} ~ x [anchor: text that is not there]")
    assert pin_problems([bad], read) and "anchor" in pin_problems([bad], read)[0]


def test_0_5_23_runtime_pins_follow_torch_and_an_override_wins():
    """[runtime] torch follows sglang 0.5.23's requirement and triton that torch's; --to torch= overrides, and
    triton then follows the overriding torch's own requirement."""
    from patchkit.rebase.pins import follow
    from patchkit.rebase.requires import pinned_version, requirement, requires_dist

    pins, moved = follow(LOCK, {"sglang": "0.5.23"}, {})
    assert pins.upstreams["flashinfer"] == "0.7.2" and pins.runtime["torch"] == "2.14.1"
    assert pins.runtime["triton"] == "3.8.0"
    assert [m.what for m in moved] == ["sglang", "flashinfer", "[runtime] torch", "[runtime] triton"]
    pins, moved = follow(LOCK, {"sglang": "0.5.23"}, {"torch": "2.13.0"})
    triton = pinned_version(requirement(requires_dist("torch", "2.13.0", LOCK.upstream("sglang").artifact), "triton"))
    # (a CPU-only torch build in a wheelhouse requires no triton: triton then keeps its pin)
    assert pins.runtime["torch"] == "2.13.0" and pins.runtime["triton"] == (triton or LOCK.runtime["triton"]), pins
    assert any(m.why == "--to torch=" for m in moved)
    pins, _ = follow(LOCK, {"sglang": "0.5.23"}, {"torch": "2.14.1", "triton": "3.7.0"})
    assert (pins.runtime["torch"], pins.runtime["triton"]) == ("2.14.1", "3.7.0")


def test_moved_files_are_followed_in_every_trailer_that_names_paths():
    from patchkit.rebase.replay import rewrite_message

    renames = {"a/x.py": "b/x.py", "a/y.py": "c/y.py"}
    message = ("subject\n\nbody\n\nUnreached-If: a/x.py, a/z.py ~ re [anchor: t]\nReached-If: a/y.py ~ r\n"
               'Superseded-By: a/x.py, a/y.py:"text: with colon"\nSuperseded-By: a/y.py:Cls.meth\n')
    assert rewrite_message(message, {}, renames) == (
        "subject\n\nbody\n\nUnreached-If: b/x.py, a/z.py ~ re [anchor: t]\nReached-If: c/y.py ~ r\n"
        'Superseded-By: b/x.py, c/y.py:"text: with colon"\nSuperseded-By: c/y.py:Cls.meth\n')


def test_check_fails_a_condition_anchor_missing_on_the_pin_and_a_replacement_that_matches_there(tmp_path):
    repo = repo_copy(tmp_path / "repo")
    p4, p7 = (repo / "patches" / "0.5.14" / "sglang" / patch_of(SERIES, w).name for w in (P4, P7))
    p4.write_text(p4.read_text().replace("[anchor: SGLANG_FP8_PAGED_MQA_LOGITS_TORCH.set(True)]",
                                         "[anchor: text no release has]", 1))
    p7.write_text(p7.read_text().replace(f"Superseded-By: {MODEL}:MqaAttentionBase._kernel_num_heads",
                                         f"Superseded-By: {MODEL}:MQALayer.forward", 1))
    proc = cli(repo, "check")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {l.split()[1]: l for l in proc.stdout.splitlines() if l.startswith("sglang ")}
    assert "FAIL" in rows[p4.name] and "anchor 'text no release has'" in rows[p4.name], rows[p4.name]
    assert "FAIL" in rows[p7.name] and "Superseded-By already matches on the pin" in rows[p7.name], rows[p7.name]


@pytest.mark.slow   # one real (not dry) rebase onto 0.5.23: about two minutes
def test_0_5_23_continue_refuses_while_the_merge_still_shadows_the_base_class_method(tmp_path):
    """P1 and P7 (which needs P1), P7 kept although superseded: with every text conflict resolved (scripted:
    the release's side kept), P7's clean hunks still redefine MqaAttentionBase._kernel_num_heads in MQALayer,
    so --continue refuses at it."""
    from tests.rebase_cases import resolve_ours

    repo = repo_copy(tmp_path / "repo")
    keep = [patch_of(SERIES, P1), patch_of(SERIES, P7)]
    for f in (repo / "patches" / "0.5.14" / "sglang").glob("*.patch"):
        if f.name not in [p.name for p in keep]:
            f.unlink()
    (repo / "patches" / "0.5.14" / "sglang" / "series").write_text("".join(p.name + "\n" for p in keep))
    for f in (repo / "overlay" / "0.5.14" / "sglang").rglob("*.py"):      # only P1's own overlay file stays
        if f.relative_to(repo / "overlay" / "0.5.14").as_posix() not in keep[0].overlay:
            f.unlink()
    proc = cli(repo, "rebase", "--to", "0.5.23", "--keep", f"{keep[1].name}=kept for the test")
    assert proc.returncode == 1 and "rebase --continue" in proc.stdout, proc.stderr[-2000:] + proc.stdout[-2000:]
    for _ in range(2):
        state = json.loads((repo / "build" / "rebase" / "state.json").read_text())
        for f in state["stopped"]["files"]:
            resolve_ours(repo / "build" / "rebase" / "repos" / "sglang" / f)
        again = cli(repo, "rebase", "--continue")
        if state["stopped"]["index"] == 1:
            break
        assert again.returncode == 1 and "rebase --continue" in again.stdout, again.stderr[-2000:]
    assert state["stopped"]["index"] == 1 and MODEL in state["stopped"]["files"], state["stopped"]
    lines = [l for l in again.stderr.splitlines() if l.startswith("error:")]
    assert again.returncode == 1 and len(lines) == 1, again.stderr[-2000:]
    assert "expected the merged modules consistent" in lines[0] and "_kernel_num_heads" in lines[0], lines[0]
    assert cli(repo, "rebase", "--abort").returncode == 0
