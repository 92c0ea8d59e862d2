"""GPU benchmarks, run from the checkout root as modules, in rooms by purpose: kernels/ (`python3 -m
bench.kernels.bench_mma_decode`, make bench), server/ (whole servers), airgapped/ (payloads for the GPU machine),
experiments/ (variants not shipped); runs/ holds every run's record and raw output, notes/ the design notes.
What benches share with the tests is harness/; bench never imports tests/."""
