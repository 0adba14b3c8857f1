"""What validation can read of a traced tensor while @flame.compile traces: its value, where the value is
fixed when tracing. A traced tensor computed (by ops that draw no random numbers) only from Python numbers
and concrete tensors (made in the compiled function, or captured from outside it: a module's parameter,
a global) has a value now, the one the call that traces computes; one computed from the function's
arguments, from random draws or from a Python value read at every call does not, until the step runs."""

from __future__ import annotations

import numpy as np

from flame.frontend.creation import tensor
from flame.frontend.tensor import Tensor
from flame.ir.evaluate import evaluate_op
from flame.ir.registry import REGISTRY

__all__ = ["known_value", "shown"]

LIMIT = 1 << 16  # elements of any value on the way: larger ones are not evaluated while tracing


def _concrete_inputs(trace) -> dict:
    """The trace's graph inputs bound to a concrete tensor (read at every call), to that tensor."""
    inputs_of = getattr(trace, "inputs_of", {})
    out = {}
    for b in getattr(trace, "bindings", ()):
        if b.kind == "tensor" and id(b.tensor) in inputs_of:
            out[inputs_of[id(b.tensor)]] = b.tensor
    return out


def _needed(v, concrete: dict) -> set | None:
    """The values v is computed from, or None where one is not known while tracing (or is large)."""
    needed, stack = set(), [v]
    while stack:
        x = stack.pop()
        if x in needed:
            continue
        numel = x.type.numel
        if not isinstance(numel, int) or numel > LIMIT:
            return None
        needed.add(x)
        op = x.producer
        if op is None:
            if x not in concrete:
                return None
        elif REGISTRY[op.name].random:
            return None
        else:
            stack.extend(op.inputs)
    return needed


def known_value(t) -> np.ndarray | None:
    """t's value as a NumPy array: a concrete tensor's own; a traced one's when it is known while tracing
    (module docstring), evaluated by the ops' NumPy references; else None."""
    if not t.is_traced:
        return t.numpy()
    trace = t._trace
    concrete = _concrete_inputs(trace)
    needed = _needed(t._value, concrete)
    if needed is None:
        return None
    env = {x: concrete[x].numpy() for x in needed if x.producer is None}
    for op in trace.graph.ops:
        if op.out in needed:
            if any(i not in env for i in op.inputs):
                return None
            env[op.out] = evaluate_op(op, [env[i] for i in op.inputs])
    return env.get(t._value)


def shown(t):
    """t as a message shows it: a traced tensor's values where they are known, else t itself (a concrete
    tensor, a Python number, or a traced tensor of unknown value)."""
    if not isinstance(t, Tensor) or not t.is_traced:
        return t
    known = known_value(t)
    return t if known is None else tensor(known, dtype=t.dtype)
