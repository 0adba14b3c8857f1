"""What an op computes, on NumPy arrays: each op evaluated by its registry reference (the op's one
definition). Used by the reference executor (runtime/reference.py, `flame check`) and by constant
folding (passes/fold_constants.py), so both agree bit for bit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flame.errors import FlameError, IndexValueError, ZeroDivisorError
from flame.ir.dtypes import bf16, f16
from flame.ir.graph import Graph, Op, Value
from flame.ir.registry import REGISTRY

_LOW = (f16.np_dtype, bf16.np_dtype)


def evaluate_op(op: Op, args: Sequence[np.ndarray]) -> np.ndarray:
    """One op on NumPy arrays; f16/bf16 inputs compute in f32 where the op says so (as on the GPU).
    Overflow, NaN and division by zero give IEEE results, without NumPy warnings."""
    with np.errstate(all="ignore"):
        return compute_op(op, args)


def compute_op(op: Op, args: Sequence[np.ndarray], shape: tuple | None = None) -> np.ndarray:
    """evaluate_op for a caller that already holds `np.errstate(all="ignore")` around many ops (the
    reference executor, once per run: entering it per op cost ~12% of a small model's step). shape:
    the result's, when an elementwise op runs on several instances of itself at once (the reference
    executor's batched segments); else op's own."""
    opdef = REGISTRY[op.name]
    if opdef.compute_f32:
        args = [a.astype(np.float32) if a.dtype in _LOW else a for a in args]
    try:
        out = opdef.ref(*args, **op.attrs)
    except (IndexValueError, ZeroDivisorError) as e:  # a value held in a tensor: say whose line read it
        raise type(e)(f"{e}\n  at {op.loc}") if op.loc and "\n  at " not in str(e) else e from None
    out = np.asarray(out).astype(op.out.type.dtype.np_dtype, copy=False)
    if out.shape != (op.out.type.shape if shape is None else shape):
        raise FlameError(f"reference of {op.name} returned shape {out.shape}, expected {op.out.type}")
    return out


def evaluate_graph(g: Graph, arrays: Sequence[np.ndarray]) -> dict[Value, np.ndarray]:
    """Every value of g (inputs included) computed op by op from the input arrays."""
    env = dict(zip(g.inputs, arrays))
    for op in g.ops:
        env[op.out] = evaluate_op(op, [env[v] for v in op.inputs])
    return env


def evaluate_outputs(g: Graph, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """g's outputs computed op by op from the input arrays, each intermediate dropped after its last
    use (so a chain of elementwise ops over a large array holds about two arrays at a time)."""
    last = {v: i for i, op in enumerate(g.ops) for v in op.inputs}
    keep = set(g.outputs)
    env = dict(zip(g.inputs, arrays))
    for i, op in enumerate(g.ops):
        env[op.out] = evaluate_op(op, [env[v] for v in op.inputs])
        for v in set(op.inputs):
            if last[v] == i and v not in keep:
                del env[v]
    return [env[v] for v in g.outputs]


def constant_value(g: Graph, v: Value, limit: int) -> np.ndarray | None:
    """v's value when it reads none of g's inputs and neither it nor what it is computed from holds
    more than `limit` elements (so it is cheap to evaluate now), else None."""
    needed, stack = set(), [v]
    while stack:
        x = stack.pop()
        if x in needed:
            continue
        if x.producer is None or x.type.numel > limit:
            return None
        needed.add(x)
        stack.extend(x.producer.inputs)
    env: dict[Value, np.ndarray] = {}
    for op in g.ops:
        if op.out in needed:
            env[op.out] = evaluate_op(op, [env[i] for i in op.inputs])
    return env[v]
