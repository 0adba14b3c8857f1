"""Algebraic simplification: a table of small rules, each exact for IEEE floats (bit for bit, NaN, inf
and signed zeros included) — an identity that only holds for real numbers is not a rule here.

Left out on purpose, because floats break them: x + 0.0 -> x (-0.0 + 0.0 = +0.0), x - x -> 0 and x * 0
-> 0 (NaN, inf), reduce_sum over no axes -> x (the sum starts at +0.0), cast(cast(x)) through a
narrower dtype."""

from __future__ import annotations

import numpy as np

from flame.errors import FlameError
from flame.ir.builder import Builder
from flame.ir.dtypes import bf16, boolean, f16, f32, f64, i32, i64
from flame.ir.graph import Graph, Op, Value
from flame.ir.ops._shapes import norm_axes
from flame.ir.registry import REGISTRY, is_fill, is_relabel
from flame.ir.types import TensorType
from flame.passes._rewrite import Rule, first_change, full_value, rewrite
from flame.passes.simplify_slabs import concat_of_pieces, sum_of_slabs


def _is(v: Value, number: float, negative: bool = False) -> bool:
    """v is a `full` constant equal to number; a float zero must also have the given sign."""
    x = full_value(v)
    if x is None or x != number:
        return False
    return not (v.dtype.is_float and number == 0) or bool(np.signbit(x)) == negative


def _as_result(op: Op, x: Value, b: Builder) -> Value:
    """x standing in for op's result: x itself, or x broadcast when the op broadcast it."""
    return x if x.shape == op.out.shape else b.broadcast_to(x, shape=op.out.shape)


def _size(x: Value, axis: int) -> int:
    """Size of a normalized axis; a 0-d tensor's axis 0 (accepted by norm_axes) counts as size 1."""
    return x.shape[axis] if axis < x.type.rank else 1


def _producer(v: Value, *names: str) -> Op | None:
    return v.producer if v.producer is not None and v.producer.name in names else None


# ---- arithmetic ---------------------------------------------------------------------------------


def _mul(op: Op, b: Builder) -> Value | None:
    x, y = op.inputs
    if _is(y, 1):  # x*1 -> x
        return _as_result(op, x, b)
    if _is(x, 1):  # 1*x -> x
        return _as_result(op, y, b)
    return None


def _add(op: Op, b: Builder) -> Value | None:
    x, y = op.inputs
    # ints: x+0 -> x, 0+x -> x.  floats: x + (-0.0) -> x, (-0.0) + x -> x (x + +0.0 turns -0.0 into +0.0)
    negative = op.out.dtype.is_float
    if _is(y, 0, negative):
        return _as_result(op, x, b)
    if _is(x, 0, negative):
        return _as_result(op, y, b)
    return sum_of_slabs(op, b)  # pad(a) + pad(b) + ... tiling an axis -> concat([a, b, ...])


def _sub(op: Op, b: Builder) -> Value | None:
    x, y = op.inputs
    if _is(y, 0, negative=False):  # x - (+0) -> x   (x - +0.0 == x + -0.0 == x, -0.0 included)
        return _as_result(op, x, b)
    if x is y and op.out.dtype.is_int:  # x - x -> 0 for ints only (inf - inf and NaN - NaN are NaN)
        return b.full(shape=op.out.shape, value=0, dtype=op.out.dtype)
    return None


def _div(op: Op, b: Builder) -> Value | None:
    x, y = op.inputs
    return _as_result(op, x, b) if _is(y, 1) else None  # x/1 -> x


def _pow(op: Op, b: Builder) -> Value | None:
    x, y = op.inputs
    if _is(y, 1):  # pow(x, 1) -> x  (IEEE pow(x, 1) is x for every x, NaN and -0.0 included)
        return _as_result(op, x, b)
    if _is(y, 0) or _is(y, 0, negative=True):  # pow(x, 0) -> 1  (IEEE: even for x NaN)
        return b.full(shape=op.out.shape, value=1, dtype=op.out.dtype)
    if _is(y, 2) and x.dtype.is_float and x.dtype == op.out.dtype:
        # pow(x, 2) -> x * x: what PyTorch's pow kernels and NumPy's power compute for a scalar 2 (one
        # rounding), where C's powf is a long libm call (a loss's (y.float() ** 2).mean() over 16.7M
        # elements was bound by it, at 58 % of copy on an H100)
        return _as_result(op, b.mul(x, x), b)
    return None


def _involution(op: Op, b: Builder) -> Value | None:
    inner = _producer(op.inputs[0], op.name)  # neg(neg(x)) -> x; logical_not(logical_not(x)) -> x
    return inner.inputs[0] if inner is not None else None


# widening casts that are exact, so casting back recovers x bit for bit
_EXACT_WIDENING = {(f16, f32), (f16, f64), (bf16, f32), (bf16, f64), (f32, f64), (i32, i64), (i32, f64)}


def _stop_gradient(op: Op, b: Builder) -> Value | None:
    """stop_gradient(x) -> x: it only matters to autodiff, which runs while tracing, before this."""
    return op.inputs[0]


def _straight_through(op: Op, b: Builder) -> Value | None:
    """straight_through(x, y) -> y: only autodiff, which runs while tracing, before this, reads x."""
    y = op.inputs[1]
    return y if y.shape == op.out.shape else b.broadcast_to(y, shape=op.out.shape)


def _cast(op: Op, b: Builder) -> Value | None:
    (x,) = op.inputs
    if x.dtype == op.out.dtype:  # cast(x: T, T) -> x
        return x
    inner = _producer(x, "cast")  # cast(cast(x: T, U), T) -> x when T -> U is exact (widening, or from bool)
    if inner is not None:
        src = inner.inputs[0]
        if src.dtype == op.out.dtype and (src.dtype == boolean or (src.dtype, x.dtype) in _EXACT_WIDENING):
            return src
    return None


def _where(op: Op, b: Builder) -> Value | None:
    c, x, y = op.inputs
    if x is y:  # where(c, x, x) -> x
        return _as_result(op, x, b)
    if full_value(c) is not None:  # where(true, x, y) -> x; where(false, x, y) -> y
        return _as_result(op, x if full_value(c) else y, b)
    return None


# ---- movement -----------------------------------------------------------------------------------

def _reshape(op: Op, b: Builder) -> Value | None:
    (x,) = op.inputs
    if x.shape == op.out.shape:  # reshape(x, x.shape) -> x (also squeeze/unsqueeze of no axes)
        return x
    inner = x.producer  # reshape(reshape(x)) -> reshape(x), any mix of squeeze/unsqueeze
    if inner is None or not is_relabel(inner):
        return None
    src = inner.inputs[0]  # already simplified: not itself a reshape
    return src if src.shape == op.out.shape else b.reshape(src, shape=op.out.shape)


def _broadcast_to(op: Op, b: Builder) -> Value | None:
    (x,) = op.inputs
    if x.shape == op.out.shape:  # broadcast_to(x, x.shape) -> x
        return x
    inner = _producer(x, "broadcast_to")  # broadcast_to(broadcast_to(x)) -> broadcast_to(x)
    return b.broadcast_to(inner.inputs[0], shape=op.out.shape) if inner is not None else None


def _permute(op: Op, b: Builder) -> Value | None:
    (x,) = op.inputs
    perm = op.attrs["perm"]
    inner = _producer(x, "permute")  # permute(permute(x, p), q) -> permute(x, [p[i] for i in q])
    if inner is not None:
        x, perm = inner.inputs[0], tuple(inner.attrs["perm"][i] for i in perm)
    if perm == tuple(range(len(perm))):  # permute(x, identity) -> x
        return x
    return b.permute(x, perm=perm) if inner is not None else None


def _slice(op: Op, b: Builder) -> Value | None:
    (x,) = op.inputs  # slice(x) covering every element, in order -> x
    return x if x.shape == op.out.shape and not any(op.attrs["starts"]) else None


def _flip(op: Op, b: Builder) -> Value | None:
    (x,) = op.inputs
    axes = norm_axes("flip", op.attrs["axes"], x.type.rank)
    if all(_size(x, a) <= 1 for a in axes):  # flip over axes of size <= 1 -> x
        return x
    inner = _producer(x, "flip")  # flip(flip(x, a), a) -> x
    if inner is not None and norm_axes("flip", inner.attrs["axes"], x.type.rank) == axes:
        return inner.inputs[0]
    return None


def _pad(op: Op, b: Builder) -> Value | None:
    (x,) = op.inputs
    return x if x.shape == op.out.shape else None  # pad(x, all zero widths) -> x


def _concat(op: Op, b: Builder) -> Value | None:
    if len(op.inputs) == 1:  # concat([x]) -> x
        return op.inputs[0]
    return concat_of_pieces(op, b)  # concat(t[a:b], t[b:c], ...) covering t in order -> t


def _reduce_extreme(op: Op, b: Builder) -> Value | None:
    (x,) = op.inputs  # max/min over axes of size 1 -> x (reshaped without keepdim): one element, returned as is
    if any(_size(x, a) != 1 for a in norm_axes(op.name, op.attrs["axes"], x.type.rank)):
        return None
    return x if x.shape == op.out.shape else b.reshape(x, shape=op.out.shape)


# ---- broadcasts sunk into their users -----------------------------------------------------------


def _sink_broadcasts(op: Op, b: Builder) -> Value | None:
    """elementwise(..., broadcast_to(y), ...) -> elementwise(..., y, ...) and elementwise(..., full[S] c,
    ...) -> elementwise(..., full[] c, ...) when NumPy broadcasting still gives the op's result shape:
    the op broadcasts by itself, elementwise results do not depend on how an operand was expanded.
    For elementwise ops (`_rule_for`)."""
    if len(op.inputs) < 2:
        return None
    inputs: list[Value | Op] | None = None  # an Op stands for a `full` to re-emit as a scalar
    for i, v in enumerate(op.inputs):
        inner = _producer(v, "broadcast_to") or (v.producer if is_fill(v.producer) else None)
        if inner is None or v.shape == ():
            continue
        if inputs is None:
            inputs = list(op.inputs)
        narrow = inner if is_fill(inner) else inner.inputs[0]  # a `full`, or a broadcast_to's input
        types = [_type_of(w) for w in inputs[:i] + [narrow] + inputs[i + 1 :]]
        try:
            fits = REGISTRY[op.name].infer(types, **op.attrs) == op.out.type
        except FlameError:
            fits = False
        if fits:
            inputs[i] = narrow
    if inputs is None or all(w is v for w, v in zip(inputs, op.inputs)):
        return None
    scalars = [
        w if isinstance(w, Value) else b.full(shape=(), value=w.attrs["value"], dtype=w.out.dtype) for w in inputs
    ]
    return b.emit(op.name, *scalars, **op.attrs)


def _type_of(w: Value | Op) -> TensorType:
    return w.type if isinstance(w, Value) else w.out.type.with_shape(())


RULES: dict[str, Rule] = {
    "mul": _mul,
    "add": _add,
    "sub": _sub,
    "div": _div,
    "pow": _pow,
    "neg": _involution,
    "logical_not": _involution,
    "cast": _cast,
    "stop_gradient": _stop_gradient,
    "straight_through": _straight_through,
    "where": _where,
    "reshape": _reshape,
    "squeeze": _reshape,
    "unsqueeze": _reshape,
    "broadcast_to": _broadcast_to,
    "permute": _permute,
    "slice": _slice,
    "flip": _flip,
    "pad": _pad,
    "concat": _concat,
    "reduce_max": _reduce_extreme,
    "reduce_min": _reduce_extreme,
}


def _no_rule(op: Op, b: Builder) -> Value | None:
    return None


def _simplify(op: Op, b: Builder) -> Value | None:
    rule = _BY_NAME.get(op.name)
    if rule is None:
        rule = _BY_NAME[op.name] = _rule_for(op.name)
    return rule(op, b)


def _call_result(op: Op, b: Builder) -> Value | None:
    """A user Function's result: its inlined forward, once autodiff is done."""
    return op.inputs[-1]


def _rule_for(name: str) -> Rule:
    """The rule _simplify applies to ops named `name`: call_result's, else RULES' rule, then (for an
    elementwise op, where that gives nothing) _sink_broadcasts. (An op's traits never change once registered.)"""
    opdef = REGISTRY[name]
    if opdef.call_result:
        return _call_result
    rule = RULES.get(name)
    if opdef.category != "elementwise":
        return rule or _no_rule
    if rule is None:
        return _sink_broadcasts

    def then_sink(op: Op, b: Builder) -> Value | None:
        got = rule(op, b)
        return got if got is not None else _sink_broadcasts(op, b)

    return then_sink


_BY_NAME: dict[str, Rule] = {}  # op name -> _rule_for(name)


def simplify_algebra(g: Graph) -> Graph:
    """Apply the rules in RULES (keyed by op name), then sink broadcasts into elementwise users.

    Before: any verified graph. After: the same function, bit for bit on the reference executor — every
    rule is an identity of IEEE arithmetic, not only of real numbers. One sweep in program order: a
    rule sees its inputs already simplified, so chains (reshape of reshape of reshape) collapse at
    once; ops a rule bypasses are left for eliminate_dead_code, and what a rewrite newly exposes is
    picked up by the pipeline's next round."""
    return rewrite(g, _simplify, checked=first_change(g, _simplify))  # (most rounds change little or nothing)
