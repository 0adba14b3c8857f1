"""torch's backward formulas of the composites torch records as one node (torch/csrc/autograd/
FunctionsManual.cpp, derivatives.yaml), on what that node saves: the `vjp` of their `saves` declarations
(torch_saves.py). Each is fn(b, g, saved, args, given) -> {parameter name: gradient}: Builder b appends
the ops, g is the result's cotangent, `saved` the values torch's node saved as the backward reads them
(a write through .data since: the new values), `args` the tensor arguments as the composite read them,
`given` the call's other arguments. flame differentiates a composite through its own ops, which gives
the same gradient while nothing changed what torch's node saved; these run only where a write through
.data did (data_writes.composite_vjp). f16 / bf16 compute in f32 and round once, as torch's kernels."""

from __future__ import annotations

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
    """norm_backward on the saved input and result: sgn(x) * g for ord 1, g * x / norm for ord 2 (0 where the
    norm is 0), the share of the elements at the norm for ord +-inf, x * |x|^(p-2) * g / norm^(p-1) for other
    ords, as torch's."""
    x, norm = saved["input"], saved["result"]
    p, rank = float(given["ord"]), x.type.rank
    axes = reduce_axes(given["dim"], rank, "vector_norm")
    x = _to(b, x, norm)
    g, norm = (_kept(b, v, x.shape, axes, given["keepdim"]) for v in (g, norm))
    if p == 0:
        return {"input": None}
    if p == 1:
        return {"input": b.mul(b.sign(x), g)}
    if p == 2:
        return {"input": b.mul(g, b.where(b.eq(norm, 0.0), 0.0, b.div(x, norm)))}
    if np.isinf(p):
        a = b.abs(x)
        hit = b.cast(b.logical_or(b.eq(a, norm), b.ne(a, a)), dtype=x.dtype)
        return {"input": b.mul(b.sign(x), b.mul(b.div(g, _sum(b, hit, axes)), hit))}
    if p < 1:
        scaled = b.mul(b.sign(x), b.where(b.eq(x, 0.0), 0.0, b.pow(b.abs(x), p - 1)))
        return {"input": b.mul(b.mul(scaled, g), b.pow(norm, 1 - p))}
    scaled = b.mul(b.sign(x), b.pow(b.abs(x), p - 1)) if p < 2 else b.mul(x, b.pow(b.abs(x), p - 2))
    scale = b.where(b.eq(norm, 0.0), 0.0, b.div(g, b.pow(norm, p - 1)))
    return {"input": b.mul(scaled, scale)}


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


def mse_loss(b, g, saved, args, given) -> dict:
    """mse_loss_backward: (2 / numel for a mean, else 2) * (input - target) * g, to input and, negated, to
    target (the saved input and target)."""
    x, t = saved["input"], saved["target"]
    d = b.sub(x, t)
    if given["reduction"] == "mean":
        scale = 2.0 / max(int(np.prod(d.shape)), 1)
    else:
        scale = 2.0
    grad = b.mul(b.mul(d, g), scale)
    return {"input": grad, "target": b.neg(grad)}


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
