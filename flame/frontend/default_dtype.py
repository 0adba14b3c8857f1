"""The default floating dtype, as torch.set_default_dtype / torch.get_default_dtype: f32 until set.

It is the dtype of a floating tensor made without a dtype (flame.tensor of Python floats, zeros, ones,
empty, full with a float fill, rand, randn, arange with float bounds, linspace, logspace, eye, nn layers'
parameters and buffers), of a Python float in type promotion (an integer or bool tensor times 1.5) and
of an integer tensor promoted by a floating op (true division, exp, sqrt ...). Like PyTorch's it is one
setting of the process, not of a thread. A tensor of known dtype (a NumPy float64 array, an f32 tensor's
*_like) keeps its own.

Inside @flame.compile the default the body read is part of the trace: a call after the default changed
traces again (or reuses a trace made under the new default), as torch.compile guards on it."""

from __future__ import annotations

from flame.errors import DTypeError, TraceError
from flame.frontend.context import current_trace, user_location
from flame.ir.dtypes import FLOAT_DTYPES, DType, dtype_of, f32

_default: DType = f32
_WHAT = "the default dtype (flame.set_default_dtype)"


def set_default_dtype(d: DType, /) -> None:
    """Make d (flame.float32, float64, float16 or bfloat16) the default floating dtype, as
    torch.set_default_dtype; any other dtype, or anything that is not a flame dtype (a string, a NumPy
    or Python type), raises a TypeError as PyTorch's does."""
    global _default
    if current_trace.get() is not None:  # a Python side effect a replay of the trace would not repeat
        raise TraceError(
            f"set_default_dtype inside a compiled function: set the default before calling it (a "
            f"call after it changes traces again)\n  at {user_location()}"
        )
    if not isinstance(d, DType):
        raise DTypeError(
            f"set_default_dtype: invalid dtype object {d!r}: only floating-point types are supported "
            f"as the default type (pass flame.float32, flame.float64, flame.float16 or "
            f"flame.bfloat16)\n  at {user_location()}"
        )
    if d not in FLOAT_DTYPES:
        raise DTypeError(
            f"set_default_dtype: {d!r}: only floating-point types are supported as the default type "
            f"(flame.float32, flame.float64, flame.float16 or flame.bfloat16)\n  at {user_location()}"
        )
    _default = d


def _current() -> DType:
    return _default


def get_default_dtype() -> DType:
    """The default floating dtype (flame.float32 until set_default_dtype changes it), as
    torch.get_default_dtype. Read while @flame.compile traces, it becomes a guard of the trace."""
    trace = current_trace.get()
    if trace is None:
        return _default
    return trace.read_python(_WHAT, _current)


def float_dtype(dtype) -> DType:
    """A factory's `dtype=` argument as a DType: the default floating dtype where it is None."""
    if dtype is None:
        return get_default_dtype()
    return dtype_of(dtype)


def floating(dt: DType) -> DType:
    """dt where it is a floating dtype, else the default one: the dtype PyTorch computes a floating op
    (true division, exp, atan2 ...) of integer or bool inputs in."""
    return dt if dt.is_float else get_default_dtype()


def as_floating(x):
    """Tensor x itself where it is of a floating dtype, else x converted to the default floating dtype."""
    return x if x.dtype.is_float else x.to(get_default_dtype())
