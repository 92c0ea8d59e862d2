"""Live server, pinned vs patched, from an offline bundle, with the sm_120 branches forced (TEST ONLY).

    OVERLAY_BUNDLE=build/bundle [OVERLAY_LIVE_OUT=dir] python3 -m pytest -q -rA tests/gpu/test_server_live.py

For each tree the real server starts from the bundle (serving/serve_cmd.py bundle mode, the tiny
DSv4 model, random weights with sglang's fixed dummy seed, CUDA graphs on) with
OVERLAY_EMULATE_SM120=1, so on an sm_90 GPU it takes the branches a Blackwell card takes. One
fixed prompt is decoded greedily (temperature 0, ignore_eos, MAX_NEW tokens) through /generate with
logprobs (top TOP_K per step). Checks:

* the server log shows the sm_120 branches were taken: the emulation warning, the sm_120 sparse-
  decode dispatcher entered (backend `triton` = the pinned per-head kernel, `mma` = P1) and the sm_120
  indexer entered (both logged by serving/test_hooks/emulate_sm120.py on their first call);
* the two trees agree: the same tokens, or a first difference only at a near-tie of the pinned run
  (its top-1/top-2 logprob margin <= TIE_NATS), and before it every chosen token's logprob within
  LOGPROB_NATS of the pinned one. Bounds, in nats: LOGPROB_NATS = 0.02, TIE_NATS = 0.02. The patches
  change rounding (P1 bf16 tensor-core dots, P2 bf16 indexer scores, P3 bf16 mixing GEMM), not the
  math; logprob differences far above bf16 rounding mean a wrong result. Every logprob must be finite.
  Caveat: sglang's dummy weights are uniform in +-1e-3, so the logits are close to uniform and
  near-ties are common; the check catches crashes, NaNs and gross errors, not small numeric drift
  (the kernel tests bound that).

Skips without a CUDA GPU or without OVERLAY_BUNDLE (a bundle dir or an installed SITE_ROOT). Server
logs and the decoded sequences go to OVERLAY_LIVE_OUT (default: pytest's tmp dir).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
BUNDLE = os.environ.get("OVERLAY_BUNDLE")
PROMPT = "The capital of France is"
MAX_NEW = 32
TOP_K = 5
LOGPROB_NATS = 0.02
TIE_NATS = 0.02
START_TIMEOUT = float(os.environ.get("OVERLAY_LIVE_START_TIMEOUT", "420"))

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not BUNDLE, reason="needs OVERLAY_BUNDLE=<bundle dir or installed SITE_ROOT>"),
]


def _free_port() -> int:
    """A free port well below 55535: sglang also listens on port + 10000 (its gRPC port), so an ephemeral
    port from the kernel (up to 60999) can make that exceed 65535 and the server refuse to start."""
    from serving import smoke
    return next(p for p in range(30200, 40000) if smoke.port_is_free("127.0.0.1", p)
                and smoke.port_is_free("127.0.0.1", p + 10000))


def serve_and_decode(tree: str, out_dir: Path) -> dict:
    """Start `tree` from the bundle, decode the prompt, stop the server; the log text and the answer."""
    from serving import serve_cmd, smoke

    os.environ["OVERLAY_EMULATE_SM120"] = "1"   # read by serve_cmd.bundle_env into the server's env
    os.environ.pop("TRITON_INTERPRET", None)     # the server compiles its Triton kernels, never interprets them
    args = argparse.Namespace(bundle=Path(BUNDLE), python=None, tree=tree)
    rc, site = serve_cmd.bundle_gate(args)
    assert rc == 0, f"bundle gate refused the {tree} tree (see the doctor line above)"
    port = _free_port()
    launch = serve_cmd.build(python=sys.executable, port=port, bundle_site=site, tree=tree,
                             # batch 1 here: few graphs, quick start; a small KV pool, so the GPU stays shareable
                             extra_args=["--cuda-graph-max-bs-decode", "4", "--max-total-tokens", "65536"])
    log_path = out_dir / f"live-{tree}-server.log"
    print(f"+ {launch.shell()}")
    proc = smoke.start_server(launch, log_path)
    try:
        base = f"http://127.0.0.1:{port}"
        smoke.wait_healthy(base, proc, START_TIMEOUT)
        body = {"text": PROMPT, "return_logprob": True, "top_logprobs_num": TOP_K,
                "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True}}
        answer = smoke.get_json(f"{base}/generate", body)
    except smoke.SmokeFailure as exc:
        pytest.fail(f"{tree}: {exc}\n---- {log_path} ----\n{smoke.log_tail(log_path, 60)}")
    finally:
        left = smoke.stop_server(proc, 20.0)
    assert not left, f"{tree}: server processes {left} survived SIGKILL"
    meta = answer["meta_info"]
    result = {"tree": tree, "text": answer["text"],
              "tokens": [t[1] for t in meta["output_token_logprobs"]],
              "logprobs": [t[0] for t in meta["output_token_logprobs"]],
              "top": [[(t[0], t[1]) for t in step] for step in meta["output_top_logprobs"]]}
    (out_dir / f"live-{tree}.json").write_text(json.dumps(result, indent=1) + "\n")
    result["log"] = log_path.read_text(errors="replace")
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    out = Path(os.environ.get("OVERLAY_LIVE_OUT") or tmp_path_factory.mktemp("live"))
    out.mkdir(parents=True, exist_ok=True)
    return {tree: serve_and_decode(tree, out) for tree in ("pinned", "patched")}


@pytest.mark.parametrize("tree,backend", [("pinned", "triton"), ("patched", "mma")])
def test_server_log_shows_the_sm120_decode_path(runs, tree, backend):
    log = runs[tree]["log"]
    assert "OVERLAY_EMULATE_SM120=1: TEST ONLY -- sm_120 branches forced on" in log
    assert ("sm_120 sparse-decode dispatcher entered: sglang.srt.layers.attention.flash_mla_sm120."
            f"flash_mla_with_kvcache_sm120 (backend {backend})") in log
    assert "sm_120 indexer entered: sglang.srt.layers.attention.dsv4.indexer.fp8_paged_mqa_logits_torch_sm120" in log
    assert len(runs[tree]["tokens"]) == MAX_NEW


def test_greedy_decoding_agrees_between_pinned_and_patched(runs):
    pinned, patched = runs["pinned"], runs["patched"]
    for run in (pinned, patched):   # NaN/inf would slip through max() below
        assert all(math.isfinite(lp) for lp in run["logprobs"]), (run["tree"], run["logprobs"])
    n = MAX_NEW
    first_diff = next((i for i in range(n) if pinned["tokens"][i] != patched["tokens"][i]), None)
    upto = n if first_diff is None else first_diff
    worst = max((abs(a - b) for a, b in zip(pinned["logprobs"][:upto], patched["logprobs"][:upto])), default=0.0)
    report = (f"first differing step: {first_diff}; max |logprob diff| before it: {worst:.2e} nats; "
              f"pinned {pinned['tokens']}; patched {patched['tokens']}")
    print(report)
    assert worst <= LOGPROB_NATS, report
    if first_diff is not None:
        top = sorted((lp for lp, _ in pinned["top"][first_diff]), reverse=True)
        margin = top[0] - top[1]
        assert margin <= TIE_NATS, f"the sequences part at step {first_diff} where pinned's top-2 margin is " \
                                   f"{margin:.3g} nats (> {TIE_NATS}): {report}"
