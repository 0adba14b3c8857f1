"""flame: a deep-learning compiler for NVIDIA GPUs. Trace PyTorch-style code into an SSA IR,
differentiate it with one autodiff pass, fuse, plan memory and run it as generated CUDA (or on the
NumPy reference executor when there is no GPU).

This module only re-exports the user-facing API; the code lives in flame.frontend (tensors, ops,
compile, autograd), flame.ir, flame.runtime and the subpackages ARCHITECTURE.md describes."""

from types import ModuleType as _ModuleType

from flame import ir
from flame._version import __version__
from flame.errors import (
    CheckpointError,
    DTypeError,
    FlameError,
    MemoryBudgetError,
    ParseError,
    RecompileWarning,
    ShapeError,
    TraceError,
    VerifyError,
)
from flame.frontend.autocast import autocast
from flame.frontend.autograd import grad, value_and_grad
from flame.frontend.compile import Compiled, CompileStats, compile
from flame.frontend.context import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from flame.frontend.creation import (
    Generator,
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    linspace,
    manual_seed,
    multinomial,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    tensor,
    zeros,
    zeros_like,
)
from flame.frontend.data_dependent import argwhere, bincount, count_nonzero, histc, nonzero, unique
from flame.frontend.einsum import einsum
from flame.frontend.ops import (
    abs,
    add,
    addcdiv,
    addcmul,
    addmm,
    all,
    allclose,
    amax,
    amin,
    any,
    argmax,
    argmin,
    argsort,
    atleast_1d,
    atleast_2d,
    baddbmm,
    bmm,
    broadcast_shapes,
    broadcast_tensors,
    cat,
    ceil,
    chunk,
    clamp,
    clamp_max,
    clamp_min,
    clip,
    clone,
    concat,
    corrcoef,
    cos,
    cosh,
    cov,
    cross,
    cumprod,
    cumsum,
    diag,
    diagonal,
    div,
    dot,
    eq,
    erf,
    exp,
    expm1,
    fix,
    flatten,
    flip,
    floor,
    floor_divide,
    frac,
    gather,
    ge,
    gelu,
    gt,
    index_add,
    index_select,
    is_floating_point,
    is_tensor,
    isclose,
    isfinite,
    isinf,
    isnan,
    kron,
    kthvalue,
    le,
    leaky_relu,
    lerp,
    log,
    log1p,
    log2,
    log10,
    log_softmax,
    logical_and,
    logical_not,
    logical_or,
    logit,
    logsumexp,
    lt,
    masked_fill,
    masked_select,
    max,
    maximum,
    mean,
    median,
    min,
    minimum,
    mm,
    movedim,
    mul,
    nanmean,
    nansum,
    narrow,
    ne,
    neg,
    norm,
    numel,
    outer,
    pad,
    permute,
    pow,
    prod,
    ravel,
    reciprocal,
    relu,
    remainder,
    repeat_interleave,
    reshape,
    roll,
    round,
    rsqrt,
    scatter_add,
    select,
    sigmoid,
    sign,
    silu,
    sin,
    sinh,
    softmax,
    sort,
    split,
    sqrt,
    square,
    squeeze,
    stack,
    std,
    sub,
    sum,
    swapaxes,
    swapdims,
    t,
    take_along_dim,
    tan,
    tanh,
    tensordot,
    tile,
    topk,
    trace,
    transpose,
    tril,
    tril_indices,
    triu,
    triu_indices,
    true_divide,
    trunc,
    unbind,
    unflatten,
    unsqueeze,
    var,
    where,
    xlogy,
)
from flame.frontend.tensor import Tensor, matmul
from flame.ir.dtypes import bf16, boolean, f16, f32, f64, i8, i32, i64, u8
from flame.runtime.device import Device as device
from flame.runtime.device import DeviceWarning, get_device, set_device

float32, float64, float16, bfloat16, int32, int64, bool_ = f32, f64, f16, bf16, i32, i64, boolean
int8, uint8 = i8, u8
float, double, half, long, int, bool = f32, f64, f16, i64, i32, boolean  # noqa: A001  (torch's aliases)
# everything above is public: help(flame) and `from flame import *` list every function and type
# (cat, where, stack, sum ...), and a name added to the imports above needs no second list here
__all__ = sorted([n for n, v in globals().items()
                  if not n.startswith("_") and n != "annotations" and (n == "ir" or not isinstance(v, _ModuleType))]
                 + ["save", "load", "linalg"])  # these three import on first use (__getattr__ below)


def __getattr__(name: str):
    """flame.nn, flame.optim, flame.checkpoint (flame.save / flame.load), flame.linalg, flame.amp,
    flame.distributed and flame.utils import on first use (they are not needed to trace)."""
    import importlib

    if name in ("nn", "optim", "checkpoint", "linalg", "amp", "distributed", "utils"):
        return importlib.import_module(f"flame.{name}")
    if name in ("save", "load"):
        return getattr(importlib.import_module("flame.checkpoint"), name)
    raise AttributeError(f"module 'flame' has no attribute {name!r}")
