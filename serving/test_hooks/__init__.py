"""TEST ONLY: what a server started for a test loads, never the product's path. emulate_sm120 (OVERLAY_EMULATE_SM120=1
and the hooks below, installed in every server process by boxhooks/sitecustomize.py), shadow_decode (each
sparse-decode call checked against the torch reference), dummy_init (weights under which attention matters),
hc_sinkhorn (hc_split_sinkhorn without tilelang). They load one another by path, as siblings: the server's
processes do not have this repository on sys.path."""
