"""Anomaly detection, torch.autograd's anomaly mode: `set_detect_anomaly(mode, check_nan=True)` (called
on its own, or as a `with` block that puts the previous mode back), `detect_anomaly(check_nan=True)` (a
`with` block or a decorator), `is_anomaly_enabled()`, `is_anomaly_check_nan_enabled()`. The mode is one
process-wide setting, as PyTorch's.

With the mode on and check_nan, a gradient computation that returns NaN raises flame.errors.AnomalyError
at its first such step, before any later step runs (an optimizer's update in the same compiled step
included), naming the backward op, its kernel and output, and the user's forward line it derives from
(runtime/anomaly.py, a step hook of the reference executor). It covers eager backward() and
autograd.grad and @flame.compile'd steps holding a backward. The CUDA executor replays CUDA graphs
without a hook between kernels: there such a computation raises AnomalyError up front, pointing at
the reference executor and at `flame check --nan`."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from contextlib import nullcontext

from flame.errors import AnomalyError
from flame.frontend.context import user_location, user_stacklevel
from flame.ir.graph import Op
from flame.runtime.anomaly import AnomalyWatch, has_nan, watches
from flame.runtime.device import executor
from flame.runtime.reference import watch_steps

MODE = [False, True]  # [enabled, check_nan]: one process-wide setting, as torch's


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection is on (torch.is_anomaly_enabled)."""
    return MODE[0]


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly detection, when on, raises for a NaN a backward computation returns
    (torch.is_anomaly_check_nan_enabled)."""
    return MODE[1]


def _set(mode: bool, check_nan: bool) -> None:
    MODE[:] = [bool(mode), bool(check_nan)]


class set_detect_anomaly:
    """torch.autograd.set_detect_anomaly: turn anomaly detection on or off from here on, or, as a `with`
    block, for the block (its end puts back the mode before the call)."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self.prev = tuple(MODE)
        _set(mode, check_nan)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> bool:
        _set(*self.prev)
        return False


class detect_anomaly:
    """torch.autograd.detect_anomaly: anomaly detection on inside a `with` block or a decorated function's
    body (check_nan: raise for a NaN a backward computation returns), the previous mode back after it.
    Warns, as PyTorch does, that the mode slows the program down."""

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = check_nan
        self.prev: list[tuple] = []
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only "
                      "be enabled for debugging.", stacklevel=user_stacklevel())

    def __enter__(self) -> None:
        self.prev.append(tuple(MODE))
        _set(True, self.check_nan)

    def __exit__(self, *exc) -> bool:
        _set(*self.prev.pop())
        return False

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return run


def _checking() -> bool:
    return MODE[0] and MODE[1]


def watching(plan):
    """The block that runs plan: with anomaly detection checking NaN and plan computing gradients, under
    the reference executor's anomaly watch (on the CUDA executor, an AnomalyError instead); else nothing."""
    if not _checking() or not watches(plan):
        return nullcontext()
    if executor().name != "reference":
        raise AnomalyError(
            f"anomaly detection (flame.autograd.detect_anomaly / set_detect_anomaly) checks each step of a "
            f"gradient computation, which runs on the reference executor only: the {executor().name} executor "
            f"replays CUDA graphs with nothing between their kernels. Run it with FLAME_DEVICE=reference (or "
            f"flame.set_device('reference')), or find the first kernel writing NaN or Inf on the GPU with "
            f"`flame check --nan script.py`; set_detect_anomaly(False) runs it unchecked\n  at {user_location()}")
    return watch_steps(AnomalyWatch())


def check_eager_gradient(op: Op, result) -> None:
    """A gradient op run eagerly (backward with create_graph=True): raise AnomalyError where it returned NaN."""
    if _checking() and has_nan(executor().to_numpy(result._data)):
        forward = op.loc.splitlines()[0] if op.loc else ""
        raise AnomalyError(f"Function '{op.name}' of the backward (run eagerly, create_graph=True) returned nan "
                           f"values in its output {result.dtype.name}{list(result.shape)}\n  the gradient of the "
                           f"forward line: {forward or '(not known)'}\n  (flame.autograd anomaly detection: "
                           f"detect_anomaly / set_detect_anomaly)")
