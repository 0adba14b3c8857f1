"""Which executor runs eager ops and compiled graphs: "cuda" when a GPU is usable, else "reference"
(with a one-line notice). `flame.set_device` or env FLAME_DEVICE choose explicitly."""

from __future__ import annotations

import os
import sys
from functools import lru_cache

from flame.errors import FlameError

DEVICES = ("cuda", "reference")
_chosen: list[str] = []  # the process-wide choice, set once (like torch's default device)


@lru_cache(maxsize=1)
def cuda_available() -> bool:
    """True when CuPy imports and sees at least one GPU. Never raises."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def set_device(name: str) -> None:
    """Choose the executor for eager ops and newly compiled functions: "cuda" or "reference"."""
    if name not in DEVICES:
        raise FlameError(f"unknown device {name!r}; expected one of {DEVICES}")
    if name == "cuda" and not cuda_available():
        raise FlameError("device 'cuda' requested but no usable GPU was found (is CuPy installed and a "
                         "driver present?)")
    _chosen[:] = [name]
    executor.cache_clear()


def get_device() -> str:
    if _chosen:
        return _chosen[0]
    env = os.environ.get("FLAME_DEVICE")
    if env:
        set_device(env)
        return env
    if cuda_available():
        _chosen[:] = ["cuda"]
    else:
        print("flame: no usable GPU found; running on the NumPy reference executor", file=sys.stderr)
        _chosen[:] = ["reference"]
    return _chosen[0]


@lru_cache(maxsize=2)
def executor_for(name: str):
    """A (cached) executor by name, whatever the current device."""
    if name == "cuda":
        from flame.runtime.cuda import CudaExecutor

        return CudaExecutor()
    from flame.runtime.reference import ReferenceExecutor

    return ReferenceExecutor()


@lru_cache(maxsize=1)
def executor():
    """The executor of the current device (cached; set_device clears it)."""
    return executor_for(get_device())
