"""Everything SGLang-specific at run time: install, serve, smoke, doctor and the offline bundle (the product), and
the test-only hooks a server started for a test loads (emulate_sm120, shadow_decode, dummy_init, hc_sinkhorn)."""
from pathlib import Path

# The directory holding pin.lock, patches/ and overlay/: the checkout, or an installed package's shipped data.
# serving/, harness/ and bench/ take it from here, never from their own file's place.
REPO = Path(__file__).resolve().parents[1]
