"""Composite functions written in Python over primitives, so later passes see — and fuse — the
primitives. Exposed as flame.nn.functional (PyTorch names)."""

from __future__ import annotations

import math
import warnings

import numpy as np

from flame.errors import ArgumentError, AutogradError, DTypeError, FlameError, IndexValueError, ShapeError
from flame.frontend import fp8, torch_formulas
from flame.frontend.autocast import get_fp8_recipe, policy
from flame.frontend.context import current_trace, grad_enabled, no_grad, user_location, user_stacklevel
from flame.frontend.creation import Generator, default_generator, ones, zeros
from flame.frontend.default_dtype import as_floating
from flame.frontend.dispatch import apply
from flame.frontend.gemm_add import bias_vector, matmul_add, rounds_once, scaled_add
from flame.frontend.index_ops import check_indices, embedding_rows
from flame.frontend.norms import floating_only, param_dtype, widened
from flame.frontend.opmath import wants_gradient
from flame.frontend.promotion import bool_as_number, broadcast_promoted, same_dtype
from flame.frontend.spatial import _err
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import matmul, where
from flame.frontend.torch_saves import saves
from flame.ir import registry
from flame.ir.builder import _with_loc
from flame.ir.dtypes import bf16, boolean, f16, f32
from flame.runtime.backend import attention_lowering

__all__ = ["alpha_dropout", "dropout", "dropout1d", "dropout2d", "dropout3d", "embedding", "feature_alpha_dropout",
           "gelu", "layer_norm", "leaky_relu", "linear", "log_softmax", "logsumexp", "mse_loss", "relu", "rms_norm",
           "scaled_dot_product_attention", "sigmoid", "silu", "softmax", "tanh"]


def _loss_reduce(x: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return x.mean()
    if reduction == "sum":
        return x.sum()
    if reduction == "none":
        return x
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def weighted_loss_reduce(x: Tensor, weight: Tensor | None, input: Tensor, reduction: str,  # noqa: A002
                         mean_over_weights: bool) -> Tensor:
    """An elementwise loss times its optional weight (of the input's shape, as PyTorch checks), reduced as
    PyTorch's l1, mse (mean_over_weights: the mean divides by the summed weights) and huber (the mean of
    the products)."""
    if weight is None:
        return _loss_reduce(x, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ShapeError(f"Weights and input must have the same size. (weight {list(weight.shape)}, input "
                         f"{list(input.shape)})\n  at {user_location()}")
    x = x * weight
    if reduction == "mean" and mean_over_weights:
        return x.sum() / weight.sum()
    return _loss_reduce(x, reduction)


def no_legacy_reduction(name: str, size_average, reduce) -> None:
    """Refuse torch's deprecated size_average / reduce (they take the places torch gives them, so that a
    reduction passed in one of those places is not read as the reduction)."""
    if size_average is not None or reduce is not None:
        raise ValueError(f"{name}: size_average and reduce are PyTorch's deprecated spellings of reduction; pass "
                         f"reduction='mean', 'sum' or 'none'\n  at {user_location()}")


def no_weight_grad(fn: str, weight: Tensor | None, argument: str = "weight") -> None:
    """Refuse a class weight (or the `argument` named) that requires grad where PyTorch's loss `fn` (its
    kernel's name) does not differentiate with respect to it (nll_loss, cross_entropy with class indices,
    multi_margin_loss; soft_margin_loss's target): it raises at the call while grad mode is on, where flame
    would otherwise give it a gradient."""
    if weight is not None and weight.requires_grad and grad_enabled.get():
        raise AutogradError(
            f"The function '{fn}' is not differentiable with respect to argument '{argument}'. This input "
            f"cannot have requires_grad True. (pass {argument}.detach())\n  at {user_location()}"
        )


def relu(input: Tensor) -> Tensor:  # noqa: A002
    return input.relu()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    floating_only("gelu", input)
    return input.gelu(approximate)


def silu(input: Tensor) -> Tensor:  # noqa: A002
    floating_only("silu", input)
    return input.silu()


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    return input.tanh()


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:  # noqa: A002
    floating_only("leaky_relu", input)
    return input.leaky_relu(negative_slope)


def softmax_dim(name: str, ndim: int, dim: int | None) -> int:
    """torch's implicit dim of softmax, log_softmax and softmin called without one (0 for 0-, 1- and 3-D
    inputs, else 1), with its deprecation warning."""
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as "
                  f"an argument.", UserWarning, stacklevel=user_stacklevel())
    return 0 if ndim in (0, 1, 3) else 1


def _empty_along(x: Tensor, dim: int) -> bool:
    """True when x has no elements along dim (a softmax over it is empty; its max has no identity)."""
    return x.ndim > 0 and -x.ndim <= dim < x.ndim and x.shape[dim] == 0


@policy("f32", cpu="")  # autocast: runs in f32, as on PyTorch's CUDA list; on none of its CPU lists
@saves("result", vjp=torch_formulas.softmax)
def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:  # noqa: A002
    """exp(x) / sum(exp(x)) along dim (in dtype when given); without dim, torch's implicit choice."""
    x = input.to(dtype) if dtype is not None else input
    floating_only("softmax", x, fix="pass dtype=flame.float32 or convert with .float()")
    dim = softmax_dim("softmax", x.ndim, dim)
    if _empty_along(x, dim):
        return x * 1
    if x.dtype in (f16, bf16):
        return _rounded_softmax(x, dim)
    return _softmax(x, dim)


def _rounded_softmax(x: Tensor, dim: int) -> Tensor:
    """An f16 / bf16 softmax as PyTorch's kernels compute it: the value in f32, rounded once; the gradient
    y * (g - sum(g * y)) in f32 from the rounded result y, rounded once. The gradient is that of a form
    w * y - y * sum(w * y) (w: x in f32, y held constant) whose value is not used (straight_through;
    passes/rewrite_attention.py takes it for part of a softmax)."""
    value = _softmax(x.float(), dim).to(x.dtype)
    if not wants_gradient(x):
        return value
    w, y = x.float(), value.detach().float()
    form = w * y - y * (w * y).sum(dim, keepdim=True)
    return apply("straight_through", form.to(x.dtype), value)


def _softmax(x: Tensor, dim: int) -> Tensor:
    # the max only keeps exp() in range: the result does not depend on it, so neither does the
    # gradient (detached, as in PyTorch; otherwise autodiff adds terms that cancel to rounding error)
    e = (x - x.amax(dim, keepdim=True).detach()).exp()
    return e / e.sum(dim, keepdim=True)


@policy("f32", cpu="")  # autocast: runs in f32, as on PyTorch's CUDA list; on none of its CPU lists
@saves("x", "result", vjp=torch_formulas.logsumexp)
def logsumexp(x: Tensor, dim: int = -1, keepdim: bool = False) -> Tensor:
    x = as_floating(x)  # integers and bools: in the default float dtype (x - max must not wrap), as torch's
    if _empty_along(x, dim):  # the sum of no terms: log(0) = -inf, as in PyTorch
        out = x.exp().sum(dim, keepdim=True).log()
        return out if keepdim else out.squeeze(dim)
    m = x.amax(dim, keepdim=True).detach()  # a shift the result does not depend on (see softmax)
    m = apply("where", m.abs() < float("inf"), m, 0.0)  # an infinite max would give inf - inf = NaN
    out = (x - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze(dim)


@policy("f32", cpu="")  # autocast: runs in f32, as on PyTorch's CUDA list; on none of its CPU lists
@saves("result", vjp=torch_formulas.log_softmax)
def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:  # noqa: A002
    """x - logsumexp(x) along dim (in dtype when given); without dim, torch's implicit choice."""
    x = input.to(dtype) if dtype is not None else input
    floating_only("log_softmax", x, fix="pass dtype=flame.float32 or convert with .float()")
    dim = softmax_dim("log_softmax", x.ndim, dim)
    if _empty_along(x, dim):
        return x * 1
    if x.dtype in (f16, bf16):
        return _rounded_log_softmax(x, dim)
    return _log_softmax(x, dim)


def _log_softmax(x: Tensor, dim: int) -> Tensor:
    # PyTorch's arithmetic: (x - max) - log(sum(exp(x - max))), the max unguarded (unlike logsumexp's), so a
    # line whose max is +inf (or that is all -inf) is NaN throughout, as torch's, not -inf beside an inf
    shifted = x - x.amax(dim, keepdim=True).detach()
    return shifted - shifted.exp().sum(dim, keepdim=True).log()


def unguarded_logsumexp(x: Tensor, dim: int) -> Tensor:
    """logsumexp whose value is NaN where the line's max is infinite, as the log-sum inside PyTorch's
    log_softmax (and so cross_entropy): -log_softmax(x)[t] = this - x[t]."""
    m = x.amax(dim, keepdim=True).detach()
    return ((x - m).exp().sum(dim, keepdim=True).log() + m).squeeze(dim)


def _rounded_log_softmax(x: Tensor, dim: int) -> Tensor:
    """An f16 / bf16 log_softmax as PyTorch's CUDA kernel computes it: in f32 (the row's maximum and
    log-sum too), rounded once; the gradient g - exp(y) * sum(g) in f32 from the rounded result y,
    rounded once, as its backward kernels: that of a form w - sum(exp(y) * w) (y held constant) whose
    value is not used (straight_through)."""
    w = x.float()
    value = _log_softmax(w, dim).to(x.dtype)
    if not wants_gradient(x):
        return value
    form = w - (value.detach().float().exp() * w).sum(dim, keepdim=True)
    return apply("straight_through", form.to(x.dtype), value)


@policy("f32", cpu="")  # autocast: runs in f32, as on PyTorch's CUDA list; on none of its CPU lists
@saves("input", "weight", "bias", vjp=torch_formulas.layer_norm)
def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,  # noqa: A002
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the trailing normalized_shape dims, then weight and bias; in the
    input's dtype. An f16/bf16 input (weight and bias of its dtype or f32) computes the statistics, the
    normalised value and the affine step in f32 and rounds the result once, as PyTorch's; its backward
    keeps the input and the f32 row statistics (passes/remat.py recomputes the rest)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[-len(shape):]) != shape:
        raise ShapeError(f"layer_norm: input {list(input.shape)} does not end with normalized_shape "
                         f"{list(shape)}\n  at {user_location()}")
    param_dtype("layer_norm", input, weight, bias)
    x, weight, bias = widened(input), widened(weight), widened(bias)  # f16/bf16: in f32, rounded once
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    mu = x.mean(dims, keepdim=True)
    d = x - mu
    y = d * ((d * d).mean(dims, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * weight
    return (y + bias if bias is not None else y).to(input.dtype)



@policy("f32", cpu="")  # autocast: runs in f32, as on PyTorch's CUDA list; on none of its CPU lists
def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,  # noqa: A002
             eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2 over the normalized dims) + eps) * weight, in the input's dtype whatever the
    weight's (an f16/bf16 input computes in f32 and is rounded once, as PyTorch's); eps=None is the machine
    epsilon of the dtype PyTorch computes in (f32 for f16/bf16 inputs), as in PyTorch."""
    x = input
    if weight is not None and weight.dtype != x.dtype and x.dtype.is_float and x.dtype.itemsize == 2:
        x, weight = x.float(), weight.float()
    if eps is None:
        eps = float(np.finfo(np.float32 if x.dtype.itemsize == 2 else x.dtype.np_dtype).eps)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape or len(shape) > x.ndim:
        raise ShapeError(f"rms_norm: input {list(x.shape)} does not end with normalized_shape {list(shape)}"
                         f"\n  at {user_location()}")
    if weight is not None and tuple(weight.shape) != shape:
        raise ShapeError(f"rms_norm: weight {list(weight.shape)} must have the normalized_shape {list(shape)}"
                         f"\n  at {user_location()}")
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    x, weight = widened(x), widened(weight)  # an f16/bf16 input computes in f32, rounded once, as PyTorch's
    y = x * ((x * x).mean(dims, keepdim=True) + eps).rsqrt()
    return (y * weight if weight is not None else y).to(input.dtype)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """x @ weight.T + bias, with weight [out_features, in_features] as in PyTorch: an f16/bf16 result is
    rounded once, after the bias is added to the f32 product. Inside an FP8 autocast region its GEMMs
    run in FP8 (frontend/fp8.py)."""
    x = input
    recipe = get_fp8_recipe()
    if recipe is not None and fp8.eligible(x, weight):
        _check_linear(x, weight, same_dtype=False)  # each operand is cast to FP8 from its own dtype
        return fp8.linear(x, weight, bias, recipe)
    return _linear(x, weight, bias)


linear.autocast = "lower"  # its policy outside FP8 regions (autocast.policy)


@policy("lower")  # autocast: input, weight and bias in the autocast dtype
def _linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    _check_linear(x, weight)
    same_dtype("linear", input=x, weight=weight, bias=bias)  # a bias of another dtype: torch's addmm refuses it
    # with a bias: added before the product's one rounding, as PyTorch's addmm (matmul_add); a 2-D input's
    # bias of any shape that broadcasts to the result is addmm's input, added before the rounding too
    if bias is None:
        return matmul(x, weight.T)
    n = weight.shape[0]
    if x.ndim == 2 and not bias_vector(bias, n) and rounds_once(x, weight, bias, (x.shape[0], n)):
        return scaled_add(x, weight.T, bias)
    return matmul_add(x, weight.T, bias)


def _check_linear(x: Tensor, weight: Tensor, same_dtype: bool = True) -> None:
    if x.shape[-1] != weight.shape[-1]:
        raise ShapeError(f"linear: input {x.dtype}{list(x.shape)} has {x.shape[-1]} features but the weight "
                         f"{list(weight.shape)} expects {weight.shape[-1]}\n  at {user_location()}")
    if same_dtype and x.dtype != weight.dtype:  # PyTorch raises too ("mat1 and mat2 must have the same dtype")
        raise DTypeError(f"linear: input {x.dtype}{list(x.shape)} and weight {weight.dtype}{list(weight.shape)} "
                         f"have different dtypes, as PyTorch does not allow; convert the input with "
                         f".to({weight.dtype.name!r}) (a NumPy float64 batch: .astype(np.float32))"
                         f"\n  at {user_location()}")


def warn_if_broadcast(loss: str, input: Tensor, target: Tensor) -> None:  # noqa: A002
    """PyTorch's UserWarning when an elementwise loss's target has another shape than its input (a
    [8, 1] prediction against [8] labels broadcasts to [8, 8] and trains on the wrong loss)."""
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(f"{loss}: using a target size {list(target.shape)} that is different to the input size "
                      f"{list(input.shape)}. This will likely lead to incorrect results due to broadcasting. "
                      f"Please ensure they have the same size.", UserWarning, stacklevel=user_stacklevel())


@policy("f32")  # autocast: runs in f32, as on PyTorch's list
@saves(lambda given: ("input", "target") if given.get("weight") is None else torch_formulas.weight_saved(given),
       vjp=torch_formulas.mse_loss)
def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,  # noqa: A002
             reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """mean((input - target)^2) (or its sum, or per element); warns as PyTorch does when the shapes
    differ and would broadcast. weight (the input's shape) scales each element; the mean is then the
    weighted sum over the summed weights, as PyTorch's."""
    no_legacy_reduction("mse_loss", size_average, reduce)
    warn_if_broadcast("mse_loss", input, target)
    input, target = bool_as_number(*broadcast_promoted(input, target))
    d = input - target
    return weighted_loss_reduce(d * d, weight, input, reduction, True)


def cross_entropy_labels(logits: Tensor, target: Tensor, reduction: str = "mean",
                         label_smoothing: float = 0.0, ignore_index: int | None = None) -> Tensor:
    """Cross-entropy of [N, C] logits against integer class labels [N], without class weights (the fast
    path of flame.frontend.losses.cross_entropy, which has PyTorch's signature). Labels equal to ignore_index
    (PyTorch's -100 when not given) add nothing to the loss or the gradient and are left out of the
    mean; another label outside [0, C) raises IndexError. Inside @flame.compile the labels are not
    known while tracing: the graph masks them (an ignored label adds nothing, an out-of-range one makes
    the loss NaN), whether ignore_index is given or is PyTorch's default."""
    if logits.ndim != 2 or target.ndim != 1 or target.shape[0] != logits.shape[0]:
        raise ShapeError(f"cross_entropy: expected logits [N, C] and labels [N], got {list(logits.shape)} "
                         f"and {list(target.shape)}\n  at {user_location()}")
    if target.dtype.is_float:
        raise ShapeError(f"cross_entropy: labels must be integers, got {target.dtype}\n  at {user_location()}")
    masked = _check_labels(target, logits.shape[1], ignore_index)
    ignore_index = -100 if ignore_index is None else ignore_index
    labels = target
    if masked:
        ok = _in_range(target, logits.shape[1])
        labels = apply("where", ok, target, 0)
        keep = target != ignore_index
    if masked and reduction == "mean":
        # the mean over the kept labels as a weighted sum, each row's weight (1 / count, or 0 where
        # ignored) computed from the labels alone, first: the logits' gradient then needs nothing computed
        # after their row kernel and is written by it, as without ignored labels (one pass over [N, C])
        count = keep.to(logits.dtype if logits.dtype.itemsize >= 4 else f32).sum()  # exact to 2**24 labels
        share = apply("where", keep, 1.0 / count, 0.0).to(logits.dtype)
    # -log_softmax(x)[t] = logsumexp(x) - x[t]: the same arithmetic as gathering from log_softmax, but
    # the [N, C] log-probabilities are never materialised (and the backward fuses into one row kernel)
    lse = unguarded_logsumexp(logits, 1)  # NaN for a row whose max is infinite, as torch's
    nll = lse - logits.gather(1, labels.unsqueeze(1)).squeeze(1)
    if label_smoothing:
        nll = nll * (1 - label_smoothing) - (logits.mean(1) - lse) * label_smoothing
    if not masked:
        return _loss_reduce(nll, reduction)
    nll = apply("where", keep, apply("where", ok, nll, float("nan")), 0.0)
    if reduction != "mean":
        return _loss_reduce(nll, reduction)
    return apply("where", count == 0, float("nan"), (nll * share).sum())  # torch's 0 / 0, with a 0 gradient


def _in_range(target: Tensor, n_classes: int) -> Tensor:
    return (target >= 0) & (target < n_classes)


def _check_labels(target: Tensor, n_classes: int, ignore_index: int | None) -> bool:
    """Eager labels are checked now (IndexValueError for one outside [0, C) that is not ignore_index);
    returns whether the loss must mask labels: some are ignored, or they are traced (unknown now)."""
    if target._value is not None:
        return True
    ignore_index = -100 if ignore_index is None else ignore_index
    t = target.numpy()
    bad = (t != ignore_index) & ((t < 0) | (t >= n_classes))
    if bad.any():
        raise IndexValueError(f"cross_entropy: target {int(t[bad][0])} is out of bounds for {n_classes} classes"
                              f"\n  at {user_location()}")
    return bool((t == ignore_index).any())


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,  # noqa: A002
              max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    """weight's rows at input; an index outside [0, rows) raises (frontend/index_ops.py). The row
    padding_idx gets no gradient (its lookups still give what it holds), as torch's. With max_norm, the
    looked-up rows of weight whose norm_type-norm exceeds max_norm are first scaled in place to that
    norm (no gradient through the scaling); scale_grad_by_freq divides each row's gradient by how often
    input holds it."""
    if sparse:
        raise NotImplementedError(f"embedding: sparse gradients are not supported; use sparse=False (a dense "
                                  f"gradient)\n  at {user_location()}")
    if isinstance(input, Tensor) and not input.dtype.is_int:
        raise DTypeError(f"embedding: indices {input.dtype}{list(input.shape)} must be an integer tensor (int64 or "
                         f"int32), as torch's: convert them with .long()\n  at {user_location()}")
    if padding_idx is not None:
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise ArgumentError(f"embedding: padding_idx {padding_idx} must be within num_embeddings "
                                f"({weight.shape[0]})\n  at {user_location()}")
        mask = np.ones((weight.shape[0], 1), dtype=weight.dtype.np_dtype)
        mask[padding_idx % weight.shape[0]] = 0
    if max_norm is not None:
        embedding_renorm_(weight, input, max_norm, norm_type)
    if padding_idx is not None:
        weight = rows_without_grad(weight, Tensor(mask))
    out = embedding_rows(weight, input)
    return rows_scaled_by_freq(out, input, weight.shape[0]) if scale_grad_by_freq else out


def embedding_renorm_(weight: Tensor, input: Tensor, max_norm: float, norm_type: float) -> Tensor:  # noqa: A002
    """torch.embedding_renorm_: the rows of weight that input looks up and whose norm_type-norm exceeds
    max_norm scaled in place by max_norm / (norm + 1e-7), with no gradient (traced, an aliased output)."""
    rows = weight.shape[0]
    check_indices("embedding", input, rows, 0)
    with no_grad():
        flat = input.reshape(-1).long()
        hit = zeros(rows, dtype=weight.dtype).scatter_add(0, flat, ones(flat.shape[0], dtype=weight.dtype)) > 0
        norm = weight.norm(norm_type, dim=-1, keepdim=True)
        shrink = hit.reshape(rows, 1) & (norm > max_norm)
        weight.copy_(apply("where", shrink, weight * (max_norm / (norm + 1e-7)), weight))
    return weight


def rows_scaled_by_freq(out: Tensor, input: Tensor, rows: int) -> Tensor:  # noqa: A002
    """out (the rows looked up at input) with the gradient of each lookup divided by how often input
    holds its index: embedding's scale_grad_by_freq. The values are out's."""
    flat = input.reshape(-1).long()
    one = ones(flat.shape[0], dtype=out.dtype)
    counts = zeros(rows, dtype=out.dtype).scatter_add(0, flat, one)[flat]
    share = (1.0 / counts).reshape(*input.shape, *([1] * (out.ndim - input.ndim)))
    frozen = out.detach()
    return frozen + (out - frozen) * share


def rows_without_grad(weight: Tensor, row_mask: Tensor) -> Tensor:
    """weight's values, with no gradient flowing to the rows where row_mask ([rows, 1], 0 or 1) is 0."""
    return apply("where", row_mask != 0, weight, weight.detach())


def check_dropout_p(p: float) -> None:
    """Raise torch's ValueError unless the dropout probability p is in [0, 1] (NaN included)."""
    if not 0.0 <= p <= 1.0:
        raise ArgumentError(f"dropout probability has to be between 0 and 1, but got {p}\n  at {user_location()}")


def dropout(input: Tensor, p: float = 0.5, training: bool = True,  # noqa: A002
            *, generator: Generator | None = None) -> Tensor:
    """Elements zeroed with probability p (the rest scaled by 1 / (1 - p)) when training (torch's
    `inplace` is activations_inplace.dropout's). p = 1 zeroes everything as torch does: input * 0
    (NaN where the input is not finite), with a zero gradient."""
    check_dropout_p(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    keep = (generator or default_generator()).draw("random_uniform", input.shape, input.dtype) >= p
    return apply("where", keep, input * (1.0 / (1.0 - p)), 0.0)


_SELU_ALPHA = 1.7580993408473766  # -selu's scale * alpha: the value SELU tends to at -infinity


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,  # noqa: A002
                  *, generator: Generator | None = None) -> Tensor:
    """Dropout that keeps SELU's self-normalisation, as torch's: when training, each element is set with
    probability p to SELU's negative saturation -1.7581 and the result moved and scaled (a * x + b, with
    a = ((1 - p) * (1 + p * 1.7581^2))^-1/2) so its mean and variance stay those of the input; identity
    in eval."""
    return _alpha_dropout(input, p, training, input.shape, generator)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,  # noqa: A002
                          *, generator: Generator | None = None) -> Tensor:
    """alpha_dropout of whole channels: one draw per (sample, channel), shared by its positions."""
    return _alpha_dropout(input, p, training, _feature_noise_shape, generator)


def _feature_noise_shape(x: Tensor) -> tuple[int, ...]:
    """torch's feature dropout noise: one value per (dim 0, dim 1) pair, shared along the other dims; it
    needs 2 dims (checked only when a mask is drawn: in training, 0 < p < 1, a non-empty input)."""
    if x.ndim < 2:
        raise _err(f"Feature dropout requires at least 2 dimensions in the input, got {list(x.shape)}")
    return (*x.shape[:2], *([1] * (x.ndim - 2)))


def _alpha_dropout(input: Tensor, p: float, training: bool, noise_shape,  # noqa: A002
                   generator) -> Tensor:
    check_dropout_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input * 0.0
    noise_shape = noise_shape(input) if callable(noise_shape) else noise_shape
    a = 1.0 / math.sqrt((_SELU_ALPHA * _SELU_ALPHA * p + 1.0) * (1.0 - p))
    draw = (generator or default_generator()).draw("random_uniform", noise_shape, input.dtype)
    keep = (draw >= p).to(input.dtype)
    shift = (keep - 1.0) * (_SELU_ALPHA * a) + _SELU_ALPHA * a * p  # torch's b: 0 kept, -1 dropped
    return input * (keep * a) + shift


def _feature_dropout(input: Tensor, p: float, training: bool, generator, batched: bool = True) -> Tensor:  # noqa: A002
    """torch's feature_dropout: whole channels zeroed with probability p (the rest scaled by 1 / (1 - p)),
    a mask of one value per (dim 0, dim 1) pair broadcast over the other dims; unbatched: the input taken
    as one sample (a mask value per dim-0 index)."""
    check_dropout_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input * 0.0
    x = input if batched else input.unsqueeze(0)
    keep = dropout(ones(*_feature_noise_shape(x), dtype=x.dtype), p, True, generator=generator)
    return x * keep if batched else (x * keep).squeeze(0)


def _warn_rank(name: str, x: Tensor, ranks: tuple[int, int], spatial: int) -> None:
    """torch's deprecation warning for a channel dropout given a rank other than its two."""
    if x.ndim not in ranks:
        warnings.warn(f"{name}: Received a {x.ndim}-D input to {name}, which is deprecated and will result in an "
                      f"error in a future release. To retain the behavior and silence this warning, please use "
                      f"dropout instead. Note that {name} exists to provide channel-wise dropout on inputs with "
                      f"{spatial} spatial dimensions, a channel dimension, and an optional batch dimension (i.e. "
                      f"{ranks[0]}D or {ranks[1]}D inputs).", UserWarning, stacklevel=user_stacklevel())


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True,  # noqa: A002
              *, generator=None) -> Tensor:
    """Channel dropout of [N, C, L] (or [C, L])."""
    if input.ndim not in (2, 3):
        raise _err(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that dropout1d "
                   f"exists to provide channel-wise dropout on inputs with 1 spatial dimension, a channel dimension, "
                   f"and an optional batch dimension (i.e. 2D or 3D inputs).")
    return _feature_dropout(input, p, training, generator, batched=input.ndim == 3)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True,  # noqa: A002
              *, generator=None) -> Tensor:
    """Channel dropout of [N, C, H, W]. A 3-D input is [N, C, L], one mask value per (sample, channel), with
    PyTorch's warning: as torch's, not an unbatched [C, H, W] (its dropout2d keeps that for now); another
    rank warns as torch's and drops along dims 0 and 1 as torch's feature_dropout."""
    _warn_rank("dropout2d", input, (3, 4), 2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout "
                      "behavior is desired - input is interpreted as shape (N, C, L), where C is the channel dim. "
                      "This behavior will change in a future release to interpret the input as one without a "
                      "batch dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, "
                      "please switch to using dropout1d instead.", UserWarning, stacklevel=user_stacklevel())
    return _feature_dropout(input, p, training, generator)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True,  # noqa: A002
              *, generator=None) -> Tensor:
    """Channel dropout of [N, C, D, H, W] (or [C, D, H, W]); another rank warns as torch's and is taken
    as unbatched, as torch's (one mask value per dim-0 index)."""
    _warn_rank("dropout3d", input, (4, 5), 3)
    return _feature_dropout(input, p, training, generator, batched=input.ndim == 5)




def _attention_saves(given: dict) -> tuple[str, ...]:
    """What torch's node of scaled_dot_product_attention saves, by the kernel torch's CPU dispatch picks:
    its fused kernel (4-d query, key and value of one batch and head count, or key's heads dividing
    query's with enable_gqa; one head size; no dropout; a mask that requires no grad, 2-d or 4-d, of
    query's batch and heads or 1) saves the three, a float mask and the result; the math path saves
    only value (its last matmul's operand, where expanding value to the batch is a view of it and no
    heads are repeated for enable_gqa); with no keys or an empty result torch computes zeros that save
    nothing."""
    q, k, v, mask = (given.get(n) for n in ("query", "key", "value", "attn_mask"))
    if 0 in (*q.shape[:-1], *k.shape[:-1], *v.shape[:-2], v.shape[-1]):
        return ()
    gqa = given.get("enable_gqa", False)
    fused = q.ndim == k.ndim == v.ndim == 4
    heads = q.shape[1] if fused else 0
    fused = (fused and k.shape[1] == v.shape[1] and (heads % k.shape[1] == 0 if gqa else heads == k.shape[1])
             and q.shape[0] == k.shape[0] == v.shape[0]
             and q.shape[-1] == k.shape[-1] == v.shape[-1] and not given.get("dropout_p", 0.0))
    if fused and mask is not None:
        lead = mask.ndim == 2 or mask.ndim == 4 and mask.shape[0] in (1, q.shape[0]) and mask.shape[1] in (1, heads)
        fused = (not mask.requires_grad and lead and mask.shape[-2] in (1, q.shape[-2])
                 and mask.shape[-1] in (1, k.shape[-2]))
    if fused:
        return ("query", "key", "value", "result", *(("attn_mask",) if mask is not None and mask.dtype.is_float
                                                     else ()))
    if not (q.requires_grad or k.requires_grad or mask is not None and mask.requires_grad):
        return ()
    if gqa and v.ndim >= 3 and q.ndim >= 3 and v.shape[-3] != q.shape[-3]:
        return ()  # (value's heads repeated: a copy)
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:  # (the op names the shapes)
        return ()
    own = (1,) * (len(batch) - v.ndim + 2) + tuple(v.shape[:-2])
    spread = {m == 1 for m, n in zip(own, batch) if n != 1}  # which of the batch dims value is expanded along
    return ("value",) if len(spread) <= 1 else ()


@saves(_attention_saves)
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(query @ key^T * scale + mask) @ value as ONE op, with PyTorch's semantics.

    query [..., H, L, E], key [..., Hkv, S, E], value [..., Hkv, S, Ev] -> [..., H, L, Ev]; Hkv must
    equal H unless enable_gqa (then it divides H); the leading dimensions of the three broadcast (with
    enable_gqa those before the heads), as torch's. attn_mask broadcasts to [..., H, L, S]: bool (True =
    the key takes part) or additive in query's dtype, or f32 for any floating query, as torch takes it
    (converted to query's dtype: _mask_as_query). is_causal masks with PyTorch's top-left aligned
    tril(ones(L, S)) and excludes attn_mask. scale defaults to 1/sqrt(E). f16/bf16 compute in f32.
    An additive mask that requires grad (a learned attention bias) gets its gradient, summed to its own
    shape; a bool mask gets none. With no keys (S = 0) the result is zeros + 0 * (query.sum() + key.sum()
    + value.sum()), as torch computes it: zeros, but NaN throughout where any of query, key, value holds a
    NaN or inf; query's gradient is likewise 0 * the sum of the result's gradient (NaN throughout where that
    gradient holds a NaN or inf), the mask's none.
    dropout_p > 0 (p in [0, 1], torch's range; p = 1 drops everything) zeroes each attention probability
    with probability p after the softmax and scales the rest by 1 / (1 - p), as torch's: the mask is drawn
    from flame's generator (flame.manual_seed; inside @flame.compile its state is a graph input) and the
    backward uses the same mask. Such attention is NOT the fused op: it is written out (matmul, scale,
    mask, softmax, dropout, matmul), so the scores and probabilities [..., H, L, S] are materialised in
    memory and neither cuDNN nor the flash kernels run it. dropout_p = 0 is the fused op as ever."""
    p = float(dropout_p)
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"scaled_dot_product_attention: dropout probability has to be between 0 and 1, but "
                           f"got {dropout_p}\n  at {user_location()}")
    scale = 1.0 / math.sqrt(query.shape[-1] or 1) if scale is None else float(scale)  # (no head size: scores 0)
    query, key, value = _broadcast_batch(query, key, value, enable_gqa)
    if attn_mask is not None:
        attn_mask = _mask_as_query(attn_mask, query)
    mask = () if attn_mask is None else (attn_mask,)
    if p and query.shape[-2] and key.shape[-2]:
        _check_attention(query, key, value, attn_mask, scale, is_causal, enable_gqa)
        return _dropout_attention(query, key, value, attn_mask, p, is_causal, scale, enable_gqa)
    trace = current_trace.get()
    if trace is not None:  # the backend chosen (flame.nn.attention.sdpa_kernel) is part of what the trace planned
        trace.read_python(_BACKEND_READ, attention_lowering)
    out = apply("scaled_dot_product_attention", query, key, value, *mask, scale=scale, is_causal=is_causal,
                enable_gqa=enable_gqa)
    if key.shape[-2] == 0:  # torch's no-key result keeps every input in the graph this way
        out = out + (query.sum() + key.sum() + value.sum()) * 0
    return out


def _mask_as_query(mask: Tensor, query: Tensor) -> Tensor:
    """An attention mask in the dtype the op takes: bool or query's. torch takes an f32 mask for any
    floating query too: f64 widens it exactly; f16 / bf16 round it (f16 first clamps finite values to
    its range, so a -1e9 "masked out" stays a large finite number rather than -inf). Another dtype is
    torch's RuntimeError (its message)."""
    if mask.dtype == boolean or mask.dtype == query.dtype or not query.dtype.is_float:
        return mask
    if mask.dtype != f32:
        raise DTypeError(f"Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                         f"attn_mask.dtype: {mask.dtype} and  query.dtype: {query.dtype} instead.\n"
                         f"  at {user_location()}")
    if query.dtype == f16:
        big = 65504.0
        mask = where(mask.isinf(), mask, mask.clamp(-big, big))
    return mask.to(query.dtype)


def _broadcast_batch(query: Tensor, key: Tensor, value: Tensor, enable_gqa: bool) -> tuple[Tensor, Tensor, Tensor]:
    """query, key and value expanded to their common leading dimensions (all but [L, E]; with enable_gqa
    all but [H, L, E], the heads staying each one's own), as torch's attention broadcasts them; shapes that
    do not broadcast are left for the op's checks to name."""
    own = 3 if enable_gqa else 2
    xs = (query, key, value)
    if any(x.ndim < own for x in xs) or len({tuple(x.shape[:-own]) for x in xs}) == 1:
        return xs
    try:
        lead = tuple(np.broadcast_shapes(*[tuple(x.shape[:-own]) for x in xs]))
    except ValueError:
        return xs
    return tuple(x if tuple(x.shape[:-own]) == lead else x.broadcast_to(lead + tuple(x.shape[-own:])) for x in xs)


_BACKEND_READ = "the attention backend (flame.nn.attention.sdpa_kernel, FLAME_ATTENTION)"


def _check_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None, scale: float,
                     is_causal: bool, enable_gqa: bool) -> None:
    """The fused op's checks of shapes, dtypes and masks, for attention written out (the same errors)."""
    types = [x._type() for x in (query, key, value, attn_mask) if x is not None]
    try:
        registry.get("scaled_dot_product_attention").infer(types, scale=scale, is_causal=is_causal,
                                                            enable_gqa=enable_gqa)
    except FlameError as e:
        raise _with_loc(e, user_location()) from None


def _additive(keep: Tensor, dtype) -> Tensor:
    """A bool mask (True = takes part) as torch's attention adds it: 0 where True, -inf elsewhere."""
    return where(keep, 0.0, float("-inf")).to(dtype)


@policy("lower")  # autocast: cast as the fused op is, then written out in the dtype that gives
def _dropout_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None, p: float,
                       is_causal: bool, scale: float, enable_gqa: bool) -> Tensor:
    """Attention with dropout on its probabilities, as torch's math path: softmax(q k^T * scale + mask)
    (a row no key takes part in gives 0, as the fused op's), dropout(p), @ v; f16 / bf16 in f32, the
    result rounded once. Every intermediate is a tensor [..., H, L, S] of its own."""
    dtype = query.dtype
    if dtype in (f16, bf16):
        query, key, value = query.float(), key.float(), value.float()
        if attn_mask is not None and attn_mask.dtype.is_float:
            attn_mask = attn_mask.float()
    if enable_gqa and key.shape[-3] != query.shape[-3]:  # each key / value head serves H / Hkv query heads
        groups = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(groups, -3), value.repeat_interleave(groups, -3)
    scores = matmul(query, key.transpose(-1, -2)) * scale
    if is_causal:  # torch's top-left aligned tril(ones(L, S)) as an additive -inf: every row keeps key 0
        scores = scores + _additive(ones(query.shape[-2], key.shape[-2], dtype=boolean).tril(), scores.dtype)
    if attn_mask is not None:
        scores = scores + (_additive(attn_mask, scores.dtype) if attn_mask.dtype == boolean else attn_mask)
        dead = (scores == float("-inf")).all(-1, keepdim=True)  # rows no key takes part in: 0, not NaN
        probs = apply("where", dead, 0.0, softmax(apply("where", dead, 0.0, scores), -1))
    else:  # (is_causal leaves no row without a key)
        probs = softmax(scores, -1)
    probs = probs * 0.0 if p == 1.0 else dropout(probs, p, True)
    return matmul(probs, value).to(dtype)
