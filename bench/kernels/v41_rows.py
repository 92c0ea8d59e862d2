"""The query rows DeepSeek-V4.1-Flash hands a layer per forward as users serve it (DSPARK speculative decoding,
chunked prefill): the row set the P1 and P3 benches time with `--rows v41`.

- decode: a batch of B requests, one row each (B 1-128: CUDA-graph batch sizes);
- target verify: B requests x 6 or 7 tokens (a DSPARK draft block of 5-6 plus the target's own token), one row
  per token, for B 1-64;
- prefill: a chunk of 2048 (the chunked-prefill size of the field reports) or 8192 tokens.
"""
from __future__ import annotations

DECODE = (1, 2, 4, 8, 16, 32, 64, 128)
VERIFY_BATCHES = (1, 2, 4, 8, 16, 32, 64)
VERIFY_TOKENS = (6, 7)
PREFILL = (2048, 8192)
WINDOW = 128                    # the sliding window every layer reads
EXTRA_TOPKS = (512, 1024)       # V4.1's index top-k: the compressed tokens a sparse layer reads beside it


def v41_rows() -> list[tuple[int, str, str]]:
    """(rows, label, kind) in ascending rows: decode B<n>, verify B<n>x<t> (n*t rows), prefill P<n>; a row count
    two kinds share is kept once, under the kind listed first (decode, verify, prefill)."""
    rows = [(b, f"B{b}", "decode") for b in DECODE]
    rows += [(b * t, f"B{b}x{t}", "verify") for b in VERIFY_BATCHES for t in VERIFY_TOKENS]
    rows += [(n, f"P{n}", "prefill") for n in PREFILL]
    seen, out = set(), []
    for r in sorted(rows, key=lambda r: r[0]):      # stable: among equal counts, the first kind listed stays
        if r[0] not in seen:
            seen.add(r[0])
            out.append(r)
    return out
