"""Kernel variants and probes kept for the numbers the design notes cite (bench/notes/); run as
`python3 -m bench.experiments.NAME` from the checkout root."""
