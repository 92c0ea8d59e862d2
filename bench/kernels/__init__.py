"""Kernel benches: one kernel call timed by CUDA-graph replay beside the kernels it replaces or competes with
(`python3 -m bench.kernels.NAME`), their shared pools and timing (decode_timing), and FlashInfer's sm_120
decode built as a peer (peers/)."""
