"""The flashinfer_compile tests, run for the 0.5.23 line (pristine_root / patched_root are 0.5.23 + FlashInfer 0.7.2 here)."""
from tests.kernels.test_flashinfer_compile import *  # noqa: F401,F403
