"""P7 benchmark: the MMA sparse decode call with a TP rank's real query heads against the same call
padded to 64 heads (what the pinned MQALayer.forward sends at TP > 1), on one GPU.

    PATCHKIT_CACHE=$PWD/.carry python3 -m bench.kernels.bench_unpadded_heads [--out DIR] [--line NAME]

8 / 16 / 32 heads are one rank's share of DeepSeek-V4-Flash's 64 at TP = 8 / 4 / 2; each shape is a
c4 layer's call (window 128 + top-512 compressed tokens, 256- and 64-token pages). Timing and inputs
are bench/kernels/bench_mma_decode.py's: a CUDA graph of ROTATE calls on their own q / indices over multi-GB
KV pools (KV from HBM), replayed. The padded call gets the same q in its first heads, junk in the
other 56, and the sink zero-padded, as the model builds them. Accuracy: each call's real-head output
against an fp32 reference computed here from the same gathered FP8 tokens (relative Frobenius error),
and the padded call's output against the unpadded one's.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from bench.kernels import bench_mma_decode as B  # pools, inputs, graph timing, the line's P1 kernel
from harness.line_files import command_lock
from serving import REPO

PADDED = 64


LINE_FILES = (B.KERNEL,)   # what the bench reads, resolved per line (harness/line_files.py)


def dequant_tokens(pool: torch.Tensor, page: int, idx: torch.Tensor) -> torch.Tensor:
    """fp32 [rows, n, 512] of the tokens idx [rows, n] (all valid) in the DSv4 page layout."""
    pg, off = (idx // page).long(), (idx % page).long()
    base = off * 576
    cols = torch.arange(576, device=pool.device)
    raw = pool[pg[..., None], base[..., None] + cols]                       # [rows, n, 576] bytes
    nope = raw[..., :448].contiguous().view(torch.float8_e4m3fn).float()
    rope = raw[..., 448:].contiguous().view(torch.bfloat16).float()
    sc = pool[pg[..., None], page * 576 + off[..., None] * 8 + torch.arange(7, device=pool.device)]
    scale = torch.pow(2.0, sc.float() - 127.0)
    nope = (nope.view(*nope.shape[:-1], 7, 64) * scale[..., None]).flatten(-2)
    return torch.cat([nope, rope], dim=-1)


def reference_fp32(inp, i: int) -> torch.Tensor:
    """fp32 attention of input set i with the sink: [B, H, 512]."""
    s, d = inp.shape, inp.sets[i]
    kv = dequant_tokens(inp.pool, s.page, d["indices"][:, 0])
    if s.extra_topk:
        kv = torch.cat([kv, dequant_tokens(inp.extra_pool, s.extra_page, d["extra_indices"][:, 0])], dim=1)
    q = d["q"][:, 0].float()
    scores = torch.einsum("bhd,btd->bht", q, kv) * B.SCALE
    lse = torch.logaddexp(torch.logsumexp(scores, -1), inp.sink[None, :])
    return torch.einsum("bht,btd->bhd", torch.exp(scores - lse[..., None]), kv)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "build" / "bench"), help="where the JSON goes")
    ap.add_argument("--line", help="the release line of pin.lock whose P1 kernel runs (default: the newest, or PATCHKIT_LINE)")
    args = ap.parse_args()
    lock = command_lock(args.line)     # a wrong --line: one line, nothing made
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    B.print_header()
    mma = B.load_ours(lock)
    gen = torch.Generator(device="cuda").manual_seed(0)
    pools = {256: B.make_pool(16384, 256, gen), 64: B.make_pool(32768, 64, gen)}

    rows = []
    for H in (8, 16, 32):
        for batch in (1, 16, 64, 128):
            s = B.Shape(batch, H, 128, 512)
            inp = B.Inputs(s, (pools[s.page], pools[s.extra_page]), gen)
            # the padded call: q's heads first, then junk, in one [B, 1, 64, 512] buffer; sink zero-padded
            padded_q = []
            for d in inp.sets:
                q = torch.randn(batch, 1, PADDED, 512, device="cuda", generator=gen).to(torch.bfloat16) * 50
                q[:, :, :H] = d["q"]
                padded_q.append(q)
            sink64 = torch.zeros(PADDED, device="cuda")
            sink64[:H] = inp.sink

            def real(i):
                return mma.flash_mla_sparse_decode_mma(*inp.args(i))

            def padded(i):
                a = list(inp.args(i))
                a[0], a[4] = padded_q[i], sink64
                return mma.flash_mla_sparse_decode_mma(*a)

            ref = reference_fp32(inp, 0)
            out_real, out_pad = real(0)[0][:, 0], padded(0)[0][:, 0, :H]
            row = {
                "H": H, "B": batch,
                "real_us": B.graph_time_us([lambda i=i: real(i) for i in range(B.ROTATE)]),
                "padded_us": B.graph_time_us([lambda i=i: padded(i) for i in range(B.ROTATE)]),
                "real_rel_err": rel(out_real, ref), "padded_rel_err": rel(out_pad, ref),
                "real_vs_padded": rel(out_real, out_pad),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            del inp, padded_q

    (out_dir / "bench_p7_heads.json").write_text(json.dumps({"rows": rows}, indent=1))
    print()
    print("| heads (TP) | batch | padded to 64 (us) | real heads (us) | speed-up | rel err padded | rel err real | real vs padded |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['H']} (TP={64 // r['H']}) | {r['B']} | {r['padded_us']:.1f} | {r['real_us']:.1f} | "
              f"{r['padded_us'] / r['real_us']:.2f}x | {r['padded_rel_err']:.1e} | {r['real_rel_err']:.1e} | "
              f"{r['real_vs_padded']:.1e} |")


if __name__ == "__main__":
    main()
