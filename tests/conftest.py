"""Shared fixtures. Tests that need a GPU carry the `gpu` marker and are skipped without one."""

import contextlib
import os

import pytest

from flame.runtime.device import cuda_available


@contextlib.contextmanager
def on_device(name: str):
    """flame's default device `name` inside the block, and the one before it afterwards."""
    import flame

    prev = flame.get_device()
    flame.set_device(name)
    try:
        yield
    finally:
        flame.set_device(prev)


def pytest_addoption(parser):
    parser.addoption("--fuzz-seconds", type=float, default=0,
                     help="draw fresh random programs for this many seconds (tests/frontend/test_random_programs.py) "
                          "instead of the fixed seeds; prints how many ran and each failure's seed and smallest "
                          "failing program")


def pytest_configure(config):
    """Under pytest-xdist the workers share the CPUs: each gets its share of NVRTC compile processes
    (flame.codegen.nvrtc_pool), unless FLAME_NVRTC_PROCESSES says otherwise."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers > 1:
        os.environ.setdefault("FLAME_NVRTC_PROCESSES", str(max(1, (os.cpu_count() or 1) // workers)))


def _gpu_count() -> int:
    if not cuda_available():
        return 0
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def pytest_collection_modifyitems(config, items):
    gpus = _gpu_count()
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `PYTHONPATH=. python3 -m pytest -m gpu` on one)")
    skip_multi = pytest.mark.skip(reason=f"needs 2 CUDA GPUs, this machine has {gpus} (run "
                                         f"`PYTHONPATH=. python3 -m pytest -m multigpu` on one with 2 or more)")
    for item in items:
        if "gpu" in item.keywords and not gpus:
            item.add_marker(skip)
        elif "multigpu" in item.keywords and gpus < 2:
            item.add_marker(skip_multi)


@pytest.fixture(autouse=True)
def _reference_device(request, monkeypatch):
    """CPU tests run on the reference executor unless marked gpu."""
    from flame.runtime import device

    want = "cuda" if "gpu" in request.keywords else "reference"
    monkeypatch.setattr(device, "_chosen", [want])
    device.executor.cache_clear()
    yield
    device.executor.cache_clear()


@pytest.fixture
def cuda_target(monkeypatch):
    """Plan for the CUDA backend (its fusion, its library calls, its kernels) whatever executor runs
    the plan: on a CPU host the reference executor runs the GPU's plan, and a test can compile the
    plan's kernel sources with NVRTC."""
    from flame import compiler

    cuda = compiler.capabilities("cuda")
    monkeypatch.setattr(compiler, "capabilities", lambda name: cuda)
    monkeypatch.setattr(compiler, "_target", lambda *settings: cuda)  # not a Target cached before the test
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())


@pytest.fixture
def determinism_settings(monkeypatch):
    """flame.use_deterministic_algorithms and backends.cudnn.deterministic off, and as they were afterwards."""
    from flame.runtime import determinism

    monkeypatch.setattr(determinism, "_MODE", [""])
    monkeypatch.setattr(determinism, "_CUDNN", [False])


@pytest.fixture(autouse=True)
def _no_plan_cache(monkeypatch):
    """The persistent plan cache is off unless a test turns it on (with a directory of its own): tests
    patch passes and settings its key cannot see, and must not load what another test run stored."""
    monkeypatch.setenv("FLAME_CACHE_SIZE", "0")
