"""The batch, group and instance normalisations of flame.nn.functional (PyTorch names and semantics;
layer_norm and rms_norm are in frontend/functional.py), written over primitives:
- group_norm: statistics over the trailing dims of an [N, G, C/G, *S] view (one row kernel);
- batch_norm: statistics over every dim but the channels, running statistics updated in place;
- instance_norm: group_norm with one group per channel; its running statistics move as batch_norm's.
Each returns its input's dtype; parameters follow PyTorch's CPU rule (param_dtype): of the input's dtype,
or f32 for an f16/bf16 input, which then computes in f32 and rounds the result once."""

from __future__ import annotations

import math

from flame.errors import DTypeError
from flame.frontend import torch_formulas
from flame.frontend.autocast import policy
from flame.frontend.context import no_grad, user_location
from flame.frontend.dispatch import apply
from flame.frontend.opmath import float_gradient
from flame.frontend.spatial import _err
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import cat, where
from flame.frontend.torch_saves import saves
from flame.ir.dtypes import bf16, boolean, dtype_of, f16, f32, f64, i8, i16, i32, i64, promote, u8

__all__ = ["batch_norm", "group_norm", "instance_norm"]


def param_dtype(op: str, x: Tensor, *params: Tensor | None):
    """The dtype of a normalisation's parameters (weight and bias, or the running statistics; None without
    any), checked as PyTorch's CPU kernels check it: one dtype for all, the input's or, for an f16/bf16 input,
    f32 (its mixed case: statistics and the affine step in f32, the result in the input's dtype); else a
    DTypeError naming the op (PyTorch: "mixed dtype (CPU)")."""
    given = [p for p in params if p is not None]
    dts = {p.dtype for p in given}
    low = x.dtype.is_float and x.dtype.itemsize == 2
    if len(dts) > 1 or not all(d == x.dtype or (low and d.name == "f32") for d in dts):
        wanted = f"{x.dtype}" + (" or f32" if low else "")
        raise DTypeError(f"{op}: mixed dtypes: input {x.dtype} with parameters of "
                         f"{', '.join(sorted(str(d) for d in dts))}; expected all {wanted} (as PyTorch's "
                         f"'mixed dtype (CPU)'); cast them first\n  at {user_location()}")
    return next(iter(dts), None)


def widened(t: Tensor | None) -> Tensor | None:
    """An f16/bf16 tensor in f32 (PyTorch's normalisations compute their statistics, the normalised value
    and the affine step in their accumulation type and round the result once; so do its linear
    interpolation and adaptive average pooling), else t."""
    return t.float() if t is not None and t.dtype.is_float and t.dtype.itemsize == 2 else t


@policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:
    """F.group_norm: normalized_groups, refusing in any mode, as torch's F.group_norm does, an input with
    (N * C / num_groups) * prod(S) == 1 (torch's _verify_batch_size of [N * C // num_groups, num_groups,
    *S]: one value a group, whose output would be just the bias). torch.group_norm checks nothing."""
    if input.ndim >= 2 and num_groups > 0:
        size = [input.shape[0] * input.shape[1] // num_groups, num_groups, *input.shape[2:]]
        if size[0] * math.prod(size[2:]) == 1:
            raise _err(f"group_norm: expected more than 1 value per channel when training, got input size {size}")
    return normalized_groups(input, num_groups, weight, bias, eps)


@policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list (torch.group_norm); on none of its CPU lists
@saves("input", "weight", vjp=torch_formulas.group_norm)  # torch's native_group_norm node (not the bias)
def normalized_groups(input: Tensor, num_groups: int, weight: Tensor | None = None,  # noqa: A002
                      bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each group of C/num_groups channels of [N, C, *S] over its channels and positions
    (biased variance), then scale and shift per channel. An f16/bf16 input (weight and bias of its dtype
    or f32) computes in f32 and rounds the result once, as PyTorch's; its backward keeps the input and
    the f32 statistics per sample and group, from which it recomputes the centred values and the output
    (passes/remat.py: the parameters are widened before their per-channel view, so that the widening is
    a graph input's, which the recomputation may read)."""
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise _err(f"group_norm: num_groups={num_groups} must divide the channels of an [N, C, ...] input, got "
                   f"{list(input.shape)}")
    param_dtype("group_norm", input, weight, bias)
    n, c, spatial = input.shape[0], input.shape[1], input.shape[2:]
    g = widened(input).reshape(n, num_groups, c // num_groups, *spatial)
    dims = tuple(range(2, g.ndim))
    mu = g.mean(dims, keepdim=True)
    dev = g - mu
    y = dev * ((dev * dev).mean(dims, keepdim=True) + eps).rsqrt()
    per_channel = (num_groups, c // num_groups) + (1,) * len(spatial)
    if weight is not None:
        y = y * widened(weight).reshape(*per_channel)
    if bias is not None:
        y = y + widened(bias).reshape(*per_channel)
    return y.reshape(*input.shape).to(input.dtype)


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
# torch's NativeBatchNormBackward0 saves the running statistics training too (where its backward reads the
# batch's): its kernel updates them without counting a version, as _update_running's, so a write of the
# user's into them after the call raises at backward, and a second call before it does not
@saves("input", "weight", "running_mean", "running_var", vjp=torch_formulas.batch_norm)
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,  # noqa: A002
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float | Tensor = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise [N, C, *S] per channel. training: with the batch's statistics (biased variance),
    updating running_mean / running_var in place (if given) as (1 - momentum) * running + momentum *
    batch (the unbiased variance); else with the running statistics."""
    x = input
    if x.ndim < 2:
        raise _err(f"batch_norm: expected an [N, C, ...] input, got {list(x.shape)}")
    kernel_dtypes("batch_norm", "batch_norm", x)
    c, spatial = x.shape[1], x.ndim - 2
    for what, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise _err(f"batch_norm: {what} must be [{c}] (one per channel), got {list(t.shape)}")
    param_dtype("batch_norm", x, weight, bias)  # the running statistics may be f32 with bf16 weights (torch's
    param_dtype("batch_norm", x, running_mean, running_var)  # CPU refuses that mix, its GPU kernels do not)
    dims = (0, *range(2, x.ndim))
    count = x.numel() // c if c else 0
    per_channel = (c, *[1] * spatial)
    if training:
        if x.numel() == 0:  # PyTorch: an empty output (a new tensor), the running statistics untouched
            return _affine(x.clone(), weight, bias, per_channel)
        if count <= 1:
            raise _err(f"batch_norm: expected more than 1 value per channel when training, got input "
                       f"{list(x.shape)}")
        return _batch_norm_train(x, running_mean, running_var, weight, bias, momentum, eps, dims, count, per_channel)
    if running_mean is None or running_var is None:
        raise _err("batch_norm: evaluation without batch statistics needs running_mean and running_var")
    rm, rv, w, b = (widened(t) for t in (running_mean, running_var, weight, bias))  # in f32, rounded once
    y = (widened(x) - rm.reshape(*per_channel)) * (rv.reshape(*per_channel) + eps).rsqrt()
    return _affine(y, w, b, per_channel).to(x.dtype)  # PyTorch: the input's dtype, f32 statistics or not


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None, per_channel) -> Tensor:
    """y * weight + bias per channel (either may be absent)."""
    if weight is not None:
        y = y * weight.reshape(*per_channel)
    return y + bias.reshape(*per_channel) if bias is not None else y


def _batch_norm_train(x, running_mean, running_var, weight, bias, momentum, eps, dims, count, per_channel,
                      gather=None) -> Tensor:
    """Training-mode batch_norm with two-pass statistics, as PyTorch's: the per-channel mean, then the
    mean of (x - m)^2 with m = mean.detach() (E[x^2] - E[x]^2 in f32 cancels to noise once |mean| is
    a few thousand standard deviations; the centred form stays accurate whatever the mean). The
    variance's gradient through m is an exact zero (the deviations sum to zero), so detaching m costs
    nothing and keeps the backward to autodiff's two centred column sums over (dy, x): y = (x - m) *
    scale + shift with per-channel scale = w * rstd and shift = b + (m - mean) * scale (= b: the term
    is an exact per-channel zero that carries mean's gradient), whose backward needs only sum(dy)
    (dshift, and through it dmean = -scale * dshift) and sum(dy * (x - m)) (dscale). The sums stay
    centred as PyTorch's: the scale-and-shift form x * scale + shift would need sum(dy * x) - mean *
    sum(dy), whose cancellation a convolution's weight gradient after a pooled loss amplifies by the
    per-channel count (tests/nn/test_batch_norm_large_count.py).
    Statistics and the normalisation are f32 for f32/f16/bf16 inputs (PyTorch's accumulate type).
    gather: the statistics are those of every process's batch together (SyncBatchNorm: `_across`)."""
    acc = x.float() if x.dtype.is_float and x.dtype.itemsize < 4 else x
    # deviations from s, one sample of the channel: x - s is exact where x lies within s's binade
    # (Sterbenz), so the mean of the deviations and x - mean = (x - s) - that mean are accurate to the
    # deviations' rounding, not the values' (in f32 a mean of 1000 +- 0.1 is off by up to half an ulp
    # of 1000, 3e-5, which the normalised output magnifies by 1 / std)
    s = acc
    for a in dims:
        s = s.narrow(a, 0, 1)
    d = acc - s.detach()
    mean_d = d.sum(dims, keepdim=True) / count
    mean = s.detach() + mean_d
    dev = d - mean_d.detach()
    var = (dev * dev).sum(dims, keepdim=True) / count
    if gather is not None:
        mean, var, dev, count = _across(gather, mean, var, dev, count, per_channel)
    m = mean.detach()
    scale = (var + eps).rsqrt()
    if weight is not None:
        scale = scale * weight.reshape(*per_channel).to(acc.dtype)
    shift = (m - mean) * scale
    if bias is not None:
        shift = shift + bias.reshape(*per_channel).to(acc.dtype)
    if running_mean is not None and running_var is not None:
        _update_running(running_mean, running_var, mean, var, momentum, count, counted=False)
    return (dev * scale + shift).to(x.dtype)


def batch_norm_across(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,  # noqa: A002
                      weight: Tensor | None, bias: Tensor | None, momentum: float | Tensor, eps: float,
                      gather) -> Tensor:
    """Training-mode batch_norm over the batches of every process together (torch's SyncBatchNorm).
    `gather(t)`: the 1-D t of every process, concatenated in rank order (an all_gather, whose gradient
    is a reduce_scatter), supplied by the layer above. Each process's per-channel count, mean and sum of
    squared deviations are gathered once and combined exactly (Chan's parallel variance, as torch's
    batch_norm_gather_stats_with_counts); the running statistics take the global mean and the unbiased
    variance of the global count."""
    x = input
    if x.ndim < 2:
        raise _err(f"batch_norm: expected an [N, C, ...] input, got {list(x.shape)}")
    c = x.shape[1]
    count = x.numel() // c if c else 0
    if count < 1:
        raise _err(f"SyncBatchNorm: expected at least 1 value per channel in every process's batch, got input "
                   f"{list(x.shape)}")
    dims, per_channel = (0, *range(2, x.ndim)), (c, *[1] * (x.ndim - 2))
    return _batch_norm_train(x, running_mean, running_var, weight, bias, momentum, eps, dims, count, per_channel,
                             gather)


def _across(gather, mean: Tensor, var: Tensor, dev: Tensor, count: int, per_channel) -> tuple:
    """(mean, var, dev, count) of every process's batch together, from this process's: its per-channel
    mean (carrying the gradient) and biased variance, its deviations from that mean, its count. The
    global mean is sum(c_r * m_r) / N, the sum of squared deviations sum(M2_r + c_r * (m_r - mean)^2):
    its m_r keep their gradient, which turns each process's deviations from m_r into deviations from
    the global mean (the global mean's own derivative there is an exact zero). The count returned is
    a tensor (the processes' batches may differ in size)."""
    c = per_channel[0]
    local = cat([mean.reshape(c), var.reshape(c) * count, mean.new_full((1,), float(count))])
    every = gather(local).reshape(-1, 2 * c + 1)
    n, means = every[:, 2 * c :], every[:, :c]
    total = n.sum()
    mu = (means * n).sum(0) / total
    m2 = (every[:, c : 2 * c] + n * (means - mu.detach()) ** 2).sum(0)
    shift = (mu - mean.reshape(c)).detach().reshape(*per_channel)
    return mu.reshape(*per_channel), (m2 / total).reshape(*per_channel), dev - shift, total.detach()


def _update_running(running_mean, running_var, mu, var, momentum, count, counted: bool = True) -> None:
    """running = (1 - momentum) * running + momentum * batch, in place (an aliased state output when
    traced); the variance is the unbiased one, as PyTorch's. counted=False: a write torch's version counter
    does not count, as its batch_norm kernels' own update of the statistics (through `.data`): the node of
    an earlier call that saved them (batch_norm's @saves) still finds them as it saved them, and a write of the
    user's into them after the call is one that raises at its backward, as torch's."""
    c = running_mean.shape[0]
    with no_grad():
        m = momentum.to(running_mean.dtype) if isinstance(momentum, Tensor) else float(momentum)
        batch_mean = mu.detach().reshape(c).to(running_mean.dtype)
        batch_var = (var.detach().reshape(c) * (count / (count - 1))).to(running_var.dtype)
        new_mean, new_var = running_mean * (1 - m) + batch_mean * m, running_var * (1 - m) + batch_var * m
        (running_mean if counted else running_mean.data).copy_(new_mean)
        (running_var if counted else running_var.data).copy_(new_var)


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,  # noqa: A002
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel of each sample of [N, C, *S] over its positions (biased variance), then
    scale and shift per channel: group_norm with one group per channel. With running_mean and
    running_var (InstanceNorm's track_running_stats), they move in place toward the batch's average of
    the per-sample statistics (the variance unbiased over the positions), as PyTorch's; with
    use_input_stats=False the running statistics normalise instead (evaluation)."""
    if input.ndim < 3:
        raise _err(f"instance_norm: expected an [N, C, ...] input with positions, got {list(input.shape)}")
    if (running_mean is None) != (running_var is None):
        raise _err("instance_norm: give both running_mean and running_var, or neither")
    kernel_dtypes("instance_norm", "batch_norm", input)
    if not use_input_stats:
        if running_mean is None:
            raise _err("instance_norm: use_input_stats=False needs running_mean and running_var")
        return batch_norm(input, running_mean, running_var, weight, bias, False, eps=eps)
    param_dtype("instance_norm", input, running_mean, running_var)  # its own group: torch's instance_norm
    if math.prod(input.shape[2:]) == 1:  # torch refuses one position: its output would be just the bias
        raise _err(f"instance_norm: expected more than 1 spatial element when training, got input size "
                   f"{list(input.shape)}")
    if running_mean is not None:
        positions = input.numel() // (input.shape[0] * input.shape[1])
        if positions <= 1:
            raise _err(f"instance_norm: expected more than 1 position per channel, got input {list(input.shape)}")
        acc = input.float() if input.dtype.is_float and input.dtype.itemsize < 4 else input
        dims = tuple(range(2, input.ndim))
        mean = acc.mean(dims, keepdim=True)  # [N, C, 1, ...]: two passes, as batch_norm's statistics
        dev = acc - mean
        var = (dev * dev).mean(dims)
        _update_running(running_mean, running_var, mean.reshape(*mean.shape[:2]).mean(0), var.mean(0), momentum,
                        positions)
    return normalized_groups(input, input.shape[1], weight, bias, eps)


_TORCH_NAMES = {f64: "Double", f32: "Float", f16: "Half", bf16: "BFloat16", i64: "Long", i32: "Int",
                i16: "Short", i8: "Char", u8: "Byte", boolean: "Bool"}


def torch_dtype_name(dt) -> str:
    """The dtype as torch's messages name it (c10::ScalarType: Float, Double, Long ...)."""
    return _TORCH_NAMES.get(dt, str(dt))


def floating_only(name: str, x: Tensor, fix: str = "convert it with .float()") -> None:
    """torch's kernel of `name` (an activation, softmax) exists for floating dtypes only: an integer or
    bool input raises (flame would otherwise compute it in f32), as in PyTorch; `fix` says what to do."""
    if isinstance(x, Tensor) and not x.dtype.is_float:
        raise DTypeError(f"{name}: not implemented for {x.dtype} input, as in PyTorch ({fix})\n  at {user_location()}")


def kernel_dtypes(op: str, kernel: str, x: Tensor, also=()) -> None:
    """torch's CPU kernel `kernel` (the name its dispatch macro reports) runs floating inputs and the dtypes
    in `also` only: any other raises torch's NotImplementedError, in its words, naming op."""
    if isinstance(x, Tensor) and not x.dtype.is_float and x.dtype not in also:
        raise DTypeError(f'{op}: "{kernel}" not implemented for \'{torch_dtype_name(x.dtype)}\' (as in PyTorch; '
                         f"convert the input with .float())\n  at {user_location()}")


def norm_dtype_checks(op: str, input: Tensor, dtype) -> None:  # noqa: A002
    """torch's checks of a linalg norm's input and dtype= (RuntimeErrors there): a floating input, and a
    floating dtype the input's converts to without narrowing (f32 -> f64, not f64 -> f32)."""
    if not input.dtype.is_float:
        raise DTypeError(f"{op}: Expected a floating point or complex tensor as input. Got "
                         f"{torch_dtype_name(input.dtype)}\n  at {user_location()}")
    if dtype is None:
        return
    dt = dtype_of(dtype)
    if not dt.is_float:
        raise DTypeError(f"{op}: dtype should be floating point or complex, but got {torch_dtype_name(dt)}\n"
                         f"  at {user_location()}")
    if promote(input.dtype, dt) != dt:
        raise DTypeError(f"{op}: the dtype of the input ({torch_dtype_name(input.dtype)}) should be convertible "
                         f"without narrowing to the specified dtype ({torch_dtype_name(dt)})\n  at {user_location()}")


# autocast: linalg_vector_norm is on PyTorch's CUDA float32 list (not with an explicit dtype); on none of its CPU
# lists
@policy("f32", cpu="")
@saves("input", "result", vjp=torch_formulas.vector_norm)
def vector_norm(input: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The vector ord-norm over dim (all elements by default), as torch.linalg.vector_norm: ord 2
    (default), 1, inf, -inf, 0 (the count of nonzeros) or any other number. At zero the gradient of
    the 2-norm (and of every ord > 0 root) is zero, as in PyTorch."""
    norm_dtype_checks("linalg.vector_norm", input, dtype)
    x = input.to(dtype) if dtype is not None else input
    if x.dtype.itemsize < 4:  # torch computes a half norm in f32 (x * x of 300 does not overflow) and rounds it
        return vector_norm(x.to(f32), ord, dim, keepdim).to(x.dtype)
    a = x.abs()
    if ord in (float("inf"), float("-inf")):
        return _extreme_norm(x, a.amax(dim, keepdim) if ord > 0 else a.amin(dim, keepdim), dim, keepdim)
    if ord == 0:  # a count, with torch's zero gradient (x * 0 is 0 where it is picked: x == 0 there)
        return where(x != 0, 1.0, x * 0).sum(dim, keepdim)
    if ord == 1:
        return a.sum(dim, keepdim)
    if ord < 1:  # d a**ord is infinite at 0 (ord < 0 too): its elements there take no gradient, as in PyTorch
        at0 = a == 0
        s = where(at0, 0.0 if ord > 0 else float("inf"), where(at0, 1.0, a) ** ord).sum(dim, keepdim)
    else:
        s = (x * x if ord == 2 else a**ord).sum(dim, keepdim)
    if ord < 0:
        norm = s ** (1.0 / ord)
    else:
        zero = s == 0  # the root's derivative is infinite there: pick 0 without differentiating the root
        safe = where(zero, 1.0, s)
        norm = where(zero, 0.0, safe.sqrt() if ord == 2 else safe ** (1.0 / ord))
    return _zeros_times_norm(x, norm, dim, keepdim) if ord < 1 else norm


def _axes_kept(x: Tensor, norm: Tensor, dim, keepdim: bool) -> Tensor:
    """norm with its reduced axes back as size 1, so that it broadcasts against x."""
    if keepdim or x.ndim == 0:
        return norm
    # dim=() reduces every dim, as dim=None (torch's reduction convention)
    axes = (dim,) if isinstance(dim, int) else dim if dim is not None and len(dim) else range(x.ndim)
    return norm.reshape(*[1 if i in {a % x.ndim for a in axes} else n for i, n in enumerate(x.shape)])


def _extreme_norm(x: Tensor, norm: Tensor, dim, keepdim: bool) -> Tensor:
    """The inf / -inf norm (amax / amin of |x|) with PyTorch's norm_backward as its gradient: the cotangent
    shared among the elements whose |x| is the norm or NaN, times sgn(x), which is 0 at a NaN (amax's
    gradient is NaN along a line holding a NaN). Piecewise linear: the form's higher derivatives (zero)
    are the norm's."""
    if not float_gradient(x):
        return norm
    t = x.detach()
    a, n = t.abs(), _axes_kept(x, norm.detach(), dim, keepdim)
    hit = ((a == n) | (a != a)).to(x.dtype)
    coef = where(t != t, 0.0, t.sign()) * hit / hit.sum(dim, keepdim=True)
    return apply("straight_through", (x * coef).sum(dim, keepdim), norm)


def _zeros_times_norm(x: Tensor, norm: Tensor, dim, keepdim: bool) -> Tensor:
    """An ord < 1 norm, whose gradient at a zero element is PyTorch's norm_backward there: 0 times
    norm ** (1 - ord), NaN where the norm is infinite or NaN (the composite's where gives 0)."""
    if not float_gradient(x):
        return norm
    n = _axes_kept(x, norm.detach(), dim, keepdim)
    nan_at = (x.detach() == 0) & ~(n - n == 0)  # n - n is 0 exactly where n is finite
    return apply("straight_through", norm + (x * where(nan_at, float("nan"), 0.0)).sum(dim, keepdim), norm)
