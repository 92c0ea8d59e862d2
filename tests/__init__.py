"""The CPU test suite (make test); tests/gpu/ holds the GPU tests (make test-gpu). A package, so test modules
import their shared fixtures as tests.NAME and the shared harness as harness.NAME (pytest.ini: pythonpath)."""
