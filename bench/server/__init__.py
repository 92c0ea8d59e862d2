"""Server benches: whole SGLang servers started from the offline bundle, driven with requests and compared
(`python3 -m bench.server.NAME`): end-to-end decode, the release's own client commands, live numerics, the
decode kernel's share of a step, and the pool, logprob and trace tools they share."""
