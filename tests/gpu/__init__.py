"""GPU tests: skipped without CUDA, run on a GPU machine by make test-gpu."""
