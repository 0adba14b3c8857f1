"""torch's backward formulas of the composites torch records as one node (torch/csrc/autograd/
FunctionsManual.cpp, derivatives.yaml), on what that node saves: the `vjp` of their `saves` declarations
(torch_saves.py). Each is fn(b, g, saved, args, given) -> {parameter name: gradient}: Builder b appends
the ops, g is the result's cotangent, `saved` the values torch's node saved as the backward reads them
(a write through .data since: the new values), `args` the tensor arguments as the composite read them,
`given` the call's other arguments. flame differentiates a composite through its own ops, which gives
the same gradient while nothing changed what torch's node saved; these run only where a write through
.data did (data_writes.composite_vjp). softmax, log_softmax, var, std, softplus, sinc, layer_norm and
group_norm compute an f16 / bf16 gradient in f32 and round it once, as torch's kernels; the others compute
in the saved values' dtype."""

from __future__ import annotations

import math

import numpy as np

from flame.frontend.opmath import var_correction
from flame.frontend.tensor import reduce_axes
from flame.ir.dtypes import bf16, f16, f32
from flame.ir.graph import Value


def _wide(b, v: Value) -> Value:
    return b.cast(v, dtype=f32) if v.dtype in (f16, bf16) else v


def _to(b, v: Value, like: Value) -> Value:
    return b.cast(v, dtype=like.dtype) if v.dtype != like.dtype else v


def _sum(b, v: Value, axes) -> Value:
    """v summed over axes, kept as size 1 (a 0-d v, no axes: v)."""
    return b.reduce_sum(v, axes=list(axes), keepdim=True) if axes else v


def _kept(b, v: Value, shape: tuple, axes, keepdim: bool) -> Value:
    """A reduction's result (or its cotangent) with the reduced axes as size 1, broadcasting against shape."""
    if keepdim or not axes:
        return v
    return b.reshape(v, shape=tuple(1 if i in axes else n for i, n in enumerate(shape)))


def _softmax_axes(dim, rank: int) -> tuple:
    if dim is None:  # torch's implicit dim (functional.softmax_dim)
        dim = 0 if rank in (0, 1, 3) else 1
    return (dim % rank,) if rank else ()


def softmax(b, g, saved, args, given) -> dict:
    """_softmax_backward_data: y * (g - sum(g * y)) along dim, y the saved result."""
    y = saved["result"]
    w, gw = _wide(b, y), _wide(b, g)
    axes = _softmax_axes(given["dim"], y.type.rank)
    return {"input": _to(b, b.mul(w, b.sub(gw, _sum(b, b.mul(gw, w), axes))), y)}


def log_softmax(b, g, saved, args, given) -> dict:
    """_log_softmax_backward_data: g - exp(y) * sum(g) along dim, y the saved result."""
    y = saved["result"]
    w, gw = _wide(b, y), _wide(b, g)
    axes = _softmax_axes(given["dim"], y.type.rank)
    return {"input": _to(b, b.sub(gw, b.mul(b.exp(w), _sum(b, gw, axes))), y)}


def logsumexp(b, g, saved, args, given) -> dict:
    """logsumexp_backward: g * exp(self - result), the saved input and result."""
    x, res = saved["x"], saved["result"]
    axes = (given["dim"] % x.type.rank,) if x.type.rank else ()
    g, res = (_kept(b, v, x.shape, axes, given["keepdim"]) for v in (g, res))
    return {"x": b.mul(g, b.exp(b.sub(x, res)))}


def prod(b, g, saved, args, given) -> dict:
    """prod_backward: g * (result / self) where self holds no zero; else g times the product of the other
    elements along dim (prod_safe_zeros_backward), and of every element 0 where two or more are zero."""
    x, res = saved["self"], saved["result"]
    x = _to(b, x, res)
    if x.type.rank == 0:
        return {"self": g}
    whole = given["dim"] is None
    if whole:
        shape, x = x.shape, b.reshape(x, shape=(int(np.prod(x.shape)),))
        g, res, axis = b.reshape(g, shape=(1,)), b.reshape(res, shape=(1,)), 0
    else:
        axis = given["dim"] % x.type.rank
        g, res = (_kept(b, v, x.shape, (axis,), given["keepdim"]) for v in (g, res))
    n = x.shape[axis]
    one = b.const(1, x.dtype, tuple(1 if a == axis else m for a, m in enumerate(x.shape)))

    def part(start: int) -> Value:
        return b.slice(x, starts=[start if a == axis else 0 for a in range(x.type.rank)],
                       stops=[start + n - 1 if a == axis else m for a, m in enumerate(x.shape)],
                       steps=[1] * x.type.rank)

    before = b.cumprod(b.concat(one, part(0), axis=axis), axis=axis)
    after = b.flip(b.cumprod(b.concat(one, b.flip(part(1), axes=[axis]), axis=axis), axis=axis), axes=[axis])
    zeros = b.reduce_sum(b.cast(b.eq(x, 0.0), dtype=x.dtype), axes=list(range(x.type.rank)), keepdim=False)
    others = b.mul(before, after)
    if whole:
        others = b.where(b.gt(zeros, 1.0), 0.0, others)
    grad = b.mul(g, b.where(b.gt(zeros, 0.0), others, b.div(res, x)))
    return {"self": b.reshape(grad, shape=shape) if whole else grad}


def vector_norm(b, g, saved, args, given) -> dict:
    """norm_backward on the saved input and result."""
    x, norm = saved["input"], saved["result"]
    axes = reduce_axes(given["dim"], x.type.rank, "vector_norm")
    return {"input": _norm_backward(b, g, _to(b, x, norm), norm, float(given["ord"]), axes, given["keepdim"])}


def _norm_backward(b, g, x: Value, norm: Value, p: float, axes, keepdim: bool) -> Value | None:
    """norm_backward: sgn(x) * g for ord 1, g * x / norm for ord 2 (0 where the norm is 0), the share of the
    elements at the norm for ord +-inf, x * |x|^(p-2) * g / norm^(p-1) for other ords (0 where the norm is 0;
    below 1, sgn(x) |x|^(p-1) g norm^(1-p), 0 at x = 0); None for ord 0."""
    g, norm = (_kept(b, v, x.shape, axes, keepdim) for v in (g, norm))
    if p == 0:
        return None
    if p == 1:
        return b.mul(b.sign(x), g)
    if p == 2:
        return b.mul(g, b.where(b.eq(norm, 0.0), 0.0, b.div(x, norm)))
    if np.isinf(p):
        a = b.abs(x)
        hit = b.cast(b.logical_or(b.eq(a, norm), b.ne(a, a)), dtype=x.dtype)
        return b.mul(b.sign(x), b.mul(b.div(g, _sum(b, hit, axes)), hit))
    if p < 1:
        scaled = b.mul(b.sign(x), b.where(b.eq(x, 0.0), 0.0, b.pow(b.abs(x), p - 1)))
        return b.mul(b.mul(scaled, g), b.pow(norm, 1 - p))
    scaled = b.mul(b.sign(x), b.pow(b.abs(x), p - 1)) if p < 2 else b.mul(x, b.pow(b.abs(x), p - 2))
    return b.mul(scaled, b.where(b.eq(norm, 0.0), 0.0, b.div(g, b.pow(norm, p - 1))))


def dist(b, g, saved, args, given) -> dict:
    """dist's backward: norm_backward of self - other (the saved inputs) with the saved result, to self;
    negated to other."""
    norm = saved["result"]
    x = _to(b, b.sub(saved["input"], saved["other"]), norm)
    grad = _norm_backward(b, g, x, norm, float(given["p"]), tuple(range(x.type.rank)), False)
    return {"input": grad, "other": None if grad is None else b.neg(grad)}


def _var_backward(b, g, x: Value, given, op: str) -> Value:
    """var_backward: (2 / (n - correction)) * g * (x - mean(x)) over the reduced axes."""
    dim, c = var_correction(op, given["dim"], given["unbiased"], given["correction"], given["keepdim"])
    axes = reduce_axes(dim, x.type.rank, op)
    n = int(np.prod([x.shape[a] for a in axes]))
    w = _wide(b, x)
    dev = b.sub(w, b.reduce_mean(w, axes=list(axes), keepdim=True)) if axes else b.sub(w, w)
    g = _kept(b, _wide(b, g), x.shape, axes, given["keepdim"])
    return _to(b, b.mul(b.mul(g, dev), 2.0 / (n - c)), x)


def var(b, g, saved, args, given) -> dict:
    return {"self": _var_backward(b, g, saved["self"], given, "var")}


def std(b, g, saved, args, given) -> dict:
    """std_backward: var_backward of g / (2 * result), 0 where the result is 0."""
    res = saved["result"]
    half = b.where(b.eq(res, 0.0), 0.0, b.div(g, b.mul(res, 2.0)))
    return {"self": _var_backward(b, half, saved["self"], given, "std")}


def weight_saved(given: dict) -> tuple:
    """What torch's functional mse_loss / huber_loss with weight= saves of the weight: its mul of the
    unreduced loss by the weight saves the weight where that loss requires grad (its input or target
    does)."""
    x, t = given.get("input"), given.get("target")
    wants = any(getattr(v, "requires_grad", False) for v in (x, t))
    return ("weight",) if given.get("weight") is not None and wants else ()


def mse_loss(b, g, saved, args, given) -> dict:
    """mse_loss_backward: (2 / numel for a mean, else 2) * (input - target) * g, to input and, negated, to
    target (the saved input and target). With weight, torch's functional: the squared difference (as the
    forward computed it) times the weight (as its mul saved it), summed over the summed weights for a mean
    (_weighted_mse)."""
    if "weight" in args:
        return _weighted_mse(b, g, saved, args, given["reduction"])
    x, t = saved["input"], saved["target"]
    d = b.sub(x, t)
    if given["reduction"] == "mean":
        scale = 2.0 / max(int(np.prod(d.shape)), 1)
    else:
        scale = 2.0
    grad = b.mul(b.mul(d, g), scale)
    return {"input": grad, "target": b.neg(grad)}


def _weighted_mse(b, g, saved, args, reduction: str) -> dict:
    d = b.sub(args["input"], args["target"])
    sq, w = b.mul(d, d), args["weight"]
    if reduction == "mean":
        total = b.reduce_sum(w, axes=list(range(w.type.rank)), keepdim=False)
        ge = _mean_scale(b, b.div(g, total), d, "sum")
        ratio = b.div(b.reduce_sum(b.mul(sq, w), axes=list(range(w.type.rank)), keepdim=False), total)
        gw = b.sub(b.mul(ge, sq), _mean_scale(b, b.div(b.mul(g, ratio), total), d, "sum"))
    else:
        ge = _mean_scale(b, g, d, reduction)
        gw = b.mul(ge, sq)
    gin = b.mul(b.mul(d, b.mul(ge, saved.get("weight", w))), 2.0)
    return {"input": gin, "target": b.neg(gin), "weight": gw}


def layer_norm(b, g, saved, args, given) -> dict:
    """native_layer_norm_backward on the saved input and weight, with the row mean and 1/std the forward
    computed (of the input as the forward read it): x_hat = (x - mean) * rstd, dx = rstd * (gw - mean(gw)
    - x_hat * mean(gw * x_hat)) with gw = g * weight, dweight = sum(g * x_hat), dbias = sum(g)."""
    shape = given["normalized_shape"]
    x0 = _wide(b, args["input"])
    axes = list(range(x0.type.rank - (1 if isinstance(shape, int) else len(shape)), x0.type.rank))
    mean = b.reduce_mean(x0, axes=axes, keepdim=True)
    d0 = b.sub(x0, mean)
    rstd = b.rsqrt(b.add(b.reduce_mean(b.mul(d0, d0), axes=axes, keepdim=True), float(given["eps"])))
    gw = _wide(b, g)
    xhat = b.mul(b.sub(_wide(b, saved["input"]), mean), rstd)
    lead = list(range(x0.type.rank - len(axes)))
    got = {}
    if "weight" in args:
        gx = b.mul(gw, _wide(b, saved["weight"]))
        got["weight"] = b.reduce_sum(b.mul(gw, xhat), axes=lead, keepdim=False) if lead else b.mul(gw, xhat)
    else:
        gx = gw
    if "bias" in args:
        got["bias"] = b.reduce_sum(gw, axes=lead, keepdim=False) if lead else gw
    inner = b.sub(b.sub(gx, b.reduce_mean(gx, axes=axes, keepdim=True)),
                  b.mul(xhat, b.reduce_mean(b.mul(gx, xhat), axes=axes, keepdim=True)))
    got["input"] = b.mul(rstd, inner)
    return got


def _mean_scale(b, g: Value, like: Value, reduction: str) -> Value:
    """A loss's cotangent per element of `like`: g over its element count for a mean, g for a sum (both
    broadcast), g itself for no reduction."""
    if reduction == "none":
        return g
    if reduction == "mean":
        g = b.div(g, float(max(int(np.prod(like.shape)), 1)))
    return b.broadcast_to(b.reshape(g, shape=(1,) * like.type.rank), shape=like.shape) if like.type.rank else g


def huber_loss(b, g, saved, args, given) -> dict:
    """huber_loss_backward on the saved input and target: d = input - target; g * delta * sgn(d) where |d|
    exceeds delta, else g * d (over the element count for a mean); negated to target. With weight, as
    torch's functional: the unreduced loss times weight (which its mul saves), reduced."""
    d = b.sub(saved["input"], saved["target"])
    delta = float(given["delta"])
    weight = saved.get("weight")
    ge = _mean_scale(b, g, d, given["reduction"])
    gw = b.mul(ge, weight) if weight is not None else ge
    grad = b.where(b.lt(d, -delta), b.mul(gw, -delta), b.where(b.gt(d, delta), b.mul(gw, delta), b.mul(d, gw)))
    got = {"input": grad, "target": b.neg(grad)}
    if weight is not None:
        d0 = b.sub(args["input"], args["target"])
        a = b.abs(d0)
        loss = b.where(b.lt(a, delta), b.mul(b.mul(d0, d0), 0.5), b.mul(b.sub(a, 0.5 * delta), delta))
        got["weight"] = b.mul(ge, loss)
    return got


def smooth_l1_loss(b, g, saved, args, given) -> dict:
    """smooth_l1_loss_backward on the saved input and target: d = input - target; g * sgn(d) where |d|
    exceeds beta, else g * d / beta (beta 0: g * sgn(d)), over the element count for a mean; negated to
    target."""
    d = b.sub(saved["input"], saved["target"])
    beta = float(given["beta"])
    ge = _mean_scale(b, g, d, given["reduction"])
    if beta == 0:
        grad = b.mul(b.sign(d), ge)
    else:
        grad = b.where(b.lt(d, -beta), b.neg(ge), b.where(b.gt(d, beta), ge, b.div(b.mul(d, ge), beta)))
    return {"input": grad, "target": b.neg(grad)}


def _log_sigmoid(b, z: Value) -> Value:
    """log(sigmoid(z)) = min(z, 0) - log(1 + exp(-|z|))."""
    return b.sub(b.minimum(z, 0.0), b.log(b.add(b.exp(b.neg(b.abs(z))), 1.0)))


def binary_cross_entropy_with_logits(b, g, saved, args, given) -> dict:
    """binary_cross_entropy_with_logits_backward and its target backward on the saved input, target,
    weight and pos_weight: (sigmoid(x) - t) g, or ((p t + 1 - t) sigmoid(x) - p t) g with pos_weight p, to
    input; -x g, or (log_sigmoid(-x) - p log_sigmoid(x)) g, to target; times weight, over the element
    count for a mean."""
    x, t = saved["input"], saved["target"]
    pos, weight = saved.get("pos_weight"), saved.get("weight")
    ge = _mean_scale(b, g, x, given["reduction"])  # (target has input's size, as torch requires)
    if weight is not None:
        ge = b.mul(ge, weight)
    s = b.sigmoid(x)
    if pos is None:
        gin, gt = b.sub(s, t), b.neg(x)
    else:
        pt = b.mul(pos, t)
        gin = b.sub(b.mul(b.sub(b.add(pt, 1.0), t), s), pt)
        gt = b.sub(_log_sigmoid(b, b.neg(x)), b.mul(_log_sigmoid(b, x), pos))
    return {"input": b.mul(gin, ge), "target": b.mul(gt, ge)}


def softplus(b, g, saved, args, given) -> dict:
    """softplus_backward on the saved input: g where beta * x exceeds threshold, else g * z / (z + 1) with
    z = exp(beta * x)."""
    x = _wide(b, saved["input"])
    bx = b.mul(x, float(given["beta"]))
    z = b.exp(bx)
    gw = _wide(b, g)
    grad = b.where(b.gt(bx, float(given["threshold"])), gw, b.div(b.mul(gw, z), b.add(z, 1.0)))
    return {"input": _to(b, grad, g)}


def sinc(b, g, saved, args, given) -> dict:
    """sinc's backward on the saved input: g * (pi x cos(pi x) - sin(pi x)) / (pi x^2), 0 at x = 0."""
    x = _wide(b, saved["input"])
    x = b.cast(x, dtype=g.dtype) if not x.dtype.is_float else x
    px = b.mul(x, float(np.pi))
    d = b.div(b.sub(b.mul(px, b.cos(px)), b.sin(px)), b.mul(px, x))
    return {"input": _to(b, b.mul(_wide(b, g), b.where(b.eq(x, 0.0), 0.0, d)), g)}


def logaddexp2(b, g, saved, args, given) -> dict:
    """logaddexp2's backward on the saved inputs: g / (1 + 2^(other - input)) to input, g / (1 + 2^(input -
    other)) to other."""
    x, y = saved["input"], saved["other"]
    return {"input": b.div(g, b.add(b.pow(2.0, b.sub(y, x)), 1.0)),
            "other": b.div(g, b.add(b.pow(2.0, b.sub(x, y)), 1.0))}


def copysign(b, g, saved, args, given) -> dict:
    """copysign_tensor_self_backward on the saved input and result: g * result / input, 0 where input is 0;
    zeros to other."""
    got = {"other": b.mul(g, 0.0)}
    if "input" in saved:
        x, res = saved["input"], saved["result"]
        got["input"] = b.mul(g, b.where(b.eq(x, 0.0), 0.0, b.div(res, _to(b, x, res))))
    return got


def fmax(b, g, saved, args, given) -> dict:
    """fmax's backward on the saved inputs: g to input where input >= other or other is NaN, else to other."""
    x, y = saved["input"], saved["other"]
    first = b.logical_or(b.ge(x, y), b.ne(y, y))
    return {"input": b.where(first, g, 0.0), "other": b.where(first, 0.0, g)}


def xlogy(b, g, saved, args, given) -> dict:
    """xlogy's backward on the saved inputs: xlogy(g, other), 0 where self is 0 and other <= 0, to self;
    g * self / other to other."""
    x = saved["self"]
    y = saved["other"] if "other" in saved else b.const(float(given["other"]), g.dtype)  # (a number)
    glog = b.where(b.logical_and(b.eq(g, 0.0), b.eq(y, y)), 0.0, b.mul(g, b.log(y)))
    return {"self": b.where(b.logical_and(b.eq(x, 0.0), b.le(y, 0.0)), 0.0, glog),
            "other": b.div(b.mul(g, x), y)}


def group_norm(b, g, saved, args, given) -> dict:
    """native_group_norm_backward on the saved input and weight, with each sample's and group's mean and
    1/std the forward computed (of the input as the forward read it): layer_norm's formula over a group's
    channels and positions, x_hat = (x - mean) * rstd, gx = g * weight per channel; dweight = sum(g *
    x_hat), dbias = sum(g) over the batch and positions."""
    x0 = args["input"]
    n, c, spatial = x0.shape[0], x0.shape[1], tuple(x0.shape[2:])
    groups = int(given["num_groups"])
    grouped = (n, groups, c // groups, *spatial)
    axes = list(range(2, len(grouped)))

    def split(v: Value) -> Value:
        return b.reshape(_wide(b, v), shape=grouped)

    w0 = split(x0)
    mean = b.reduce_mean(w0, axes=axes, keepdim=True)
    d0 = b.sub(w0, mean)
    rstd = b.rsqrt(b.add(b.reduce_mean(b.mul(d0, d0), axes=axes, keepdim=True), float(given["eps"])))
    xhat = b.mul(b.sub(split(saved["input"]), mean), rstd)
    gw = split(g)
    per_channel = (1, groups, c // groups) + (1,) * len(spatial)
    rest = [0, *range(3, len(grouped))]  # the batch and the positions
    got = {}
    if "weight" in args:
        gx = b.mul(gw, b.reshape(_wide(b, saved["weight"]), shape=per_channel))
        dw = b.reshape(b.reduce_sum(b.mul(gw, xhat), axes=rest, keepdim=False), shape=(c,))
        got["weight"] = _to(b, dw, args["weight"])
    else:
        gx = gw
    if "bias" in args:
        got["bias"] = _to(b, b.reshape(b.reduce_sum(gw, axes=rest, keepdim=False), shape=(c,)), args["bias"])
    inner = b.sub(b.sub(gx, b.reduce_mean(gx, axes=axes, keepdim=True)),
                  b.mul(xhat, b.reduce_mean(b.mul(gx, xhat), axes=axes, keepdim=True)))
    got["input"] = _to(b, b.reshape(b.mul(rstd, inner), shape=tuple(x0.shape)), x0)
    return got


def batch_norm(b, g, saved, args, given) -> dict:
    """native_batch_norm_backward on the saved input, weight and running statistics: training, with the
    batch's mean and 1/std the forward computed (of the input as it read it), (g - mean(g) - (x - mean)
    dotp / std^2 / n) / std * weight, dotp = sum(g (x - mean)); evaluating, g / std * weight of the running
    statistics as they are now; dweight = dotp / std, dbias = sum(g), per channel."""
    x0, x = args["input"], _wide(b, saved["input"])
    c, rank = x0.shape[1], x0.type.rank
    axes = [0, *range(2, rank)]
    per_channel = (c,) + (1,) * (rank - 2)
    gw, eps = _wide(b, g), float(given["eps"])
    if given["training"]:
        w0 = _wide(b, x0)
        mean = b.reduce_mean(w0, axes=axes, keepdim=True)
        d0 = b.sub(w0, mean)
        invstd = b.rsqrt(b.add(b.reduce_mean(b.mul(d0, d0), axes=axes, keepdim=True), eps))
    else:
        mean = b.reshape(_wide(b, saved["running_mean"]), shape=per_channel)
        invstd = b.rsqrt(b.add(b.reshape(_wide(b, saved["running_var"]), shape=per_channel), eps))
    centred = b.sub(x, mean)
    dotp = b.reduce_sum(b.mul(gw, centred), axes=axes, keepdim=True)
    w = b.reshape(_wide(b, saved["weight"]), shape=per_channel) if "weight" in saved else None
    if given["training"]:
        n = float(math.prod(x0.shape) // c) if c else 1.0
        k = b.div(b.mul(b.mul(dotp, invstd), invstd), n)
        gx = b.mul(b.sub(b.sub(gw, b.reduce_mean(gw, axes=axes, keepdim=True)), b.mul(centred, k)), invstd)
    else:
        gx = b.mul(gw, invstd)
    got = {"input": _to(b, b.mul(gx, w) if w is not None else gx, x0)}
    if "weight" in args:
        got["weight"] = _to(b, b.reshape(b.mul(dotp, invstd), shape=(c,)), args["weight"])
    if "bias" in args:
        got["bias"] = _to(b, b.reshape(b.reduce_sum(gw, axes=axes, keepdim=True), shape=(c,)), args["bias"])
    return got

def kl_div_saved(given: dict) -> tuple:
    """What torch's nodes of kl_div save (its composite: xlogy(target, target) - target * input, reduced):
    the target (mul's for the input's gradient, xlogy's) and, where the target requires grad, the input
    (mul's); with log_target (exp(target) * (target - input)) only values kl_div made itself."""
    if given.get("log_target"):
        return ()
    return ("target", *(("input",) if getattr(given.get("target"), "requires_grad", False) else ()))


def kl_div(b, g, saved, args, given) -> dict:
    """The backward of torch's kl_div composite on the saved target t and input x (without log_target):
    -g t to input (mul's); xlogy(g, t) (0 where t is 0) + g t / t - g x to target (xlogy's, mul's); g
    over the element count for a mean, over the batch size for batchmean."""
    t = saved["target"]
    x = saved.get("input", args["input"])
    shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(t.shape)))
    reduction = given["reduction"]
    if reduction == "batchmean":
        g = b.div(g, float(x.shape[0] if x.type.rank else 1))
    ge = _mean_scale(b, g, b.const(0.0, g.dtype, shape), "sum" if reduction == "batchmean" else reduction)
    minus = b.neg(ge)
    glog = b.where(b.logical_and(b.eq(ge, 0.0), b.eq(t, t)), 0.0, b.mul(ge, b.log(t)))
    gt = b.add(b.add(b.where(b.eq(t, 0.0), 0.0, glog), b.div(b.mul(ge, t), t)), b.mul(minus, x))
    return {"input": b.sum_to(b.mul(minus, t), tuple(x.shape)), "target": b.sum_to(gt, tuple(t.shape))}


def _euclidean(given: dict, x1: Value, x2: Value) -> bool:
    """torch's cdist takes _euclidean_dist (a matrix product) for p = 2 where compute_mode asks for it or,
    by default, where either input has more than 25 rows; else _cdist_forward."""
    mode = given.get("compute_mode") or "use_mm_for_euclid_dist_if_necessary"
    if float(given["p"]) != 2 or not (int(np.prod(x1.shape)) and int(np.prod(x2.shape))):
        return False
    return mode == "use_mm_for_euclid_dist" or (
        mode == "use_mm_for_euclid_dist_if_necessary" and max(x1.shape[-2], x2.shape[-2]) > 25)


def _last_two_swapped(b, v: Value) -> Value:
    rank = v.type.rank
    return b.permute(v, perm=(*range(rank - 2), rank - 1, rank - 2))


def cdist(b, g, saved, args, given) -> dict:
    """torch's cdist backward on the saved inputs and result: _cdist_backward, per pair of rows d = x1[i] -
    x2[j] and their distance r: g sgn(d) for p = 1, g d / r for p = 2, sgn(d) |d|^(p-1) g / r^(p-1) below
    2 (0 at d = 0 for p < 1), d |d|^(p-2) g / r^(p-1) above (0 where r is 0), g sgn(d) at the coordinates
    tied at r for p = inf, 0 for p = 0; summed over j to x1, negated and over i to x2. Where torch takes
    _euclidean_dist, its backward: x1 sum_j(g/r) - (g/r) x2 and x2 sum_i(g/r) - (g/r)^T x1 (0 where r is
    0), on the inputs as it saved them (a batch broadcast copies them first, which keeps their values)."""
    x1, x2, res = saved["x1"], saved["x2"], saved["result"]
    s1, s2 = tuple(args["x1"].shape), tuple(args["x2"].shape)
    if _euclidean(given, x1, x2):
        batch = tuple(np.broadcast_shapes(s1[:-2], s2[:-2]))
        x1 = x1 if s1[:-2] == batch else args["x1"]
        x2 = x2 if s2[:-2] == batch else args["x2"]
        ratio = b.where(b.eq(res, 0.0), 0.0, b.div(g, res))
        g1 = b.sub(b.mul(x1, b.reduce_sum(ratio, axes=[-1 % ratio.type.rank], keepdim=True)), b.matmul(ratio, x2))
        per_row = b.reduce_sum(_last_two_swapped(b, ratio), axes=[ratio.type.rank - 1], keepdim=True)
        g2 = b.sub(b.mul(x2, per_row), b.matmul(_last_two_swapped(b, ratio), x1))
        return {"x1": b.sum_to(g1, s1), "x2": b.sum_to(g2, s2)}
    p = float(given["p"])
    d = b.sub(b.reshape(x1, shape=(*s1[:-1], 1, s1[-1])), b.reshape(x2, shape=(*s2[:-2], 1, *s2[-2:])))
    r = b.reshape(res, shape=(*res.shape, 1))
    gr = b.reshape(g, shape=(*g.shape, 1))
    if p == 0:
        term = b.mul(d, 0.0)
    elif p == 1:
        term = b.mul(gr, b.sign(d))
    elif p < 2:
        term = b.div(b.mul(b.mul(b.sign(d), b.pow(b.abs(d), p - 1)), gr), b.pow(r, p - 1))
        zero = b.logical_or(b.eq(r, 0.0), b.eq(d, 0.0)) if p < 1 else b.eq(r, 0.0)
        term = b.where(zero, 0.0, term)
    elif p == 2:
        term = b.where(b.eq(r, 0.0), 0.0, b.div(b.mul(gr, d), r))
    elif np.isinf(p):
        tied = b.sub(1.0, b.minimum(b.ceil(b.abs(b.sub(b.abs(d), r))), 1.0))
        term = b.mul(b.mul(gr, b.sign(d)), tied)
    else:
        term = b.where(b.eq(r, 0.0), 0.0, b.div(b.mul(b.mul(d, b.pow(b.abs(d), p - 2)), gr), b.pow(r, p - 1)))
    rank = term.type.rank
    g1 = b.reduce_sum(term, axes=[rank - 2], keepdim=False)
    g2 = b.neg(b.reduce_sum(term, axes=[rank - 3], keepdim=False))
    return {"x1": b.sum_to(g1, s1), "x2": b.sum_to(g2, s2)}


def not_in_flame(b, g, saved, args, given) -> None:
    """The formula of a composite whose torch backward flame does not have (its node saved what a write
    through .data can change): a backward that needs it raises (data_writes.composite_vjp)."""
    return None
