"""Which executor runs eager ops and compiled graphs: "cuda" when a GPU is usable, else "reference"
(with a one-time notice through `warnings`, category `flame.DeviceWarning`, also logged to the "flame"
logger at INFO). `flame.set_device` or env FLAME_DEVICE choose explicitly (and then there is no notice).
To silence it: `warnings.filterwarnings("ignore", category=flame.DeviceWarning)`."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from functools import lru_cache

import numpy as np

from flame._env import env_choice
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
    env = env_choice("FLAME_DEVICE", DEVICES, None)
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


_TYPES = {"cpu": "reference", "cuda": "cuda"}  # device type -> the executor that runs tensors there


class Device:
    """Where a tensor lives, spelled as torch.device: "cpu" (NumPy arrays, run by the reference
    executor) or "cuda" (CuPy arrays, run by the GPU executor). flame runs one executor per process
    (set_device / FLAME_DEVICE), so moving tensors only makes sense towards that executor's device
    (or to "cpu" to read values); see Tensor.to."""

    __slots__ = ("type", "index")

    def __init__(self, spec: object, index: int | None = None):
        if isinstance(spec, Device):
            spec, index = spec.type, spec.index if index is None else index
        text = str(spec)
        if text == "reference":
            text = "cpu"
        kind, _, num = text.partition(":")
        if kind not in _TYPES or (num and not num.isdigit()) or (kind == "cpu" and (num or index)):
            raise FlameError(f"unknown device {spec!r}; expected 'cpu', 'cuda' or 'cuda:N' ('reference' means cpu)")
        self.type = kind
        self.index = int(num) if num else index

    @property
    def executor_name(self) -> str:
        return _TYPES[self.type]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = Device(other)
            except FlameError:
                return False
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"


def is_device(spec: object) -> bool:
    """Whether spec names a device ("cpu", "cuda:0", a Device) rather than a dtype."""
    if isinstance(spec, Device):
        return True
    if not isinstance(spec, str):
        if type(spec).__name__ != "device":  # torch.device("cuda", 0)
            return False
        spec = str(spec)
    try:
        Device(spec)
    except FlameError:
        return False
    return True


def device_of(array) -> Device:
    """The device of an executor array (None: a traced tensor, on the current executor's device)."""
    if array is None:
        return Device("cpu") if get_device() == "reference" else Device("cuda", 0)
    if isinstance(array, np.ndarray):
        return Device("cpu")
    return Device("cuda", int(getattr(getattr(array, "device", None), "id", 0)))


def get_default_device() -> Device:
    """The device new tensors are made on, as torch.get_default_device: the current executor's ("cpu"
    for the reference executor, cuda:0 for the CUDA one)."""
    return device_of(None)


def set_default_device(device) -> None:
    """Make new tensors on `device` (None: the CPU), as torch.set_default_device. flame runs one executor
    per process, so this chooses it, as set_device does: "cpu" the reference executor, "cuda" the GPU
    one (made before the switch, tensors stay on the executor that made them)."""
    want = Device("cpu" if device is None else device)
    if want.type == "cuda" and want.index not in (None, 0):
        raise FlameError(f"set_default_device({str(want)!r}): flame runs on one GPU per process, cuda:0 (choose "
                         f"another with CUDA_VISIBLE_DEVICES)")
    if want.executor_name != get_device():
        set_device(want.executor_name)
