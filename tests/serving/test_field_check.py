"""apply.py field-check on a CPU machine: the refusal without CUDA, the report's schema, each row that cannot run
saying why, the scrub of host, user and serial, the stated shape list and the routing rule. The stages' numbers are
the release's own code (the pinned 0.5.14 tree's sparse decode through its flash_mla_with_kvcache_sm120) where a
row runs; the one stand-in is the card's hardware query (a CPU machine has none)."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from patchkit.engine import Engine
from serving import field_check as F, field_kernels as K, field_report, field_rows as R
from tests.conftest import REPO

TODAY = dt.date(2026, 12, 7)


def fake_torch(name="NVIDIA H800", cc=(9, 0)):
    """torch's answers about a card (a hardware query), nothing else."""
    props = types.SimpleNamespace(name=name, major=cc[0], minor=cc[1], multi_processor_count=132,
                                  total_memory=80 * 2 ** 30)
    cuda = types.SimpleNamespace(get_device_properties=lambda i: props, device_count=lambda: 1)
    return types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(cuda="12.9"))


class MissingCall(K.InstalledCall):
    """The line's call where sglang is not installed: find_spec's own answer, no stand-in."""


def run_report(tmp_path, line="0.5.23", torch=None, source=None, **kw) -> dict:
    engine = Engine.from_repo(REPO, read_only=True, line=line)
    report = F.new_report(engine.patch_set(), line, TODAY)
    said = []
    F.run(report, source or MissingCall(R.LINES[line]), torch or fake_torch(), tmp_path, said.append,
          attestation_line="attestation: none", **kw)
    report["said"] = said
    return report


def test_refused_without_cuda_in_one_line_exit_2(tmp_path):
    """The CPU test venv's torch sees no GPU: one line on stderr, exit 2, nothing written."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "apply.py", "field-check", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("field-check: expected a CUDA GPU visible to torch") and "found none" in proc.stderr
    assert not out.exists()


def test_every_row_that_cannot_run_says_why_and_the_report_is_written(tmp_path):
    """No sglang here: every kernel row is skipped as 'kernel missing' (the indexer's too); the 0.5.23 release path
    as not sm_12x on an sm_90 card; the server for want of MODEL."""
    report = run_report(tmp_path)
    st = report["stages"]
    assert len(st["p1"]) == len(R.p1_rows())
    for name in ("p1", "graphs"):
        assert st[name] and all(r["status"] == "skipped" and r["reason"].startswith("kernel missing:")
                                and R.LINES["0.5.23"].module in r["reason"] for r in st[name]), st[name][0]
    assert all(r["reason"].startswith("not sm_12x (sm_90): FlashInfer's sm_120 kernels") for r in st["release"])
    assert st["routing"]["status"] == "skipped" and "kernel missing" in st["routing"]["reason"]
    assert len(st["indexer"]) == len(R.indexer_shapes()) * len(R.INDEXER_KINDS)
    deepgemm = [r for r in st["indexer"] if r["kind"] == "DeepGEMM fp4 paged MQA logits"]
    assert deepgemm and all(r["reason"] == R.deepgemm_fp4_reason("9.0") for r in deepgemm)
    assert all(r["status"] == "skipped" and r["reason"].startswith("kernel missing: ModuleNotFoundError")
               for r in st["indexer"] if r not in deepgemm)   # no sglang here: the V4.1 indexer functions do not import
    assert st["server"] == {"status": "skipped", "reason": "no MODEL=path given"}
    assert report["said"][0] == "field-check: machine" and any("not sm_12x" in s for s in report["said"])
    js, md = F.write_report(report, tmp_path, [])
    assert js.name == "field-report-nvidia-h800-2026-12-07.json" and md.suffix == ".md"
    data = json.loads(js.read_text())
    assert field_report._problem(data) is None      # the schema ingest holds every report to
    assert data["machine"]["sm_count"] == 132 and data["machine"]["versions"]["sglang"] is None
    assert data["header"] == F.header_lines()
    text = md.read_text()
    for line in F.header_lines():
        assert line in text
    assert "none has run" not in text or R.NONE_ON_SM12X in text


def test_the_header_names_the_stages_never_run_here_and_no_sm12x_run():
    header = " ".join(F.header_lines())
    for what in R.NEVER_RAN_HERE.values():
        assert what in header
    assert "No stage of field-check has run on an sm_12x card" in header
    assert set(R.NEVER_RAN_HERE) <= set(R.STAGES)


def test_the_time_budget_spent_is_each_rows_reason(tmp_path):
    report = run_report(tmp_path, kernel_budget=-1)
    assert all(r["reason"].startswith("the kernel stages' time budget") for r in report["stages"]["p1"])


def test_no_host_user_path_or_serial_in_the_report(tmp_path, monkeypatch):
    report = run_report(tmp_path)
    home = os.path.expanduser("~")
    secret_dir = str(Path.cwd() / "private-checkout")
    uuid = "GPU-1a2b3c4d-1111-2222-3333-444455556666"
    report["stages"]["p1"][0]["reason"] = f"kernel missing: {home}/x.py on {os.uname().nodename} {uuid}"
    report["stages"]["p1"][1]["reason"] = f"Serial Number: 1324021012345 in {secret_dir}"
    js, md = F.write_report(report, tmp_path / "out", F.private_words())
    for path in (js, md):
        text = path.read_text()
        for word in (home, os.uname().nodename, uuid, "1324021012345", secret_dir):
            assert word not in text, (path.name, word)
        assert "<scrubbed>" in text and "<serial>" in text


def test_the_stated_shape_list():
    rows = R.p1_rows()
    assert {r.model for r in rows} == {"V4-Flash", "V4.1-Flash"}
    assert {r.heads for r in rows} == {8, 16, 32, 64}
    for model, extra in R.MODELS.items():
        for heads in (8, 16, 32, 64):
            mine = [r for r in rows if r.model == model and r.heads == heads]
            assert {r.rows for r in mine if r.kind == "decode"} >= {1, 2, 4, 8, 16, 32, 64, 128}
            assert {r.rows for r in mine if r.kind == "verify"} == {7, 56, 224}       # block + 1 per request
            assert {r.rows for r in mine if r.kind == "draft-extend"} and {r.rows for r in mine if r.kind == "prefill"} == {2048}
            assert {r.extra_topk for r in mine} == {extra} and {r.topk for r in mine} == {128}
    assert {r.page for r in rows} == {256, 64}
    assert len({r.label for r in rows}) == len(rows)


def test_checked_rows_keep_the_empty_rows_and_stay_bounded():
    assert K.checked_rows(7) == list(range(7))
    big = K.checked_rows(2048)
    assert len(big) <= R.CHECKED_ROWS and {0, 1, 2047} <= set(big)


@pytest.mark.parametrize("timings,want", [
    ([], ()),
    ([{"rows": 1, "p1_ms": 1.0, "p1_pass": True, "other_ms": 2.0, "other_pass": True}], ()),
    ([{"rows": n, "p1_ms": 2.0, "p1_pass": True, "other_ms": 1.0, "other_pass": True} for n in (56, 64, 128)]
     + [{"rows": 224, "p1_ms": 1.0, "p1_pass": True, "other_ms": 2.0, "other_pass": True}],
     ((56, 128, "flashinfer"),)),
    ([{"rows": 8, "p1_ms": 1.0, "p1_pass": False, "other_ms": 2.0, "other_pass": True},
      {"rows": 16, "p1_ms": 1.0, "p1_pass": True, "other_ms": 2.0, "other_pass": True},
      {"rows": 32, "p1_ms": 3.0, "p1_pass": True, "other_ms": 2.0, "other_pass": False}],
     ((8, 8, "flashinfer"),)),
])
def test_the_routing_rule_on_a_cards_rows(timings, want):
    """P1 keeps a row count where it passed and is not slower; the release's path takes one where it passed and P1
    is slower or failed; adjacent counts merge; a path that failed never takes a range."""
    assert R.implied_routes(timings) == want


def test_a_row_runs_the_releases_own_call_against_float64(pristine_root, monkeypatch):
    """One small row through the pinned 0.5.14 tree's flash_mla_with_kvcache_sm120 (its torch path,
    SGLANG_SM120_TRITON_FLASHMLA=0, as the release's path of the stage): the float64 check passes it, with a
    time."""
    monkeypatch.setattr(K, "DEVICE", "cpu")
    tree_file = pristine_root / "sglang/srt/layers/attention/flash_mla_sm120.py"

    class TreeCall(K.InstalledCall):
        def origin(self):
            return str(tree_file)

    line = R.LineCall(R.LINES["0.5.14"].module, "SGLANG_SM120_TRITON_FLASHMLA", "1", "0", "torch", False, False)
    row = R.Row("tiny", "V4-Flash", "decode", 3, 8, 16, 32, 64, 2)
    said = []
    (p1,), (got,) = K.stage_rows(TreeCall(line), [row], {"cc": "9.0", "sm": "sm_90"}, K.Budget(600), said.append)
    assert p1["status"] == "skipped" and p1["reason"].startswith("kernel missing:")    # "1": the Triton module
    assert got["status"] == "pass" and got["ran"], got
    assert got["err_f64"] < 1e-2 and got["ms"] > 0 and got["checked_rows"] == 3
    assert said == [f"  p1 tiny: {K._brief(p1)}", f"  release tiny: {K._brief(got)}"]


def test_a_wrong_kernel_fails_its_row(pristine_root, monkeypatch):
    """The check is not vacuous: the release's torch path with its softmax scale doubled fails the row."""
    monkeypatch.setattr(K, "DEVICE", "cpu")
    tree_file = pristine_root / "sglang/srt/layers/attention/flash_mla_sm120.py"

    class Doubled(K.InstalledCall):
        def origin(self):
            return str(tree_file)

        def load(self, backend):
            module = super().load(backend)
            inner = module.flash_mla_with_kvcache_sm120
            module.flash_mla_with_kvcache_sm120 = lambda **kw: inner(**{**kw, "softmax_scale": 2 * kw["softmax_scale"]})
            return module

    line = R.LineCall(R.LINES["0.5.14"].module, "SGLANG_SM120_TRITON_FLASHMLA", "1", "0", "torch", False, False)
    row = R.Row("tiny", "V4-Flash", "decode", 3, 8, 16, 32, 64, 2)
    _, (result,) = K.stage_rows(Doubled(line), [row], {"cc": "9.0", "sm": "sm_90"}, K.Budget(600), lambda s: None)
    assert result["status"] == "fail" and result["err_f64"] > 1.2e-2


# -- the indexer stage (serving/field_indexer.py; its numbers: tests/line_0_5_23/test_field_indexer.py) ----------

def test_the_indexer_shapes_are_v41s():
    """Decode B 1/8/48 and DSPARK verify B x 7 rows at a 4K and a 64K context, with the index heads, head dim, top-k
    and candidate blocks of tests/line_0_5_23/test_v41_startup.py's V4.1-Flash fixture."""
    from tests.line_0_5_23.test_v41_startup import PUBLISHED_TEXT as PUBLISHED, VERIFY_ROWS

    shapes = R.indexer_shapes()
    assert {(s.kind, s.requests, s.per_request) for s in shapes} == {
        ("decode", b, 1) for b in (1, 8, 48)} | {("verify", b, VERIFY_ROWS) for b in (1, 8, 48)}
    assert {s.context for s in shapes} == {4096, 65536}
    assert len(shapes) == 12 and len({s.label for s in shapes}) == 12
    assert [s.context for s in shapes] == sorted(s.context for s in shapes)      # the smaller context first
    assert (R.V41_INDEX_HEADS, R.V41_INDEX_DIM, R.V41_INDEX_TOPK, R.V41_TOPK_BLOCKS, R.V41_BLOCK) == (
        PUBLISHED["index_n_heads"], PUBLISHED["index_head_dim"], PUBLISHED["index_topk"],
        PUBLISHED["candidate_topk_blocks"], PUBLISHED["candidate_block_size"])
    assert R.V41_INDEX_PAGE == 64 and R.INDEXER_KINDS == (
        "torch reference", "DeepGEMM fp4 paged MQA logits", "candidate blocks")


@pytest.mark.parametrize("cc,runs", [((9, 0), False), ((8, 9), False), ((10, 0), True), ((12, 0), True),
                                     ((12, 1), True)])
def test_the_deepgemm_rows_reason_comes_from_the_cards_capability(tmp_path, monkeypatch, cc, runs):
    """The stage's own rule on the capability the machine stage reads (the card's hardware query faked): DeepGEMM's
    fp4 paged logits need sm_100 or sm_12x; elsewhere each DeepGEMM row says so and the report goes on."""
    from serving import field_indexer as FI

    sglang_present = types.SimpleNamespace(indexer_parts=lambda: FI.IndexerParts(
        where="here", quantize=None, store=None, dequant=None, scores=None,
        deep_gemm=lambda: __import__("deep_gemm_absent_here")))
    report = run_report(tmp_path, torch=fake_torch(cc=cc), source=_Calls(sglang_present))
    reason = R.deepgemm_fp4_reason(report["machine"]["cc"])
    deepgemm = [r for r in report["stages"]["indexer"] if r["kind"] == "DeepGEMM fp4 paged MQA logits"]
    assert len(deepgemm) == len(R.indexer_shapes())
    if runs:
        assert reason is None
        assert all(r["reason"].startswith("kernel missing: ModuleNotFoundError") for r in deepgemm)
    else:
        assert reason == (f"not run: needs sm_100 or sm_12x (DeepGEMM's fp4 paged MQA-logits kernel is built for "
                          f"those alone; this card is sm_{cc[0]}{cc[1]})")
        assert all(r["status"] == "skipped" and r["reason"] == reason for r in deepgemm)


class _Calls(MissingCall):
    """The line's call where sglang is not installed, with the given indexer functions."""

    def __init__(self, indexer):
        super().__init__(R.LINES["0.5.23"])
        self.indexer_parts = indexer.indexer_parts


def test_the_indexer_rows_in_the_json_and_markdown_report(tmp_path):
    report = run_report(tmp_path)
    rows = report["stages"]["indexer"]
    js, md = F.write_report(report, tmp_path, [])
    data = json.loads(js.read_text())
    assert data["stages"]["indexer"] == rows and field_report._problem(data) is None
    first = data["stages"]["indexer"][0]
    assert {"label", "kind", "shape", "requests", "per_request", "context", "rows", "status", "reason"} <= set(first)
    assert [r["kind"] for r in rows[:3]] == list(R.INDEXER_KINDS)
    assert data["thresholds"]["indexer_reference_vs_f64"] > 0
    assert set(data["thresholds"]["indexer_deepgemm_vs_f32_reference"]) == {"torch.float32", "torch.bfloat16"}
    assert data["stage_order"].index("indexer") < data["stage_order"].index("server")
    text = md.read_text()
    section = text.split("## indexer\n", 1)[1].split("\n## ", 1)[0]
    assert f"0 of {len(rows)} rows pass; {len(rows)} skipped (each says why)." in section
    assert "| label | status | reason |" in section and f"| {rows[0]['label']} | skipped | kernel missing" in section
    assert f"| {rows[1]['label']} | skipped | not run: needs sm_100 or sm_12x" in section
    # the indexer runs after the graphs and before the P1 rows, so a short budget keeps it
    said = report["said"]
    assert said.index(next(s for s in said if s.startswith("field-check: graphs"))) < said.index(
        next(s for s in said if s.startswith("field-check: indexer"))) < said.index(
        next(s for s in said if s.startswith("field-check: p1 and release")))


def test_an_sglang_without_the_v41_indexer_is_another_line(tmp_path):
    """The 0.5.14 line's sglang has no V4.1 indexer modules: every indexer row says it is not installed on this
    line (the import's own error: sglang importable, its submodule not); no sglang at all stays 'kernel missing'."""
    def missing(name):
        def load():
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return types.SimpleNamespace(indexer_parts=load)

    report = run_report(tmp_path, source=_Calls(missing("sglang.kernels.ops.quantization")))
    rows = report["stages"]["indexer"]
    others = [r for r in rows if r["kind"] != "DeepGEMM fp4 paged MQA logits"]
    assert others and all(r["reason"] == "not installed on this line: the installed sglang has no "
                          "sglang.kernels.ops.quantization (DeepSeek-V4.1's indexer)" for r in others)
    report = run_report(tmp_path, source=_Calls(missing("sglang")))
    assert all(r["reason"].startswith("kernel missing: ModuleNotFoundError") for r in report["stages"]["indexer"]
               if r["kind"] != "DeepGEMM fp4 paged MQA logits")
