"""Kernel variants and probes kept for the numbers the design notes cite (docs/*_notes.md); run as
`python3 -m bench.experiments.NAME` from the checkout root."""
