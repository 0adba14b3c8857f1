"""The activations, normalisations, similarities and losses of torch.nn.functional that the core (functional.py,
losses.py) does not define, each composed from primitives as PyTorch defines it (softplus's threshold,
logsigmoid's stable form, elu/selu/celu through an accurate expm1, hardtanh and relu6 as clamps with PyTorch's
gradient at the bounds, glu's halves, kl_div's reductions, huber_loss's two pieces). flame.nn.functional
exports them; flame.nn has the module of each."""

from __future__ import annotations

import warnings

import numpy as np

from flame.errors import ArgumentError, ArgumentRangeError, DTypeError, IndexValueError, ShapeError
from flame.frontend import pointwise_formulas, torch_formulas
from flame.frontend.autocast import policy
from flame.frontend.context import user_location, user_stacklevel
from flame.frontend.creation import Generator, default_generator, ones, zeros
from flame.frontend.dispatch import apply
from flame.frontend.functional import (
    _loss_reduce,
    embedding,
    no_legacy_reduction,
    softmax,
    softmax_dim,
    warn_if_broadcast,
    weighted_loss_reduce,
)
from flame.frontend.norms import floating_only, kernel_dtypes, torch_dtype_name
from flame.frontend.opmath import (
    composite,
    float_gradient,
    half_gradient,
    wide,
    with_derivative,
    with_derivative_inside,
)
from flame.frontend.ops import broadcast_tensors, vector_norm, where
from flame.frontend.promotion import bool_as_number, fits, result_type, same_dtype
from flame.frontend.tensor import Tensor
from flame.frontend.torch_saves import saves, wants
from flame.ir.dtypes import bf16, boolean, f16, f64, i8, i16, i32, i64, u8

__all__ = [
    "bilinear",
    "celu",
    "cosine_similarity",
    "elu",
    "embedding_bag",
    "glu",
    "hardshrink",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "huber_loss",
    "kl_div",
    "logsigmoid",
    "mish",
    "normalize",
    "pairwise_distance",
    "prelu",
    "relu6",
    "rrelu",
    "selu",
    "softmin",
    "softplus",
    "softshrink",
    "softsign",
    "tanhshrink",
    "threshold",
]

# SELU's constants (Klambauer et al. 2017), as PyTorch spells them
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


@policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
@composite
@saves("input", vjp=torch_formulas.softplus)
def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold, as PyTorch."""
    floating_only("softplus", input)
    z = input * beta if beta != 1 else input
    soft = where(z > threshold, threshold, z).exp().log1p()  # a NaN reaches exp, so its gradient is NaN, as torch's
    return where(z > threshold, input, soft / beta if beta != 1 else soft)


@composite
def _logsigmoid(x: Tensor) -> Tensor:
    return x.clamp(max=0.0) - (-x.abs()).exp().log1p()


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): no overflow, no log(0); for f16 / bf16 in f32,
    rounded once. Its gradient PyTorch's kernel's (1/2 at 0, where min(x, 0) has a kink): from
    z = exp(-|x|) as stored in x's dtype, the cotangent times (x < 0 ? 1 - z / (1 + z) : z / (1 + z)),
    in f32 for f16 / bf16."""
    floating_only("logsigmoid", input)
    value = _logsigmoid(input)
    if not float_gradient(input):
        return value
    x = wide(input)
    z = (-x.abs()).exp().to(input.dtype).to(x.dtype)
    q = z / (z + 1)
    return with_derivative(input, value, where(x < 0, 1 - q, q))


def _f32(s: float) -> float:
    """The Python number s as an f32 value: PyTorch's kernels read their coefficients so."""
    return float(np.float32(s))


def _elu(x: Tensor, alpha: float, scale: float = 1.0, input_scale: float = 1.0, grad_scale: float | None = None
         ) -> Tensor:
    """PyTorch's elu kernel: x * scale where x > 0, else expm1(x * input_scale) * (alpha * scale), its
    coefficients in the kernel's compute type: f32 values (their product in f32) for f32 and the widened
    f16 / bf16, f64 ones for f64. grad_scale: the input_scale its backward takes, where that differs (celu's
    1 / alpha, in float there)."""
    if x.dtype == f64:
        negcoef, rnd = alpha * scale, float
    else:
        negcoef, rnd = _f32(np.float32(alpha) * np.float32(scale)), _f32
    z = x.clamp(max=0.0)
    u = z * rnd(input_scale) if input_scale != 1 else z
    # the gradient torch's elu_backward: exp(u), not expm1's grad * (result + 1), which loses exp(u)'s
    # digits where the result nears -1
    if grad_scale is None:
        neg = with_derivative(u, u.expm1(), u.exp()) * negcoef
    else:
        s = rnd(grad_scale)
        neg = with_derivative(z, u.expm1(), (z * s).exp() * s) * negcoef
    return where(x <= 0, neg, x * rnd(scale) if scale != 1 else x)  # a NaN takes the x branch, as torch's backward


@saves("result", name="elu", vjp=pointwise_formulas.elu_result)
@composite
def elu_from_result(input: Tensor, alpha: float, scale: float = 1.0, input_scale: float = 1.0,  # noqa: A002
                    grad_scale: float | None = None) -> Tensor:
    """elu's values (celu's, selu's: _elu's arguments) with the gradient of torch's node of the in-place
    forms (elu_, celu_, selu_, inplace=True), which saves the result: g * s * (result + alpha * scale) where
    the result is at most 0, else g * scale (s: the input scale the backward takes, grad_scale or
    input_scale)."""
    value = _elu(input, alpha, scale, input_scale)
    if not float_gradient(input):
        return value
    rnd = float if input.dtype == f64 else _f32
    negcoef = alpha * scale if input.dtype == f64 else _f32(np.float32(alpha) * np.float32(scale))
    s = rnd(input_scale if grad_scale is None else grad_scale)
    r = wide(value).detach()
    return with_derivative(input, value, where(r <= 0, (r + negcoef) * s, rnd(scale)))


@saves("result", name="leaky_relu", vjp=pointwise_formulas.leaky_relu_result)
def leaky_relu_from_result(input: Tensor, negative_slope: float) -> Tensor:  # noqa: A002
    """leaky_relu's values with the gradient of torch's node of its in-place form (leaky_relu_, rrelu_ when
    not training), which saves the result: g where the result is positive, else g * negative_slope."""
    value = input.leaky_relu(negative_slope)
    if not float_gradient(input):
        return value
    r = wide(value).detach()
    return with_derivative(input, value, where(r > 0, 1.0, ones((), dtype=r.dtype) * negative_slope))  # (r's dtype)


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
@composite
def elu(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    """x where x > 0, else alpha * (exp(x) - 1)."""
    floating_only("elu", input)
    return _elu(input, alpha)


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
@composite
def selu(input: Tensor) -> Tensor:  # noqa: A002
    """SELU_SCALE * elu(x, SELU_ALPHA), as PyTorch's one kernel (x * scale, expm1(x) * (alpha * scale))."""
    floating_only("selu", input)
    return _elu(input, SELU_ALPHA, SELU_SCALE)


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
@saves("input", vjp=pointwise_formulas.celu)
@composite
def celu(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): PyTorch's elu with input_scale 1 / alpha. Its
    gradient is torch's elu_backward with input_scale 1 / alpha.toFloat(): alpha rounded to f32 (the
    forward's 1 / alpha is in double), which moves an f64 gradient by about 1e-8 relatively."""
    floating_only("celu", input)
    return _elu(input, alpha, 1.0, 1.0 / alpha, 1.0 / float(np.float32(alpha)))


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
@saves("input", vjp=pointwise_formulas.mish)
@composite
def mish(input: Tensor) -> Tensor:  # noqa: A002
    """x * tanh(softplus(x))."""
    floating_only("mish", input)
    return input * softplus(input).tanh()


@saves("input", vjp=pointwise_formulas.hardtanh)
def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:  # noqa: A002
    """x limited to [min_val, max_val]; its gradient PyTorch's hardtanh_backward: the cotangent strictly
    inside (min_val, max_val), 0 at the bounds (clamp's gradient passes at them)."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} is larger than max_val {max_val}")
    if input.dtype == boolean:
        raise DTypeError(f"hardtanh: Bool inputs not supported for hardtanh (as in PyTorch)\n  at {user_location()}")
    fits("hardtanh", "min_val", min_val, input.dtype)
    fits("hardtanh", "max_val", max_val, input.dtype)
    if input.dtype.is_int:  # PyTorch's result keeps the integer dtype: the bounds truncated (relu6's 0 and 6 too)
        min_val, max_val = int(min_val), int(max_val)
    value = input.clamp(min_val, max_val)
    if not float_gradient(input):
        return value
    x = wide(input)
    return with_derivative_inside(input, value, (x > min_val) & (x < max_val))


def relu6(input: Tensor) -> Tensor:  # noqa: A002
    """hardtanh(x, 0, 6), as PyTorch's (its gradient 0 at 0 and at 6)."""
    return hardtanh(input, 0.0, 6.0)


@composite
def _hardsigmoid(x: Tensor) -> Tensor:
    return (x + 3).clamp(0.0, 6.0) / 6


@saves("input")
def hardsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """relu6(x + 3) / 6 (for f16 / bf16 in f32 rounded once); its gradient PyTorch's kernel's: the cotangent
    times 1/6 (rounded to f32 whatever the dtype, as torch's `1.0f / 6.0f`) strictly inside (-3, 3), else 0."""
    floating_only("hardsigmoid", input)
    value = _hardsigmoid(input)
    if not float_gradient(input):
        return value
    x = wide(input)
    return with_derivative_inside(input, value, (x > -3) & (x < 3), _f32(1 / 6))


@composite
def _hardswish(x: Tensor) -> Tensor:
    return x * (x + 3).clamp(0.0, 6.0) / 6


def hardswish(input: Tensor) -> Tensor:  # noqa: A002
    """x * relu6(x + 3) / 6 (for f16 / bf16 in f32 rounded once); its gradient PyTorch's kernel's: the
    cotangent times 0 up to -3, x / 3 + 1/2 below 3, else 1 (1 at 3 itself)."""
    floating_only("hardswish", input)
    value = _hardswish(input)
    if not float_gradient(input):
        return value
    x = wide(input)
    return with_derivative_inside(input, value, x > -3, where(x < 3, x / 3 + 0.5, 1.0).to(x.dtype))


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    """x / (1 + |x|)."""
    return input / (input.abs() + 1)


@composite
def _glu(x: Tensor, dim: int) -> Tensor:
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


@saves("input", vjp=pointwise_formulas.glu)
def glu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    """a * sigmoid(b), a and b the two halves of input along dim (its size must be even). For f16 / bf16, in
    f32 rounded once; the gradient PyTorch's kernel's: a's the cotangent times sigmoid(b) as stored in the
    input's dtype, b's s (1 - s) a times the cotangent in f32 from that s, rounded once."""
    floating_only("glu", input)
    if input.shape[dim] % 2:
        raise ShapeError(
            f"glu: halving dimension {dim} needs an even size, got {list(input.shape)}\n  at {user_location()}"
        )
    value = _glu(input, dim)
    if not half_gradient(input):
        return value
    a, b = input.chunk(2, dim)
    s = b.detach().sigmoid()
    d = s.float() * (1 - s.float()) * a.detach().float()
    return apply("straight_through", a * s + with_derivative(b, b.detach(), d), value)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:  # noqa: A002
    """softmax(-x) along dim (in dtype when given); without dim, torch's implicit choice."""
    x = input.to(dtype) if dtype is not None else input
    return softmax(-x, softmax_dim("softmin", x.ndim, dim))


def threshold(input: Tensor, threshold: float, value: float) -> Tensor:  # noqa: A002
    """value where x <= threshold, else x (a NaN stays NaN, with its gradient); an f16 / bf16 x is compared
    with the threshold in f32, as PyTorch's kernel (the threshold not rounded to x's dtype)."""
    if isinstance(input, Tensor):
        kernel_dtypes("threshold", "threshold_cpu", input, also=(i8, i16, i32, i64, u8))
        fits("threshold", "threshold", threshold, input.dtype)
        fits("threshold", "value", value, input.dtype)
    if isinstance(input, Tensor) and input.dtype in (f16, bf16):
        return where(input.float() <= _f32(threshold), value, input)
    if isinstance(input, Tensor) and input.dtype.is_int:
        # PyTorch's kernel takes both numbers in x's integer dtype (truncated), and so keeps that dtype
        threshold, value = int(threshold), int(value)
    return where(input <= threshold, value, input)


def tanhshrink(input: Tensor) -> Tensor:  # noqa: A002
    """x - tanh(x), as torch's (two ops, each rounded in x's dtype)."""
    return input - input.tanh()


@composite
def _softshrink(x: Tensor, lambd: float) -> Tensor:
    # a NaN stays NaN, with no gradient (torch's vectorized kernels; its scalar loop passes one)
    return where(x > lambd, x - lambd, where(x < -lambd, x + lambd, where(x != x, x.detach(), 0.0)))


@saves("input")
def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    """x - lambd above lambd, x + lambd below -lambd, else 0 (f16 / bf16 in f32, rounded once, as torch's
    kernel); lambd must not be negative."""
    floating_only("softshrink", input)
    if lambd < 0:
        raise ArgumentError(f"softshrink: lambda must be in range [0, inf) for input dtype {input.dtype}, but found "
                            f"{lambd} (as in PyTorch)\n  at {user_location()}")
    return _softshrink(input, lambd)


@saves("input")
def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    """x where |x| > lambd, else 0; a NaN stays NaN, with no gradient (torch's vectorized kernels; its scalar
    loop passes one)."""
    floating_only("hardshrink", input)
    return where((input > lambd) | (input < -lambd), input, where(input != input, input.detach(), 0.0))


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,  # noqa: A002
          inplace: bool = False, *, generator: Generator | None = None) -> Tensor:
    """Randomized leaky ReLU: negative elements times a slope drawn uniformly from [lower, upper] per element
    when training, times (lower + upper) / 2 otherwise (torch's leaky_relu with that slope)."""
    floating_only("rrelu", input)
    if lower > upper:
        raise ArgumentError(f"rrelu: lower bound should be less than or equal to the upper bound, got lower={lower}, "
                            f"upper={upper} (as in PyTorch)\n  at {user_location()}")
    if not training:
        return input.leaky_relu((lower + upper) / 2)
    u = (generator or default_generator()).draw("random_uniform", input.shape, input.dtype)
    return where(input >= 0, input, input * (lower + (upper - lower) * u))


@policy("lower")  # autocast: PyTorch's lower-precision list
@saves("input", "weight")
def prelu(input: Tensor, weight: Tensor) -> Tensor:  # noqa: A002
    """x where x > 0, else weight * x (at 0 the gradient is the slope's, as torch's); weight holds one
    slope, or one per channel (dim 1)."""
    if weight.ndim != 1 or (weight.shape[0] != 1 and (input.ndim < 2 or weight.shape[0] != input.shape[1])):
        raise ShapeError(
            f"prelu: weight {list(weight.shape)} must hold 1 slope or one per channel of input "
            f"{list(input.shape)} (dim 1)\n  at {user_location()}"
        )
    if weight.dtype != input.dtype:
        raise DTypeError(f"prelu: Type promoting not supported. Got {torch_dtype_name(input.dtype)} and "
                         f"{torch_dtype_name(weight.dtype)} (weight must have input's dtype, as in PyTorch)\n"
                         f"  at {user_location()}")
    kernel_dtypes("prelu", "prelu_cpu", input)
    if weight.shape[0] != 1:
        weight = weight.reshape(-1, *([1] * (input.ndim - 2)))
    return where(input > 0, input, input * weight)


@policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    """x / max(||x||_p along dim, eps)."""
    return input / vector_norm(input, p, dim, keepdim=True).clamp(min=eps)


@policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along dim, as PyTorch's: x1 and x2 broadcast
    first (a norm runs over the broadcast size), and each norm is clamped on its own, the clamp passing
    the gradient through unchanged."""
    dt = result_type(x1, x2)  # both read in their common dtype, which must be a floating one
    if not dt.is_float:
        raise DTypeError(f"cosine_similarity: expected common dtype to be floating point, yet common dtype is "
                         f"{torch_dtype_name(dt)}\n  at {user_location()}")
    x1, x2 = broadcast_tensors(x1.to(dt), x2.to(dt))
    n1, n2 = (vector_norm(x, 2, dim, keepdim=True) for x in (x1, x2))
    n1, n2 = (n + (n.detach().clamp(min=eps) - n.detach()) for n in (n1, n2))
    return ((x1 / n1) * (x2 / n2)).sum(dim)


# autocast: PyTorch's pairwise_distance is a norm, on its CUDA float32 list; on none of its CPU lists
@policy("f32", cpu="")
def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p over the last dim."""
    return vector_norm(x1 - x2 + eps, p, -1, keepdim=keepdim)


@policy("f32")  # autocast: on PyTorch's float32 list
@saves(lambda given: ("input", "target", *torch_formulas.weight_saved(given)) if wants(given, "input")
       or wants(given, "target") else (), vjp=torch_formulas.huber_loss)
def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,  # noqa: A002
               weight: Tensor | None = None) -> Tensor:
    """0.5 * d^2 where |d| < delta, else delta * (|d| - 0.5 * delta), with d = input - target, computed in
    their promoted dtype and given in the input's, as PyTorch's kernel writes it (an f32 input with an f64
    target: an f32 loss); weight (the input's shape) scales each element (the mean is the mean of the
    products, as PyTorch's)."""
    if not delta > 0:
        raise ArgumentRangeError(f"huber_loss does not support non-positive values for delta. (got {delta})"
                                 f"\n  at {user_location()}")
    warn_if_broadcast("huber_loss", input, target)
    given = input.dtype
    input, target = bool_as_number(input, target)
    d = input - target
    if not given.is_float and d.dtype.is_float:
        raise DTypeError(f"huber_loss: result type {torch_dtype_name(d.dtype)} can't be cast to the desired output "
                         f"type {torch_dtype_name(given)} (the loss takes input's dtype, as in PyTorch)\n"
                         f"  at {user_location()}")
    kernel_dtypes("huber_loss", "huber_cpu", d)
    a = d.abs()
    near = where(a >= delta, delta, d)  # squared in place of d: an infinite d's gradient stays finite, a NaN's NaN
    point = where(a < delta, near * near * 0.5, (a - 0.5 * delta) * delta)
    return weighted_loss_reduce(point.to(input.dtype), weight, input, reduction, False)


@policy("f32")  # autocast: on PyTorch's float32 list
@saves(torch_formulas.kl_div_saved, vjp=torch_formulas.kl_div)
def kl_div(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",  # noqa: A002
    log_target: bool = False,
) -> Tensor:
    """The pointwise KL divergence xlogy(target, target) - target * input of log-probabilities input (as
    PyTorch's: a zero target at an infinite input or a negative target gives NaN), or exp(target) *
    (target - input) with log_target. reduction "batchmean" divides the sum by the batch size (the
    mathematically right KL); "mean" averages over every element, with PyTorch's warning."""
    no_legacy_reduction("kl_div", size_average, reduce)
    if not (input.dtype.is_float and target.dtype.is_float):  # torch's words: it computes in neither
        raise DTypeError(f"kl_div: Integral inputs not supported (got {input.dtype} and {target.dtype}, as in "
                         f"PyTorch; .float() them)\n  at {user_location()}")
    if log_target:
        point = target.exp() * (target - input)
    else:
        point = target.xlogy(target) - target * input  # PyTorch's: NaN for a negative target, 0 * inf
    if reduction == "batchmean":
        return point.sum() / (input.shape[0] if input.ndim else 1)
    if reduction == "mean":
        warnings.warn(
            "kl_div: reduction='mean' divides the total loss by both the batch size and the support "
            "size; 'batchmean' divides only by the batch size and aligns with the KL math definition "
            "(as PyTorch warns)",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    return _loss_reduce(point, reduction)


@policy("promote", cpu="")  # autocast: on PyTorch's CUDA promote list (the widest input), none of its CPU lists
def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y[..., o] = sum_ij input1[..., i] * weight[o, i, j] * input2[..., j] (+ bias[o]), as PyTorch."""
    same_dtype("bilinear", input1=input1, input2=input2, weight=weight, bias=bias)
    o, i, j = weight.shape
    if input1.shape[-1] != i or input2.shape[-1] != j or tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise ShapeError(
            f"bilinear: inputs {list(input1.shape)} and {list(input2.shape)} do not fit weight "
            f"{list(weight.shape)} ([out, in1, in2], one batch shape)\n  at {user_location()}"
        )
    batch = input1.shape[:-1]
    x1, x2 = input1.reshape(-1, i), input2.reshape(-1, j)
    mixed = (x1 @ weight.permute(1, 0, 2).reshape(i, o * j)).reshape(-1, o, j)  # x1 through each out's matrix
    prod = mixed * x2.unsqueeze(1)
    out = prod.sum(-1, dtype=prod.dtype)  # an integer sum stays in the inputs' dtype (wrapping), as torch's
    out = out + bias if bias is not None else out
    return out.reshape(*batch, o)


def _check_offsets(offsets: Tensor, length: int) -> None:
    """Eager offsets are checked as PyTorch's: the first 0, none decreasing, none past the input's length
    (traced ones are not known while tracing)."""
    if offsets._value is not None or offsets.shape[0] == 0:
        return
    o = offsets.numpy()
    problem = (f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. "
               f"However, got {int(o[0])}" if o[0] != 0 else
               f"offsets[-1] can not be greater than input's length {length} but got offsets[-1] of {int(o.max())}"
               if o.max() > length else "offsets must not decrease" if (np.diff(o) < 0).any() else None)
    if problem:
        raise IndexValueError(f"embedding_bag: {problem}\n  at {user_location()}")


def _selected_max(rows: Tensor, value: Tensor, to_rows, total) -> Tensor:
    """value (each bag's max of `rows`, computed with no gradient), whose gradient to rows is torch's
    embedding_bag max backward's: the cotangent to the entries equal to their bag's max (shared evenly
    among equal ones), and 0 to the others whatever the cotangent (a select, the backward's last step: an
    infinite cotangent gives them no NaN). to_rows(t): t of the bags' shape at each entry; total(t): t of the
    entries' shape summed over each bag."""
    if not float_gradient(rows):
        return value
    is_max = rows.detach() == to_rows(value)
    n = to_rows(total(is_max.to(rows.dtype)).clamp(min=1.0))
    return apply("straight_through", total(where(is_max, rows, 0.0) / n), value)


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
def embedding_bag(
    input: Tensor,
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm=None,  # noqa: A002
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """The sum, mean or max of each bag's embeddings, as torch.nn.functional.embedding_bag: bags are
    the rows of a 2-D input, or the runs of a 1-D input starting at offsets. An empty bag gives zeros;
    padding_idx entries take no part (nor count in the mean); per_sample_weights scale each entry
    (mode "sum"). With include_last_offset, entries from the last offset on belong to the last bag, as in
    PyTorch's CPU kernels. Mode "max" gives each dim's largest entry (an empty bag:
    zeros) and its gradient to that entry. max_norm, scale_grad_by_freq and sparse gradients are not supported."""
    if sparse:
        raise NotImplementedError(f"embedding_bag: sparse gradients are not supported; use sparse=False (a dense "
                                  f"gradient)\n  at {user_location()}")
    if max_norm is not None or scale_grad_by_freq:
        raise NotImplementedError("embedding_bag: max_norm and scale_grad_by_freq are not supported")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise ValueError("embedding_bag: per_sample_weights only with mode='sum', as PyTorch")
    if not weight.dtype.is_float:
        raise DTypeError(f"embedding_bag: Expected tensor for argument #1 'weight' to have one of the following scalar "
                         f"types: Half, BFloat16, Float, Double; but got {torch_dtype_name(weight.dtype)} instead (as "
                         f"in PyTorch)\n  at {user_location()}")
    dim = weight.shape[1]
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets go with a 1-D input (a 2-D input's rows are the bags)")
        bags, length = input.shape
        input, per = input.reshape(-1), per_sample_weights
        per_sample_weights = per.reshape(-1) if per is not None else None
        ids = None
    elif input.ndim == 1 and offsets is not None:
        _check_offsets(offsets, input.shape[0])
        bags = offsets.shape[0] - (1 if include_last_offset else 0)
        # each entry's bag: how many offsets after the first lie at or before it (with
        # include_last_offset, entries from the last offset on join the last bag: clamped below)
        marks = zeros(input.shape[0] + 1, dtype=input.dtype)  # one past the end: an offset may equal the length
        if offsets.shape[0] > 1:
            rest = offsets.shape[0] - 1
            marks = marks.index_add(0, offsets.narrow(0, 1, rest), ones(rest, dtype=input.dtype))
        ids = marks.cumsum(0).narrow(0, 0, input.shape[0])
    else:
        raise ShapeError(
            f"embedding_bag: input must be 2-D, or 1-D with offsets; got {list(input.shape)}\n  at {user_location()}"
        )
    rows = embedding(input, weight)
    keep = None if padding_idx is None else (input != padding_idx % weight.shape[0])
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(-1)
    if keep is not None:
        rows = where(keep.unsqueeze(-1), rows, 0.0 if mode != "max" else float("-inf"))
    if ids is None:
        rows = rows.reshape(bags, length, dim)
        if mode == "max":
            out = _selected_max(rows, rows.detach().amax(1), lambda t: t.unsqueeze(1), lambda t: t.sum(1))
            return where(out == float("-inf"), 0.0, out) if keep is not None else out
        total = rows.sum(1)
        if mode == "sum":
            return total
        count = keep.reshape(bags, length).to(rows.dtype).sum(1, keepdim=True) if keep is not None else length
        return total / (count.clamp(min=1.0) if keep is not None else count)
    if include_last_offset and bags:  # entries past the last offset join the last bag, as PyTorch's CPU kernels
        ids = ids.clamp(max=bags - 1)
    slots = bags + (1 if include_last_offset and not bags else 0)  # no bag: a spare slot, dropped
    idx = ids.to(input.dtype).unsqueeze(-1).broadcast_to(rows.shape)
    if mode == "max":  # an empty bag keeps its zeros (include_self=False), as PyTorch's
        value = zeros(slots, dim, dtype=rows.dtype).scatter_reduce(0, idx, rows.detach(), "amax", include_self=False)
        out = _selected_max(rows, value, lambda t: t.gather(0, idx),
                            lambda t: zeros(slots, dim, dtype=rows.dtype).scatter_add(0, idx, t)).narrow(0, 0, bags)
        return where(out == float("-inf"), 0.0, out) if keep is not None else out
    total = zeros(slots, dim, dtype=rows.dtype).scatter_add(0, idx, rows).narrow(0, 0, bags)
    if mode == "sum":
        return total
    weight_of = keep.to(rows.dtype) if keep is not None else ones(input.shape[0], dtype=rows.dtype)
    count = zeros(slots, dtype=rows.dtype).scatter_add(0, ids.to(input.dtype), weight_of).narrow(0, 0, bags)
    return total / count.clamp(min=1.0).unsqueeze(-1)
