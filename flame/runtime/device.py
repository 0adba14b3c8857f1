"""Which executor runs eager ops and compiled graphs: "cuda" when a GPU is usable, else "reference"
(with a one-time notice through `warnings`, category `flame.DeviceWarning`, also logged to the "flame"
logger at INFO). `flame.set_device` or env FLAME_DEVICE choose explicitly (and then there is no notice).
To silence it: `warnings.filterwarnings("ignore", category=flame.DeviceWarning)`."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from functools import lru_cache

from flame.errors import FlameError

DEVICES = ("cuda", "reference")
_chosen: list[str] = []  # the process-wide choice, set once (like torch's default device)
log = logging.getLogger("flame")


class DeviceWarning(UserWarning):
    """flame chose the device by itself: no usable GPU, so the NumPy reference executor runs."""


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
        msg = "flame: no usable GPU found; running on the NumPy reference executor"
        log.info(msg)
        warnings.warn(msg + " (flame.set_device('reference') or FLAME_DEVICE=reference says so explicitly "
                      "and silences this)", DeviceWarning, stacklevel=_user_stacklevel())
        _chosen[:] = ["reference"]
    return _chosen[0]


def _user_stacklevel() -> int:
    """The stacklevel of the first caller outside the flame package (the user's line that made flame
    choose), for warnings.warn."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


_CPU = ("cpu", "reference")


def device_name(device: object) -> str | None:
    """'cuda' or 'reference' for a PyTorch-style device ("cpu", "cuda", "cuda:0", torch.device(...),
    flame's "reference"), None if `device` does not name a device (a dtype, say)."""
    text = str(getattr(device, "type", device)) if not isinstance(device, str) else device
    if text in _CPU:
        return "reference"
    if re.fullmatch(r"cuda(:\d+)?", text):
        return "cuda"
    return None


def check_device(device: object) -> str:
    """For `.to(device)`: flame keeps every tensor on the process's one device, so naming that device
    is fine ("cpu" is the reference executor) and naming another is a FlameError saying what to do."""
    name = device_name(device)
    if name is None:
        raise FlameError(f"unknown device {device!r}; expected 'cpu', 'cuda', 'cuda:N' or 'reference'")
    current = get_device()
    if name != current:
        where = "the NumPy reference executor, on the CPU" if current == "reference" else "the GPU"
        raise FlameError(f"cannot move to {device!r}: flame runs every tensor on one device per process, here "
                         f"{current!r} ({where}); choose it before creating tensors with "
                         f"flame.set_device({name!r}) or FLAME_DEVICE={name}")
    return name


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
