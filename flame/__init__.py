"""flame: a deep-learning compiler for NVIDIA GPUs. Trace PyTorch-style code into an SSA IR,
differentiate it with one autodiff pass, fuse, plan memory and run it as generated CUDA (or on the
NumPy reference executor when there is no GPU)."""

from flame import ir
from flame.errors import CheckpointError, DTypeError, FlameError, ParseError, ShapeError, TraceError, VerifyError
from flame.frontend.autograd import grad, value_and_grad
from flame.frontend.compile import Compiled, compile
from flame.frontend.context import no_grad
from flame.frontend.creation import (
    Generator,
    arange,
    full,
    manual_seed,
    ones,
    ones_like,
    rand,
    randn,
    tensor,
    zeros,
    zeros_like,
)
from flame.frontend.dispatch import apply as _apply
from flame.frontend.tensor import Tensor, matmul
from flame.frontend.tensor import binary as _binary
from flame.ir.dtypes import bf16, boolean, f16, f32, f64, i32, i64
from flame.runtime.device import get_device, set_device

float32, float64, float16, bfloat16, int32, int64, bool_ = f32, f64, f16, bf16, i32, i64, boolean
__version__ = "0.1.0"
__all__ = [
    "CheckpointError", "Compiled", "DTypeError", "FlameError", "Generator", "ParseError", "ShapeError", "Tensor",
    "TraceError", "VerifyError", "arange", "bf16", "bfloat16", "bool_", "boolean", "compile", "f16", "f32", "f64",
    "float16", "float32", "float64", "from_dlpack", "full", "get_device", "grad", "i32", "i64", "int32", "int64",
    "ir", "manual_seed", "matmul", "no_grad", "ones", "ones_like", "rand", "randn", "set_device", "tensor",
    "value_and_grad", "zeros", "zeros_like",
]


def _unary(name: str):
    def op(x: Tensor, *args, **kwargs) -> Tensor:
        return getattr(x if isinstance(x, Tensor) else tensor(x), name)(*args, **kwargs)
    op.__name__ = name
    op.__doc__ = f"flame.{name}(x): elementwise {name}."
    return op


exp, log, sqrt, rsqrt, reciprocal = (_unary(n) for n in ("exp", "log", "sqrt", "rsqrt", "reciprocal"))
sin, cos, tanh, sigmoid, erf = (_unary(n) for n in ("sin", "cos", "tanh", "sigmoid", "erf"))
relu, gelu, silu, leaky_relu = (_unary(n) for n in ("relu", "gelu", "silu", "leaky_relu"))
abs, neg, floor, ceil, round, sign = (_unary(n) for n in ("abs", "neg", "floor", "ceil", "round", "sign"))  # noqa: A001
sum, mean, amax, amin, argmax = (_unary(n) for n in ("sum", "mean", "amax", "amin", "argmax"))  # noqa: A001
reshape, permute, transpose, flip, squeeze, unsqueeze = (
    _unary(n) for n in ("reshape", "permute", "transpose", "flip", "squeeze", "unsqueeze"))
triu, tril, clamp = _unary("triu"), _unary("tril"), _unary("clamp")


def maximum(a, b) -> Tensor:
    return _binary("maximum", a, b)


def minimum(a, b) -> Tensor:
    return _binary("minimum", a, b)


def pow(a, b) -> Tensor:  # noqa: A001
    return _binary("pow", a, b)


def where(cond: Tensor, a, b) -> Tensor:
    """Elementwise cond ? a : b (NumPy broadcasting); a and b are promoted to one dtype."""
    from flame.ir.dtypes import promote

    ts = [x for x in (a, b) if isinstance(x, Tensor)]
    dt = ts[0].dtype if len(ts) == 1 else promote(a.dtype, b.dtype) if ts else None
    if dt is None:
        dt = f32 if any(isinstance(x, float) for x in (a, b)) else i64
        a = full((), a, dt)
    if any(isinstance(x, float) for x in (a, b)) and not dt.is_float:
        dt = f32
    a = a.to(dt) if isinstance(a, Tensor) else a
    b = b.to(dt) if isinstance(b, Tensor) else b
    return _apply("where", cond.to(boolean), a, b)


def cat(tensors, dim: int = 0) -> Tensor:
    """Concatenate along dim (all tensors share one dtype)."""
    tensors = list(tensors)
    return _apply("concat", *tensors, axis=dim % tensors[0].ndim)


concat = cat


def stack(tensors, dim: int = 0) -> Tensor:
    tensors = [t.unsqueeze(dim) for t in tensors]
    return cat(tensors, dim)


def pad(x: Tensor, pads, value: float = 0) -> Tensor:
    """Constant padding; pads is one (lo, hi) pair per axis (NumPy's form)."""
    return _apply("pad", x, pads=pads, value=value)


def from_dlpack(obj) -> Tensor:
    """Zero-copy view of a DLPack-capable array (torch, CuPy, JAX) on the current device."""
    from flame.runtime.device import executor

    ex = executor()
    arr = ex.from_dlpack(obj)
    return Tensor._concrete(arr, ir.dtype_of(arr.dtype))


def __getattr__(name: str):
    if name in ("nn", "optim", "checkpoint"):
        import importlib

        return importlib.import_module(f"flame.{name}")
    raise AttributeError(f"module 'flame' has no attribute {name!r}")
