"""bench/server/logprob_compare.py and bench/server/live_compare.py on a CPU: the per-step difference on the common prefix,
the first divergence, the tolerance calibration, and the verdicts (good pairs within, broken pairs out).

Sequences are built from a seeded random next-token distribution per step (as sglang returns them:
sorted top-k (logprob, id)); a second server is the same distributions plus a perturbation of chosen size.
"""
from __future__ import annotations

import json
import math
import random

import pytest

from bench.server import live_compare, logprob_compare as lc

VOCAB = 64


def distribution(rng: random.Random) -> list[float]:
    logits = [rng.gauss(0, 3) for _ in range(VOCAB)]
    z = math.log(sum(math.exp(x) for x in logits))
    return [x - z for x in logits]


def decode(steps: int, seed: int, noise: float = 0.0, noise_seed: int = 99, k: int = 10) -> dict:
    """A greedy sequence with top-k logprobs; `noise` perturbs every logit (then renormalised)."""
    rng, nrng = random.Random(seed), random.Random(noise_seed)
    seq = {"tokens": [], "top": []}
    for _ in range(steps):
        lp = distribution(rng)
        if noise:
            lp = [x + nrng.uniform(-noise, noise) for x in lp]
            z = math.log(sum(math.exp(x) for x in lp))
            lp = [x - z for x in lp]
        ranked = sorted(((x, t) for t, x in enumerate(lp)), reverse=True)
        seq["tokens"].append(ranked[0][1])
        seq["top"].append(ranked[:k])
    return seq


def test_identical_sequences_differ_by_nothing():
    a = decode(32, 1)
    r = lc.compare_sequences(a, a)
    assert r["max_diff"] == 0 and r["first_divergence"] is None and r["compared"] == 32


def test_difference_is_bounded_by_the_perturbation():
    a, b = decode(32, 1), decode(32, 1, noise=1e-3)
    r = lc.compare_sequences(a, b)
    assert 0 < r["max_diff"] <= 4e-3          # each logprob moves by at most 2x the noise (logit + normaliser)


def test_comparison_stops_at_the_first_divergence_and_includes_it():
    a = decode(20, 1)
    b = {"tokens": list(a["tokens"]), "top": [list(s) for s in a["top"]]}
    b["tokens"][7] = a["top"][7][1][1]                     # the runner-up chosen at step 7
    b["top"][12] = [(lp - 5.0, t) for lp, t in a["top"][12]]   # after the divergence: not compared
    r = lc.compare_sequences(a, b)
    assert r["first_divergence"] == 7 and r["compared"] == 8 and r["max_diff"] == 0
    assert r["margin_at_divergence"] == pytest.approx(a["top"][7][0][0] - a["top"][7][1][0])


def test_a_token_missing_from_the_other_top_k_counts_as_at_least_the_gap():
    top_a = [(-0.1, 1), (-2.5, 2), (-3.0, 3)]
    top_b = [(-0.1, 1), (-2.0, 4), (-2.2, 5)]
    # token 4: -2.0 in b, absent from a, whose smallest returned is -3.0: at least 1.0 apart
    # token 2: -2.5 in a, absent from b, whose smallest is -2.2: no bound (0), not an invented difference
    assert lc.step_difference(top_a, top_b, k=2) == pytest.approx(1.0)
    assert lc.step_difference(top_a[:2], [(-0.1, 1), (-2.0, 4)], k=2) == pytest.approx(0.5)


def test_empty_inputs_are_refused_in_one_line():
    with pytest.raises(ValueError, match="expected decoded steps in both sequences, found none"):
        lc.compare_sequences({"tokens": [], "top": []}, {"tokens": [], "top": []})
    with pytest.raises(ValueError, match="expected the same number of sequences, found 1 and 2"):
        lc.compare_runs([decode(2, 1)], [decode(2, 1), decode(2, 2)])


def fake_decodes(noise: dict) -> dict:
    """{variant: {'batch1': [...], 'batch4': [...]}}: the reference torch plus perturbed others."""
    out = {}
    for variant, eps in noise.items():
        out[variant] = {f"batch{b}": [decode(48, seed, noise=eps, noise_seed=hash(variant) % 1000 + seed)
                                      for seed in range(b)] for b in (1, 4)}
    return out


def test_calibrated_tolerances_pass_good_pairs_and_show_the_weights_matter():
    decodes = fake_decodes({"torch": 0.0, "triton": 2e-3, "mma": 2e-3, "pinned": 2e-2,
                            "zero-attn": 1.0, "no-sink": 0.3, "drop-split": 1e-3})
    result = live_compare.evaluate(decodes, [1, 4])
    assert result["tol_kernel"] == pytest.approx(lc.SAFETY * max(r["max_diff"] for r in result["rows"]
                                                                 if r["role"] == "calibrate-kernel"))
    assert result["tol_tree"] > result["tol_kernel"]
    verdicts = {(r["pair"], r["batch"]): r["verdict"] for r in result["rows"]}
    assert verdicts[("mma vs torch", 4)] == "PASS (expected)"
    assert verdicts[("pinned vs patched-mma", 1)] == "PASS (expected)"
    assert verdicts[("attention zeroed vs torch", 4)] == verdicts[("sink ignored vs torch", 1)] == "outside"
    assert verdicts[("one split dropped vs torch", 1)] == "within"      # reported, not judged
    assert result["all_as_expected"]
    assert "logprobs: all as expected" in live_compare.table(result)


def test_a_correct_kernel_outside_or_attention_that_does_not_matter_is_not_as_expected():
    drifting = live_compare.evaluate(fake_decodes({"torch": 0.0, "triton": 2e-3, "mma": 0.5, "zero-attn": 1.0}),
                                     [1, 4])
    row = next(r for r in drifting["rows"] if r["pair"] == "mma vs torch")
    assert row["verdict"] == "FAIL (UNEXPECTED)" and not drifting["all_as_expected"]
    flat = live_compare.evaluate(fake_decodes({"torch": 0.0, "triton": 2e-3, "mma": 2e-3, "zero-attn": 1e-3}),
                                 [1, 4])
    assert {r["verdict"] for r in flat["rows"] if r["role"] == "weights-kernel"} == {"within"}
    assert not flat["all_as_expected"]
    assert "logprobs: NOT all as expected" in live_compare.table(flat)


def reading(error, calls=100):
    return {"error": error, "calls": calls}


def test_kernel_check_calibrates_on_triton_passes_correct_kernels_and_fails_broken_ones():
    result = live_compare.evaluate_shadow({"triton": reading(3e-3), "pinned": reading(3e-3), "mma": reading(2e-3),
                                           "torch": reading(0.0), "zero-attn": reading(1.0),
                                           "no-sink": reading(0.08), "drop-split": reading(0.3)})
    assert result["tolerance"] == pytest.approx(lc.SAFETY * 3e-3)
    verdicts = {r["variant"]: r["verdict"] for r in result["rows"]}
    assert verdicts == {"triton": "calibration", "pinned": "PASS (expected)", "mma": "PASS (expected)",
                        "torch": "PASS (expected)", "zero-attn": "FAIL (expected)", "no-sink": "FAIL (expected)",
                        "drop-split": "FAIL (expected)"}
    assert result["all_as_expected"] and "kernel check: all as expected" in live_compare.shadow_table(result)


def test_kernel_check_red_cases():
    base = {"triton": reading(3e-3), "mma": reading(2e-3), "no-sink": reading(0.08)}
    subtle = live_compare.evaluate_shadow({**base, "no-sink": reading(4e-3)})       # a break inside the noise
    assert next(r for r in subtle["rows"] if r["variant"] == "no-sink")["verdict"] == "PASS (UNEXPECTED)"
    assert not subtle["all_as_expected"]
    wrong = live_compare.evaluate_shadow({**base, "mma": reading(float("inf"))})     # NaN output: infinite
    assert next(r for r in wrong["rows"] if r["variant"] == "mma")["verdict"] == "FAIL (UNEXPECTED)"
    assert not live_compare.evaluate_shadow({**base, "mma": None})["all_as_expected"]   # no reading
    assert not live_compare.evaluate_shadow({"mma": reading(2e-3)})["all_as_expected"]  # no calibration
    assert "kernel check: NOT all as expected" in live_compare.shadow_table(wrong)


def test_sequences_read_sglang_generate_answers():
    step = [[-0.5, 7, None], [-1.5, 9, None]]
    one = {"text": "x", "meta_info": {"output_token_logprobs": [[-0.5, 7, None], [-0.2, 3, None]],
                                      "output_top_logprobs": [step, [[-0.2, 3, None], [-2.0, 4, None]]]}}
    seqs = live_compare.sequences([one, one])
    assert len(seqs) == 2 and seqs[0]["tokens"] == [7, 3] and seqs[0]["top"][0] == [(-0.5, 7), (-1.5, 9)]
    assert live_compare.sequences(one)[0]["logprobs"] == [-0.5, -0.2]


def test_prompts_and_request_body_are_fixed():
    p = live_compare.prompts(16)
    assert p == live_compare.prompts(16) and p[0] == live_compare.prompts(1)[0]
    assert all(16 <= t < 496 for row in p for t in row)
    body = live_compare.request_body(p[:1], 256)
    assert body["input_ids"] == p[0] and body["top_logprobs_num"] >= lc.TOP_K
    assert body["sampling_params"] == {"max_new_tokens": 256, "temperature": 0, "ignore_eos": True}
    assert live_compare.request_body(p, 8)["input_ids"] == p


def test_command_line_refuses_bad_input(capsys):
    assert live_compare.main(["--out", "x"]) == 2
    assert "expected --bundle DIR and --out DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        live_compare.parse_args(["--variants", "mma,bogus"])
    assert exc.value.code == 2
    assert "expected variants from pinned, mma" in capsys.readouterr().err


def test_every_server_runs_the_kernel_check_and_only_the_broken_ones_are_broken():
    from serving.test_hooks import emulate_sm120

    variants = {v.name: v for v in live_compare.server_variants(live_compare.parse_args([]))}
    assert set(variants) == set(live_compare.VARIANTS) == set(live_compare.SHADOW_ROLES)
    for name, v in variants.items():
        assert v.env[emulate_sm120.SHADOW_ENV] == "1" and v.env[emulate_sm120.DUMMY_INIT_ENV] == "scaled", name
        broken = v.env.get(emulate_sm120.BREAK_ENV)
        assert (broken is not None) == (live_compare.SHADOW_ROLES[name] == "red"), name


def test_a_comparison_of_nothing_is_not_all_as_expected():
    """No server answered (the first H200 run: every start timed out): nothing was compared, so nothing
    passed. Likewise a broken kernel judged without a tolerance (no calibration pair ran)."""
    result = live_compare.evaluate({}, [1, 16])
    assert result["rows"] == [] and not result["all_as_expected"]
    assert "NOT all as expected" in live_compare.table(result)
    assert not live_compare.evaluate_shadow({})["all_as_expected"]
    only_red = fake_decodes({"torch": 0.0, "zero-attn": 1.0})
    result = live_compare.evaluate(only_red, [1, 4])
    assert result["rows"] and {r["verdict"] for r in result["rows"]} == {"no tolerance"}
    assert not result["all_as_expected"]


def test_the_driver_starts_servers_side_by_side_asks_each_and_stops_them(tmp_path):
    """live_compare's run against fake servers (tests/serve_fake_server.py logprobs mode): every variant's
    decodes written, the comparison table printed, every server process gone afterwards."""
    import sys
    from pathlib import Path

    from bench.server import server_pool
    from serving import serve_cmd

    fake = Path(__file__).resolve().parents[1] / "serve_fake_server.py"
    shifts = {"torch": 0.0, "triton": 1e-3, "mma": 1e-3, "pinned": 1e-2, "zero-attn": 2.0, "no-sink": 1.0,
              "drop-split": 0.5}
    errors = {"torch": 0.0, "triton": 3e-3, "mma": 2e-3, "pinned": 3e-3, "zero-attn": 1.0, "no-sink": 0.1,
              "drop-split": 0.3}
    variants = [server_pool.Variant(v, *live_compare.VARIANTS[v]) for v in shifts]
    servers = server_pool.build(variants, None, sys.executable, tmp_path)
    for s in servers:    # the fake instead of sglang; FAKE_SHIFT plays the variant's numerics
        s.launch = serve_cmd.Launch(argv=[sys.executable, str(fake), "logprobs", "--port", str(s.port)],
                                    env={"FAKE_SHIFT": str(shifts[s.variant.name]),
                                         "FAKE_SHADOW": str(errors[s.variant.name])})
    args = live_compare.parse_args(["--out", str(tmp_path), "--output-len", "24", "--batch", "1,4",
                                    "--start-timeout", "60"])
    rc = live_compare._run(servers, args)
    assert rc == 0
    assert all(s.proc is None for s in servers)
    for v in shifts:
        record = json.loads((tmp_path / f"{v}.json").read_text())
        assert len(record["decodes"]["batch4"]) == 4 and len(record["decodes"]["batch1"][0]["tokens"]) == 24
    result = json.loads((tmp_path / "compare.json").read_text())
    assert result["all_as_expected"] and result["tol_kernel"] > 0
    assert result["kernel_check"]["all_as_expected"] and result["kernel_check"]["tolerance"] == pytest.approx(6e-3)
    assert json.loads((tmp_path / "mma.json").read_text())["shadow"] == {"error": 2e-3, "calls": 6}
    servers_json = json.loads((tmp_path / "servers.json").read_text())
    assert set(servers_json) == set(shifts) and servers_json["torch"]["env"]["SGLANG_SM120_SPARSE_DECODE"] == "torch"


def test_report_on_a_results_folder_writes_nothing(tmp_path, capsys):
    """`--report` re-reads saved runs, committed ones included; it must leave the folder byte-for-byte."""
    from tests.saved_results import report_leaves_folder_as_it_was

    report_leaves_folder_as_it_was("2026-12-03-live-run10/live", tmp_path, "compare.json", "{}\n",
                                   lambda folder: live_compare.main(["--report", str(folder)]))
    assert "all as expected" in capsys.readouterr().out.splitlines()
