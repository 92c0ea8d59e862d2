"""DeepSeek-V4.1-Flash's candidate layers timed on a GPU, one CUDA graph per layer call (the release captures its
decode and verify forwards), raw output written to RESULTS_DIR:

    python3 -m bench.kernels.v41_candidate_gpu RESULTS_DIR --slice build/carry-slice-0.5.23 [--budget 200]


What runs, every function compiled out of SGLang 0.5.23's own files (a tree, or `make carry-slice`'s payload):
- generic: the release's `DenseBlocksBackend.publish_decode` (the source layer) and `consume_decode` (a consumer)
  with `scoring.decode_scores`' torch branch (the one every GPU but sm_90 takes: `get_platform().is_sm90` answered
  False, the only hardware query stubbed), `fp4_index_logits_decode`, `select_candidate_block_ids`,
  `topk_among_blocks`, `select_decode` / `write_decode`;
- real length (what of it runs without DeepGEMM and SGLang's JIT modules): STAND-IN logits for DeepGEMM's
  paged fp4 MQA logits, the release's sm_90 Triton scorer `fp4_index_logits_paged` (each row's real length,
  68 B of key and 4 B of fp32 logit per position, like DeepGEMM's, but each row reads its own keys where
  DeepGEMM reads a request's keys once for its next_n rows); the consumer then runs the release's
  `topk_among_blocks`; the source's `amax_topk_blocks` and top-k v2 are JIT CUDA modules this machine cannot
  build, so the source's selection is a STAND-IN: the release's torch `select_candidate_block_ids` and
  `topk(512)` over the graph's width (an upper bound on the JIT kernels at real length).
The model's shapes: 32 index heads x 128, fp4 keys in 64-slot pages, ratio 1, index top-k 512, 2048 blocks of 8.
Inputs are random; the times do not depend on the values. Per step = the source + 4 consumers.
"""
from __future__ import annotations

import __future__
import argparse
import ast
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from bench.kernels.v41_candidate_cost import (
    BATCHES,
    V41_FLASH,
    VERIFY_TOKENS,
    Shape,
    candidate_layers,
    layer_bytes,
)

SCORING = "sglang/srt/layers/attention/dsv4/v41_indexer/scoring.py"
DENSE_BLOCKS = "sglang/srt/layers/attention/dsv4/v41_indexer/dense_blocks.py"
CANDIDATE_BLOCKS = "sglang/kernels/ops/attention/dsv4/candidate_blocks.py"
FP4_INDEXER = "sglang/kernels/ops/attention/dsv4/fp4_indexer.py"
JIT_COMMON = "sglang/kernels/jit/utils/common.py"
DEEP_SELECT = "sglang/kernels/ops/attention/deep_select.py"
TREE_FILES = (SCORING, DENSE_BLOCKS, CANDIDATE_BLOCKS, FP4_INDEXER, JIT_COMMON, DEEP_SELECT)
INDEX_PAGE = 64                 # index-K pool slots per page
KEY_BYTES = 68
GRAPH_CONTEXTS = ((131072, 131072), (1048576, 1048576), (1048576, 131072))     # (graph width W, real length L)


def gpu_shapes(contexts=GRAPH_CONTEXTS, batches=BATCHES) -> list[dict]:
    """Every shape the GPU mode times: width, real length, requests, rows, kind; widest last."""
    out = []
    for w, real in contexts:
        for kind, per in (("decode", 1), ("verify", VERIFY_TOKENS)):
            out += [dict(width=w, real=real, requests=b, rows=b * per, kind=kind) for b in batches]
    return out


# --------------------------------------------------------------------------- the release's functions, from files


def load_defs(path: Path, names: list[str], namespace: dict) -> dict:
    """Compile the named top-level definitions of `path` and the top-level definitions they read, transitively,
    into `namespace` (names it already holds are the caller's stand-ins and are not taken from the file); the
    file's own line numbers and name are kept, so Triton reads each kernel's source from the file."""
    tree = ast.parse(Path(path).read_text())
    defs = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            defs[node.targets[0].id] = node
    picked, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in picked or (name in namespace and name not in names):
            continue
        if name not in defs:
            raise KeyError(f"{path}: expected a top-level definition {name}, found none")
        picked.add(name)
        todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs]
    body = [node for node in tree.body if any(node is defs[n] for n in picked)]
    # a module name for what is defined here: Triton's code generator reads each called kernel's __module__ (taken
    # from the globals' __name__) as a string, and a namespace without one fails the first compile on a GPU
    namespace.setdefault("__name__", "_release_" + Path(path).stem)
    code = compile(ast.Module(body=body, type_ignores=[]), str(path), "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)
    return namespace


class _Record:
    """A data holder in place of the release's msgspec structs (DecodeScores, BlockIds...): fields only."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class _BlockIds(_Record):
    """dense_blocks.BlockIds' fields and defaults."""

    rows_per_request = None
    decode_mask = None


def release_functions(tree: Path) -> dict:
    """The release's generic decode path and the kernels and selections both paths use, from `tree`."""
    import typing

    import torch
    import torch.nn.functional as F
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    tree = Path(tree)
    common = load_defs(tree / JIT_COMMON, ["aligned_new_empty"], {"torch": torch, "Sequence": typing.Sequence})
    select = load_defs(tree / DEEP_SELECT, ["get_input_stride_alignment_bytes", "_INPUT_STRIDE_ALIGNMENT_BYTES"], {})
    fp4 = load_defs(tree / FP4_INDEXER, ["fp4_index_logits_decode", "fp4_index_logits_paged"],
                    {"torch": torch, "triton": triton, "tl": tl, "libdevice": libdevice,
                     "aligned_new_empty": common["aligned_new_empty"],
                     "get_input_stride_alignment_bytes": select["get_input_stride_alignment_bytes"]})
    blocks = load_defs(tree / CANDIDATE_BLOCKS, ["select_candidate_block_ids", "topk_among_blocks"],
                       {"torch": torch, "F": F, "Optional": typing.Optional, "Union": typing.Union})
    holders = {"DecodeScores": _Record, "PagedDecodeScores": type("PagedDecodeScores", (_Record,), {}),
               "BlockIds": _BlockIds}
    scoring = load_defs(tree / SCORING, ["decode_scores", "select_decode", "write_decode"], {
        "torch": torch, "Optional": typing.Optional, **holders,
        # the one hardware query: every GPU but sm_90 takes the torch branch (sm_12x among them)
        "get_platform": lambda: SimpleNamespace(is_sm90=False),
        "fp4_index_logits_decode": fp4["fp4_index_logits_decode"],
        "fp4_index_logits_paged": fp4["fp4_index_logits_paged"],
    })
    dense = load_defs(tree / DENSE_BLOCKS, ["DenseBlocksBackend"], {
        "torch": torch, "Optional": typing.Optional, "List": typing.List, "Tuple": typing.Tuple, **holders,
        **{k: scoring[k] for k in ("decode_scores", "select_decode", "write_decode")},
        **{k: blocks[k] for k in ("select_candidate_block_ids", "topk_among_blocks")},
    })
    return {"DenseBlocksBackend": dense["DenseBlocksBackend"], "decode_scores": scoring["decode_scores"],
            "fp4_index_logits_paged": fp4["fp4_index_logits_paged"],
            **{k: blocks[k] for k in ("select_candidate_block_ids", "topk_among_blocks")}}


# --------------------------------------------------------------------------- inputs


class _Indexer:
    """The projections are the same in every path and left out: fixed roped queries and head weights."""

    def __init__(self, q, weights, cfg):
        self.q, self.w = q, weights
        self.n_local_heads = cfg["index_n_heads"]
        self.index_head_dim = cfg["index_head_dim"]
        self.index_topk = cfg["index_topk"]

    def queries(self, q_lora, freqs):
        return self.q

    def head_weights(self, x):
        return self.w


class _Inputs(_Record):
    def reset_outputs(self) -> None:          # the release's DecodeInputs.reset_outputs
        self.out_page_indices.fill_(-1)


class Pool:
    """An index-K pool of `requests` x `width` fp4 keys (random bytes, 64-slot pages) and its req_to_token."""

    def __init__(self, requests: int, width: int, device):
        import torch

        self.width = width
        self.table = torch.randint(0, 256, (requests * width // INDEX_PAGE, INDEX_PAGE * KEY_BYTES),
                                   dtype=torch.uint8, device=device)
        self.table[:, INDEX_PAGE * (KEY_BYTES - 4):] = 127      # each page's e8m0 scales: 1.0, finite keys
        self.req_to_token = torch.arange(requests * width, dtype=torch.int32, device=device).view(requests, width)

    def get_index_k_with_scale_buffer(self, layer_id):
        return self.table


def make_inputs(pool: Pool, shape: dict, cfg: dict = V41_FLASH, seed: int = 0):
    import torch

    dev = pool.table.device
    g = torch.Generator(device=dev).manual_seed(seed)
    rows, per = shape["rows"], shape["rows"] // shape["requests"]
    heads, dim = cfg["index_n_heads"], cfg["index_head_dim"]
    q = (torch.randn(rows, heads, dim, generator=g, device=dev) * 0.1).to(torch.bfloat16)
    w = torch.rand(rows, heads, generator=g, device=dev).to(torch.bfloat16)
    req = torch.arange(shape["requests"], device=dev).repeat_interleave(per)
    pos = (shape["real"] - per + torch.arange(per, device=dev)).repeat(shape["requests"]).to(torch.int64)
    return _Inputs(indexer=_Indexer(q, w, cfg), layer_id=0, compress_ratio=1,
                   freqs_cis=torch.zeros(pool.width, 1, device=dev), x=None, q_lora=None, positions=pos,
                   req_rows=req, paged_metadata=SimpleNamespace(max_compressed_seq_len=pool.width),
                   is_verify=per > 1, out_page_indices=torch.full((rows, cfg["index_topk"]), -1, dtype=torch.int32,
                                                                  device=dev))


# --------------------------------------------------------------------------- the two paths' layer calls


def generic_calls(fns: dict, pool: Pool, inputs, cfg: dict = V41_FLASH):
    """(source, consumer) callables of the release's generic path; the consumer reads a source's blocks."""
    backend = fns["DenseBlocksBackend"](token_to_kv_pool=pool, req_to_token=pool.req_to_token,
                                        candidate_topk_blocks=cfg["candidate_topk_blocks"],
                                        candidate_block_size=cfg["candidate_block_size"], use_deep_gemm_prefill=False)
    published = backend.publish_decode(inputs)
    return (lambda: backend.publish_decode(inputs)), (lambda: backend.consume_decode(inputs, published))


def real_length_calls(fns: dict, pool: Pool, inputs, cfg: dict = V41_FLASH):
    """(source, consumer) callables of the real-length path as far as it runs here (STAND-INs: module doc)."""
    import torch

    lens = ((inputs.positions + 1) // 1).to(torch.int32)
    blk, k = cfg["candidate_block_size"], cfg["index_topk"]
    width = pool.width
    columns = torch.arange(width, device=lens.device)

    def logits():
        return fns["fp4_index_logits_paged"](inputs.indexer.q, inputs.indexer.w, inputs.req_rows, pool.req_to_token,
                                             lens, pool.table, INDEX_PAGE, width, 1)

    def source():
        s = logits().masked_fill(columns[None, :] >= lens[:, None], -torch.inf)     # stand-in selection
        blocks = fns["select_candidate_block_ids"](s, lens[:, None], topk_blocks=cfg["candidate_topk_blocks"],
                                                   block_size=blk)
        inputs.out_page_indices[:, :k] = s.topk(k, dim=-1, sorted=False).indices
        return blocks

    published = source()

    def consumer():
        idx = fns["topk_among_blocks"](logits(), lens, published, k, block_size=blk)
        inputs.out_page_indices[:, :k] = idx

    return source, consumer


# --------------------------------------------------------------------------- timing


def time_graph(fn, iters: int) -> float:
    """ms per replay of fn captured in a CUDA graph (bench.timing)."""
    from bench.timing import capture_graph, event_ms

    graph = capture_graph(fn)
    try:
        return event_ms(graph.replay, iters, warmup=2)
    finally:
        del graph


def copy_gbps(nbytes: int = 1 << 30) -> float:
    """The machine's device-to-device copy rate (read + write), GB/s: the floor the computed bytes divide by."""
    import torch

    from bench.timing import event_ms

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    best = min(event_ms(lambda: dst.copy_(src), 10) for _ in range(3))
    return 2 * nbytes / best / 1e6


def computed_rates(row: dict) -> dict:
    """The computed bytes of the generic path's calls (v41_candidate_cost) over their measured times, GB/s."""
    lb = layer_bytes(Shape(row["width"], row["real"], row["requests"], row["rows"], row["kind"]))
    return {f"generic {part} GB/s": lb[f"generic {part}"] / row[f"generic {part} ms"] / 1e6
            for part in ("source", "consumer") if f"generic {part} ms" in row}


def install_slice(payload: Path) -> Path:
    """A `make carry-slice` payload unpacked into a scratch folder: its pristine tree."""
    from bench.airgapped.carry import install

    into = Path(tempfile.mkdtemp(prefix="v41-candidate-slice-"))
    install(payload, into)
    return into / "pristine"


def run(results: Path, tree: Path | None, budget: float, payload: Path | None = None) -> int:
    import torch
    import triton

    from bench.command import command_line

    if not torch.cuda.is_available():
        print("v41_candidate_gpu: expected a CUDA GPU, found none", file=sys.stderr)
        return 2
    if tree is None and payload is not None:
        tree = install_slice(payload)
    if tree is None:
        from harness.dsv4_indexer_cases import upstream_trees

        tree = upstream_trees()[0]
    missing = [f for f in TREE_FILES if not (Path(tree) / f).is_file()]
    if missing:
        print(f"v41_candidate_gpu: expected {missing[0]} in {tree}, found no such file", file=sys.stderr)
        return 2
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    fns = release_functions(tree)
    _, consumers = candidate_layers()
    dev = torch.device("cuda")
    head = [f"MEASURED: {command_line()}",
            f"gpu {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}); "
            f"python {platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}; "
            f"tree {tree}",
            "real-length columns: STAND-IN logits (fp4_index_logits_paged for DeepGEMM's) and, at the source, "
            "STAND-IN selection (torch at graph width for amax_topk_blocks + top-k v2); see the module doc",
            f"per step = source + {len(consumers)} consumers; ms per CUDA-graph replay, mean of the timed replays"]
    copy = copy_gbps()
    head.append(f"device-to-device copy: {copy:.0f} GB/s (read + write); the generic path's computed bytes over its "
                "measured time in the GB/s columns")
    print("\n".join(head), flush=True)
    rows, skipped, start = [], [], time.monotonic()
    pools: dict[int, Pool] = {}
    for shape in gpu_shapes():
        if time.monotonic() - start > budget:
            skipped.append(shape)
            continue
        w = shape["width"]
        if w not in pools:
            pools.clear()
            torch.cuda.empty_cache()
            pools[w] = Pool(max(BATCHES), w, dev)
        pool = pools[w]
        inputs = make_inputs(pool, shape)
        big = shape["rows"] * w > (1 << 26)
        iters = 5 if big else 20
        row = dict(shape)
        try:
            for path, calls in (("generic", generic_calls), ("real", real_length_calls)):
                src, cons = calls(fns, pool, inputs)
                row[f"{path} source ms"] = time_graph(src, iters)
                row[f"{path} consumer ms"] = time_graph(cons, iters)
                row[f"{path} step ms"] = row[f"{path} source ms"] + len(consumers) * row[f"{path} consumer ms"]
                del src, cons
                torch.cuda.empty_cache()
        except torch.cuda.OutOfMemoryError as exc:       # one shape's failure; the rest still run
            row["error"] = f"out of memory: {str(exc).splitlines()[0]}"
            torch.cuda.empty_cache()
        row.update(computed_rates(row))
        rows.append(row)
        print(json.dumps(row), flush=True)
    lines = head + ["", "| width | real | step | rows | generic src | generic cons | generic step | real src* "
                        "| real cons* | real step* | generic src GB/s | generic cons GB/s |",
                    "|---|---|---|---:|" + "---:|" * 8]
    for r in rows:
        label = f"B{r['requests']}" + (f"x{VERIFY_TOKENS}" if r["kind"] == "verify" else "")
        cells = [f"{r[k]:.3f}" if k in r else "-" for k in
                 ("generic source ms", "generic consumer ms", "generic step ms", "real source ms",
                  "real consumer ms", "real step ms")]
        cells += [f"{r[k]:.0f}" if k in r else "-" for k in ("generic source GB/s", "generic consumer GB/s")]
        lines.append(f"| {r['width'] >> 10}K | {r['real'] >> 10}K | {label} | {r['rows']} | " + " | ".join(cells) + " |")
    lines += ["", "* STAND-INs (module doc). " + (f"skipped past the {budget:g} s budget: {len(skipped)} shapes"
                                                  if skipped else "every shape ran")
              + f"; shapes took {time.monotonic() - start:.0f} s"]
    (results / "v41-candidate-gpu.txt").write_text("\n".join(lines) + "\n")
    (results / "v41-candidate-gpu.json").write_text(json.dumps({"head": head, "rows": rows, "skipped": skipped},
                                                               indent=1) + "\n")
    print("\n".join(lines[len(head):]))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, metavar="RESULTS_DIR", help="where the raw output goes (created)")
    ap.add_argument("--slice", type=Path, metavar="PAYLOAD", help="`make carry-slice LINE=0.5.23`'s payload "
                    "(build/carry-slice-0.5.23), unpacked into a scratch folder")
    ap.add_argument("--tree", type=Path, help="an unpacked pristine 0.5.23 tree instead (default: built from the "
                    "pinned wheel in patchkit's cache)")
    ap.add_argument("--budget", type=float, default=200.0, help="seconds of shapes; the rest are listed as skipped")
    args = ap.parse_args(argv)
    return run(args.results, args.tree, args.budget, args.slice)


if __name__ == "__main__":
    sys.exit(main())
