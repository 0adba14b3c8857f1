"""custom_fwd / custom_bwd (torch.amp's): decorators for the forward and backward of a flame.autograd.Function
under autocast. custom_fwd records the autocast state the forward ran in on ctx (and with cast_inputs runs
the forward with autocast off, on floating inputs cast to that dtype); custom_bwd runs the backward in
the forward's autocast state."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from flame.frontend.autocast import autocast, get_autocast_dtype, is_autocast_enabled
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import f64

__all__ = ["custom_bwd", "custom_fwd"]


def _check_device_type(device_type: Any) -> None:
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")


def _cast(value: Any, dtype: Any) -> Any:
    """value with its floating tensors other than float64 cast to dtype, through lists, tuples, mappings
    and other iterables (strings and arrays pass through), as torch's autocast _cast."""
    if isinstance(value, Tensor):
        return value.to(dtype) if value.dtype.is_float and value.dtype != f64 else value
    if isinstance(value, (str, bytes, np.ndarray)):
        return value
    if isinstance(value, Mapping):
        return {_cast(k, dtype): _cast(v, dtype) for k, v in value.items()}
    if isinstance(value, Iterable):
        cast = (_cast(v, dtype) for v in value)
        return type(value)(cast) if isinstance(value, (list, tuple)) else cast
    return value


def custom_fwd(fwd: Callable | None = None, *, device_type: str, cast_inputs: Any = None) -> Callable:
    """Decorate a Function's forward(ctx, ...): ctx keeps the autocast dtype and whether autocast was on
    (for custom_bwd). With cast_inputs, inside an enabled region the floating tensor arguments (float64
    excepted) are cast to it and the forward runs with autocast off; outside a region nothing changes."""
    _check_device_type(device_type)
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        args[0]._dtype = get_autocast_dtype(device_type)
        if cast_inputs is None:
            args[0]._fwd_used_autocast = is_autocast_enabled(device_type)
            return fwd(*args, **kwargs)
        enabled = is_autocast_enabled(device_type)
        args[0]._fwd_used_autocast = False
        if not enabled:
            return fwd(*args, **kwargs)
        with autocast(device_type, enabled=False):
            return fwd(*_cast(args, cast_inputs), **_cast(kwargs, cast_inputs))

    return decorate_fwd


def custom_bwd(bwd: Callable | None = None, *, device_type: str) -> Callable:
    """Decorate a Function's backward(ctx, ...): it runs in the autocast state its custom_fwd forward saw."""
    _check_device_type(device_type)
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        with autocast(device_type, dtype=args[0]._dtype, enabled=args[0]._fwd_used_autocast):
            return bwd(*args, **kwargs)

    return decorate_bwd
