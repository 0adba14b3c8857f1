"""torch's backward formulas of flame's pointwise composites (and the few elementwise ones of two or three
tensors) that torch records as one node: the `vjp` of their `saves` declarations (torch_saves.py), in the
form torch_formulas.py describes, run where a write through .data changed what that node saved (or an
argument or the result: data_writes.composite_vjp). Each `*_saved` says what torch's node saves where it
depends on the gradients asked for."""

from __future__ import annotations

import math

import numpy as np

from flame.ir.graph import Value


def _to(b, v: Value, like: Value) -> Value:
    return b.cast(v, dtype=like.dtype) if v.dtype != like.dtype else v


def _wants(given: dict, *names: str) -> bool:
    return any(getattr(given.get(k), "requires_grad", False) for k in names)


def lerp_saved(given: dict) -> tuple:
    """What torch's LerpBackward1 (a tensor weight) saves: the weight where self's or end's gradient is
    asked, self and end where the weight's is. LerpBackward0 (a number) keeps the number only."""
    if not hasattr(given.get("weight"), "requires_grad"):
        return ()
    return (
        *(("weight",) if _wants(given, "self", "end") else ()),
        *(("self", "end") if _wants(given, "weight") else ()),
    )


def lerp(b, g, saved, args, given) -> dict:
    """lerp's backward on the saved tensors: g * (1 - weight) to self, g * weight to end, g * (end - self)
    to weight."""
    got = {}
    if "weight" in saved:
        w = saved["weight"]
        got["self"], got["end"] = b.mul(g, b.sub(1.0, w)), b.mul(g, w)
    if "self" in saved:
        got["weight"] = b.mul(g, b.sub(saved["end"], saved["self"]))
    return got


def _value(b, given, args, like: Value):
    """addcmul's and addcdiv's value: a number, or a 0-d tensor's value."""
    return args["value"] if "value" in args else b.const(float(given.get("value", 1)), like.dtype)


def addcmul_saved(given: dict) -> tuple:
    """What torch's AddcmulBackward0 saves: tensor2 for tensor1's gradient, tensor1 for tensor2's."""
    return (*(("tensor2",) if _wants(given, "tensor1") else ()), *(("tensor1",) if _wants(given, "tensor2") else ()))


def addcmul(b, g, saved, args, given) -> dict:
    """addcmul's backward: g to self, g * (tensor2 * value) to tensor1, g * (tensor1 * value) to tensor2."""
    got = {"self": g}
    for mine, other in (("tensor1", "tensor2"), ("tensor2", "tensor1")):
        if other in saved:
            got[mine] = b.mul(g, b.mul(saved[other], _value(b, given, args, g)))
    return got


def addcdiv_saved(given: dict) -> tuple:
    """What torch's AddcdivBackward0 saves: tensor2 for either tensor's gradient, tensor1 for tensor2's."""
    return (
        *(("tensor2",) if _wants(given, "tensor1", "tensor2") else ()),
        *(("tensor1",) if _wants(given, "tensor2") else ()),
    )


def addcdiv(b, g, saved, args, given) -> dict:
    """addcdiv's backward: g to self, g * (value / tensor2) to tensor1, -g * (value * tensor1 / tensor2^2)
    to tensor2."""
    got = {"self": g}
    if "tensor2" in saved:
        t2, value = saved["tensor2"], _value(b, given, args, g)
        got["tensor1"] = b.mul(g, b.div(value, t2))
        if "tensor1" in saved:
            got["tensor2"] = b.neg(b.mul(g, b.div(b.mul(value, saved["tensor1"]), b.mul(t2, t2))))
    return got


def logaddexp(b, g, saved, args, given) -> dict:
    """logaddexp's backward on the saved inputs: g / (1 + exp(other - input)) to input, g / (1 + exp(input -
    other)) to other."""
    x, y = saved["input"], saved["other"]
    return {"input": b.div(g, b.add(b.exp(b.sub(y, x)), 1.0)), "other": b.div(g, b.add(b.exp(b.sub(x, y)), 1.0))}


def ldexp_saved(given: dict) -> tuple:
    """What torch's LdexpBackward0 saves: other for input's gradient, its result for other's."""
    return (*(("other",) if _wants(given, "input") else ()), *(("result",) if _wants(given, "other") else ()))


def ldexp(b, g, saved, args, given) -> dict:
    """ldexp's backward: g * 2^other to input, g * result * ln 2 to other."""
    got = {}
    if "other" in saved:
        got["input"] = b.mul(g, b.pow(2.0, _to(b, saved["other"], g)))
    if "result" in saved:
        got["other"] = b.mul(b.mul(g, saved["result"]), math.log(2.0))
    return got


def clamp(b, g, saved, args, given) -> dict:
    """clamp_backward / clamp_backward_min_max on the saved input and tensor bounds (a number bound from
    `given`): g to the input where min <= input <= max; to min where input < min (and min < max, both
    given); to max where input > max (or max < min). clamp_min's and clamp_max's, the one bound given."""
    x = saved["input"] if "input" in saved else saved["self"]
    lo, hi = (saved[k] if k in saved else given.get(k) for k in ("min", "max"))
    if lo is not None and hi is not None:
        keep = b.logical_and(b.ge(x, lo), b.le(x, hi))
    else:
        keep = b.ge(x, lo) if lo is not None else b.le(x, hi)
    got = {"input": b.where(keep, g, 0.0)}
    got["self"] = got["input"]
    if "min" in saved:  # (a number bound takes no gradient)
        below = b.lt(x, lo)
        got["min"] = b.where(b.logical_and(below, b.lt(lo, hi)) if hi is not None else below, g, 0.0)
    if "max" in saved:
        above = b.gt(x, hi)
        got["max"] = b.where(b.logical_or(above, b.lt(hi, lo)) if lo is not None else above, g, 0.0)
    return got


def log1p(b, g, saved, args, given) -> dict:
    """log1p_backward: g / (self + 1)."""
    return {"self": b.div(g, b.add(saved["self"], 1.0))}


def logit(b, g, saved, args, given) -> dict:
    """logit_backward: g / (self (1 - self)) inside [eps, 1 - eps], 0 outside it (NaN outside [0, 1] without
    eps)."""
    x, eps = saved["self"], given.get("eps")
    lo, hi, outside = (0.0, 1.0, math.nan) if eps is None else (eps, 1.0 - eps, 0.0)
    return {"self": b.where(b.logical_or(b.lt(x, lo), b.gt(x, hi)), outside, b.div(g, b.mul(x, b.sub(1.0, x))))}


def entr(b, g, saved, args, given) -> dict:
    """special_entr's backward: g * -(1 + log(self))."""
    return {"input": b.mul(g, b.neg(b.add(b.log(saved["input"]), 1.0)))}


def erfcx(b, g, saved, args, given) -> dict:
    """special_erfcx's backward: (2 self result - 2 / sqrt(pi)) * g."""
    x, y = saved["input"], saved["result"]
    return {"input": b.mul(b.sub(b.mul(b.mul(x, y), 2.0), 2.0 / math.sqrt(math.pi)), g)}


def log_ndtr(b, g, saved, args, given) -> dict:
    """special_log_ndtr's backward: g / sqrt(2 pi) * exp(-(result + self^2 / 2))."""
    x, y = saved["input"], saved["result"]
    return {"input": b.mul(b.div(g, math.sqrt(2.0 * math.pi)), b.exp(b.neg(b.add(y, b.mul(b.mul(x, x), 0.5)))))}


def ndtri(b, g, saved, args, given) -> dict:
    """special_ndtri's backward: g * sqrt(2 pi) * exp(result^2 / 2)."""
    y = saved["result"]
    return {"input": b.mul(b.mul(g, math.sqrt(2.0 * math.pi)), b.exp(b.mul(b.mul(y, y), 0.5)))}


def xlog1py(b, g, saved, args, given) -> dict:
    """special_xlog1py's backward: xlog1py(g, other), 0 where self is 0 and other <= -1, to self; g * self /
    (other + 1) to other (a Python number operand from `given`)."""
    x = saved["input"] if "input" in saved else b.const(float(given["input"]), g.dtype)
    y = saved["other"] if "other" in saved else b.const(float(given["other"]), g.dtype)
    glog = b.where(b.logical_and(b.eq(g, 0.0), b.eq(y, y)), 0.0, b.mul(g, b.log(b.add(y, 1.0))))
    return {
        "input": b.where(b.logical_and(b.eq(x, 0.0), b.le(y, -1.0)), 0.0, glog),
        "other": b.div(b.mul(g, x), b.add(y, 1.0)),
    }


def fmin(b, g, saved, args, given) -> dict:
    """fmin's backward on the saved inputs: g to input where input <= other or other is NaN, else to other."""
    x, y = saved["input"], saved["other"]
    first = b.logical_or(b.le(x, y), b.ne(y, y))
    return {"input": b.where(first, g, 0.0), "other": b.where(first, 0.0, g)}


def hardtanh(b, g, saved, args, given) -> dict:
    """hardtanh_backward: g strictly inside (min_val, max_val), else 0."""
    x = saved["input"]
    at = b.logical_or(b.le(x, float(given["min_val"])), b.ge(x, float(given["max_val"])))
    return {"input": b.where(at, 0.0, g)}


def celu(b, g, saved, args, given) -> dict:
    """elu_backward of celu (alpha, scale 1, input_scale 1 / alpha.toFloat(): alpha rounded to f32) on the
    saved input: g where x > 0, else g * s * alpha * exp(x * s), s that input_scale, as torch's kernel."""
    x, alpha = saved["input"], float(given["alpha"])
    s = 1.0 / float(np.float32(alpha))
    scaled = b.mul(b.mul(b.mul(g, s), alpha), b.exp(b.mul(x, s)))
    return {"input": b.where(b.le(x, 0.0), scaled, g)}


def mish(b, g, saved, args, given) -> dict:
    """mish_backward: g * (tanh(softplus(x)) + x sigmoid(x) (1 - tanh(softplus(x))^2))."""
    x = saved["input"]
    softplus = b.where(b.gt(x, 20.0), x, b.log(b.add(b.exp(x), 1.0)))
    t = b.tanh(softplus)
    return {"input": b.mul(g, b.add(t, b.mul(b.mul(x, b.sigmoid(x)), b.sub(1.0, b.mul(t, t)))))}


def _halves(b, x: Value, axis: int) -> tuple[Value, Value]:
    n, rank = x.shape[axis] // 2, x.type.rank

    def part(start: int) -> Value:
        return b.slice(
            x,
            starts=[start if a == axis else 0 for a in range(rank)],
            stops=[start + n if a == axis else m for a, m in enumerate(x.shape)],
            steps=[1] * rank,
        )

    return part(0), part(n)


def glu(b, g, saved, args, given) -> dict:
    """glu_backward: a, b the halves of the saved input along dim: g * sigmoid(b) to a, g * a * sigmoid(b)
    (1 - sigmoid(b)) to b."""
    x = saved["input"]
    axis = given["dim"] % x.type.rank
    first, second = _halves(b, x, axis)
    s = b.sigmoid(second)
    return {"input": b.concat(b.mul(g, s), b.mul(b.mul(g, first), b.mul(s, b.sub(1.0, s))), axis=axis)}


def cross_saved(given: dict) -> tuple:
    """What torch's LinalgCrossBackward0 saves: other for self's gradient, self for other's."""
    wants = [getattr(given.get(k), "requires_grad", False) for k in ("self", "other")]
    return (*(("other",) if wants[0] else ()), *(("self",) if wants[1] else ()))


def _component(b, x: Value, axis: int, k: int) -> Value:
    rank = x.type.rank
    return b.slice(
        x,
        starts=[k if a == axis else 0 for a in range(rank)],
        stops=[k + 1 if a == axis else m for a, m in enumerate(x.shape)],
        steps=[1] * rank,
    )


def _cross(b, u: Value, v: Value, axis: int) -> Value:
    """linalg_cross(u, v) along axis (of size 3; u and v of one shape)."""
    us, vs = ([_component(b, w, axis, k) for k in range(3)] for w in (u, v))
    parts = [b.sub(b.mul(us[(k + 1) % 3], vs[(k + 2) % 3]), b.mul(us[(k + 2) % 3], vs[(k + 1) % 3])) for k in range(3)]
    return b.concat(*parts, axis=axis)


def cross(b, g, saved, args, given) -> dict:
    """linalg_cross's backward: cross(other, g) to self, cross(g, self) to other."""
    x = saved["self"] if "self" in saved else saved["other"]
    dim = given.get("dim")
    axis = (next(i for i, n in enumerate(x.shape) if n == 3) if dim is None else dim) % x.type.rank
    got = {}
    if "other" in saved:
        other = saved["other"]
        got["self"] = _cross(b, b.broadcast_to(other, shape=g.shape), g, axis)
    if "self" in saved:
        got["other"] = _cross(b, g, b.broadcast_to(saved["self"], shape=g.shape), axis)
    return got


def binary_cross_entropy(b, g, saved, args, given) -> dict:
    """binary_cross_entropy_backward: g (x - t) / max((1 - x) x, f32's 1e-12) to the input, -logit(x) g to the
    target, each then times the weight and over numel for a mean, in torch's order."""
    x, t = saved["input"], saved["target"]

    def scaled(v: Value) -> Value:
        if "weight" in saved:
            v = b.mul(v, saved["weight"])
        return b.div(v, float(math.prod(x.shape) or 1)) if given["reduction"] == "mean" else v

    denom = b.maximum(b.mul(b.sub(1.0, x), x), float(np.float32(1e-12)))  # (torch's EPSILON, a float)
    return {
        "input": scaled(b.div(b.mul(g, b.sub(x, t)), denom)),
        "target": scaled(b.mul(b.neg(b.log(b.div(x, b.sub(1.0, x)))), g)),
    }


def _evenly_distributed(b, g, saved) -> Value:
    """evenly_distribute_backward: g / (the number of elements equal to the result) to each of them (to the
    NaNs where the result is NaN), 0 elsewhere."""
    x, y = saved["self"], saved["result"]
    mask = b.logical_or(b.eq(x, y), b.logical_and(b.ne(y, y), b.ne(x, x)))
    count = b.reduce_sum(b.cast(mask, dtype=g.dtype), axes=list(range(x.type.rank)), keepdim=False)
    return b.where(mask, b.div(g, count), 0.0)


def _paired(b, g, saved, larger: bool) -> dict:
    """maximum's (larger) or minimum's backward: g to the operand picked, half of it to each at a tie."""
    x, y = saved["self"], saved["dim"]  # (max(other) passes other where the dim goes)
    share = b.where(b.eq(x, y), b.div(g, 2.0), g)
    lost = (b.lt, b.gt) if larger else (b.gt, b.lt)
    return {"self": b.where(lost[0](x, y), 0.0, share), "dim": b.where(lost[1](x, y), 0.0, share)}


def max_of_every_element(b, g, saved, args, given) -> dict | None:
    """max()'s backward (evenly_distribute_backward), or max(other)'s (maximum's)."""
    return _paired(b, g, saved, True) if "dim" in saved else {"self": _evenly_distributed(b, g, saved)}


def min_of_every_element(b, g, saved, args, given) -> dict | None:
    """min()'s backward (evenly_distribute_backward), or min(other)'s (minimum's)."""
    return _paired(b, g, saved, False) if "dim" in saved else {"self": _evenly_distributed(b, g, saved)}


def median_of_every_element(b, g, saved, args, given) -> dict:
    """median()'s and nanmedian()'s backward over every element: evenly_distribute_backward."""
    return {"self": _evenly_distributed(b, g, saved)}


def exp2(b, g, saved, args, given) -> dict:
    """exp2's backward: g * result * ln 2."""
    return {"input": b.mul(b.mul(g, saved["result"]), math.log(2.0))}


def elu_result(b, g, saved, args, given) -> dict:
    """elu_backward with is_result (torch's in-place elu_, celu_, selu_): g * s * (result + alpha * scale)
    where the result is at most 0, else g * scale."""
    r = saved["result"]
    alpha, scale, s = float(given["alpha"]), float(given["scale"]), given["grad_scale"] or given["input_scale"]
    negative = b.mul(b.mul(g, float(s)), b.add(r, alpha * scale))
    return {"input": b.where(b.le(r, 0.0), negative, b.mul(g, scale))}


def leaky_relu_result(b, g, saved, args, given) -> dict:
    """leaky_relu_backward with is_result (torch's leaky_relu_): g where the result is positive, else
    g * negative_slope."""
    r = saved["result"]
    return {"input": b.where(b.gt(r, 0.0), g, b.mul(g, float(given["negative_slope"])))}


def sgn(b, g, saved, args, given) -> dict:
    """sgn's backward of a real tensor: zeros (torch's efficient zero tensor)."""
    zeros = b.const(0.0, g.dtype, tuple(g.shape))
    return {"self": zeros, "input": zeros}
