"""Constant folding, evaluated by the ops' own references (flame.ir.evaluate)."""

from __future__ import annotations

import numpy as np

from flame.ir.builder import Builder
from flame.ir.evaluate import evaluate_op
from flame.ir.graph import Graph, Op, Value, discard
from flame.ir.ops.collective import is_collective
from flame.ir.registry import REGISTRY, is_constant
from flame.passes._rewrite import first_change, full_value, python_number, rewrite, same_bits

SMALL = 64  # results up to this many elements are evaluated and folded when uniform
MAX_EVAL_INPUT = 4096  # constant inputs are materialized for evaluation only up to this size


def _preserves_uniform(op: Op) -> bool:
    """Uniform inputs give a uniform result: elementwise ops compute the same element everywhere; the
    movement ops other than pad only copy input elements around."""
    opdef = REGISTRY[op.name]
    if opdef.category == "elementwise":
        return not opdef.positional  # triu/tril/random draws depend on the position
    return opdef.category == "movement" and not opdef.pads


def _uniform_result(op: Op, elems: list[np.generic]) -> np.generic | None:
    """The one element of op's result when every input is a `full` with element elems[i]."""
    if REGISTRY[op.name].category == "movement":
        return elems[0] if same_bits(np.array(elems)) else None  # concat of equal elements only
    scalar_op = Op(op.name, (), op.attrs, op.out.type.with_shape(()), op.loc)
    out = evaluate_op(scalar_op, [np.asarray(e) for e in elems])[()]
    discard((scalar_op,))  # freed now, not by the cyclic collector
    return out


def _evaluate(op: Op) -> np.ndarray | None:
    """op's result when its inputs are small enough to materialize, else None."""
    if any(v.type.numel > MAX_EVAL_INPUT for v in op.inputs):
        return None
    return evaluate_op(op, [evaluate_op(v.producer, []) for v in op.inputs])


def _fold(op: Op, b: Builder) -> Value | None:
    if not op.inputs:
        return None
    for v in op.inputs:  # (most ops read a computed value: asked first)
        if v.producer is None or not is_constant(v.producer):
            return None
    if is_collective(op):
        return None  # its result depends on what the other ranks hold
    elems = [full_value(v) for v in op.inputs]
    if all(e is not None for e in elems) and _preserves_uniform(op):
        elem = _uniform_result(op, elems)
    elif op.out.type.numel <= SMALL and (result := _evaluate(op)) is not None and same_bits(result):
        elem = result.flat[0] if result.size else np.zeros((), result.dtype)[()]
    else:
        return None
    if elem is None:
        return None
    return b.full(shape=op.out.shape, value=python_number(elem), dtype=op.out.dtype)


def fold_constants(g: Graph) -> Graph:
    """Evaluate ops whose inputs are all constants (`full` or `arange` results) and replace them by a
    `full` constant.

    An op folds when (a) every input is a `full` and the op preserves uniformity (elementwise ops other
    than triu/tril/random draws, movement ops other than pad), at any size: its one element is computed
    by the reference on 0-d arrays; or (b) its result has at most SMALL elements and, evaluated by the
    op references, comes out uniform (every element bit-identical, so -0.0 and +0.0 do not mix).
    The IR has no dense-constant op, so a non-uniform result stays as the ops that compute it.

    Before: any verified graph. After: the same function, folded results computed by the very reference
    functions that define the ops (bit-exact against run_graph); the `full` replacing an op keeps its
    `loc`. The now-unread constant inputs are left for eliminate_dead_code."""
    return rewrite(g, _fold, checked=first_change(g, _fold))  # (most rounds change little or nothing)
