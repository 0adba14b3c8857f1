"""flame: a deep-learning compiler for NVIDIA GPUs. Trace PyTorch-style code into an SSA IR,
differentiate it with one autodiff pass, fuse, plan memory and run it as generated CUDA (or on the
NumPy reference executor when there is no GPU).

This module only re-exports the user-facing API; the code lives in flame.frontend (tensors, ops,
compile, autograd), flame.ir, flame.runtime and the subpackages ARCHITECTURE.md describes."""

from types import ModuleType as _ModuleType

from flame import ir
from flame._version import __version__
from flame.errors import CheckpointError, DTypeError, FlameError, ParseError, ShapeError, TraceError, VerifyError
from flame.frontend.autograd import grad, value_and_grad
from flame.frontend.compile import Compiled, compile
from flame.frontend.context import no_grad
from flame.frontend.creation import (
    Generator,
    arange,
    as_tensor,
    from_dlpack,
    from_numpy,
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
from flame.frontend.ops import (
    abs,
    amax,
    amin,
    argmax,
    cat,
    ceil,
    clamp,
    concat,
    cos,
    erf,
    exp,
    flip,
    floor,
    gelu,
    leaky_relu,
    log,
    maximum,
    mean,
    minimum,
    neg,
    pad,
    permute,
    pow,
    reciprocal,
    relu,
    reshape,
    round,
    rsqrt,
    sigmoid,
    sign,
    silu,
    sin,
    sqrt,
    squeeze,
    stack,
    sum,
    tanh,
    transpose,
    tril,
    triu,
    unsqueeze,
    where,
)
from flame.frontend.tensor import Tensor, matmul
from flame.ir.dtypes import bf16, boolean, f16, f32, f64, i32, i64
from flame.runtime.device import DeviceWarning, get_device, set_device

float32, float64, float16, bfloat16, int32, int64, bool_ = f32, f64, f16, bf16, i32, i64, boolean
# everything above is public: help(flame) and `from flame import *` list every function and type
# (cat, where, stack, sum ...), and a name added to the imports above needs no second list here
__all__ = sorted(n for n, v in globals().items()
                 if not n.startswith("_") and n != "annotations" and (n == "ir" or not isinstance(v, _ModuleType)))


def __getattr__(name: str):
    """flame.nn, flame.optim and flame.checkpoint import on first use (they are not needed to trace)."""
    if name in ("nn", "optim", "checkpoint"):
        import importlib

        return importlib.import_module(f"flame.{name}")
    raise AttributeError(f"module 'flame' has no attribute {name!r}")
