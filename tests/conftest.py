"""Shared fixtures. Tests that need a GPU carry the `gpu` marker and are skipped without one."""

import pytest

from flame.runtime.device import cuda_available


def pytest_addoption(parser):
    parser.addoption("--fuzz-seconds", type=float, default=0,
                     help="run the random-program differential test for this long instead of its fixed budget")


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `PYTHONPATH=. python3 -m pytest -m gpu` on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _reference_device(request, monkeypatch):
    """CPU tests run on the reference executor unless marked gpu."""
    from flame.runtime import device

    want = "cuda" if "gpu" in request.keywords else "reference"
    monkeypatch.setattr(device, "_chosen", [want])
    device.executor.cache_clear()
    yield
    device.executor.cache_clear()
