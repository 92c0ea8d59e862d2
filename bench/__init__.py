"""GPU benchmarks, run from the checkout root as modules: `python3 -m bench.bench_mma_decode` (make bench).
Raw outputs are kept in bench/runs/ (INDEX.md); what they share with the tests is harness/."""
