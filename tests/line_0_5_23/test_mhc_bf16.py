"""The mhc_bf16 tests, run for the 0.5.23 line (pristine_root / patched_root are 0.5.23 + FlashInfer 0.7.2 here)."""
from tests.test_mhc_bf16 import *  # noqa: F401,F403
