"""What torch's autograd node of a composite saves for its backward, where the composite is one node in
torch and several ops in flame: softmax's and log_softmax's nodes save their result, logsumexp's its input
and its result, mse_loss's its input and target. A write torch's version counter counts into a tensor the
node saved raises torch's error at backward (counted_writes.py); a write into one it did not save does not,
whatever the ops flame computes the composite with read (flame's recomputing backward reads the old values).

`saves(...)` declares it on the composite's function. A call recording a gradient history marks the ops
it recorded: the op that made its result carries the declaration (`Declared`: what it saved), the others
carry `NOTHING` (torch has no node of theirs). Eagerly the marks are on the ops' Nodes (`torch_saves`);
while tracing, in Trace.torch_saves by op. A composite called inside another declared one marks nothing:
the outer one's node is the one torch records. A registered op declares the same with its OpDef's `saves`
trait (flame/ir/registry.py), read by saved.torch_saved."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from flame.frontend.context import current_trace, grad_enabled
from flame.frontend.tensor import Tensor

_inside: ContextVar[bool] = ContextVar("flame_torch_saves_inside", default=False)


@dataclass(frozen=True)
class Declared:
    """What torch's node of composite `name` saved: `inputs`, eagerly (tensor, its version then) pairs,
    while tracing their Values; `result`: whether it saved its result."""

    name: str
    inputs: tuple
    result: bool


NOTHING = Declared("", (), False)  # an op inside a declared composite: torch records no node of its own


def saves(*what, name: str | None = None) -> Callable[[Callable], Callable]:
    """Decorator declaring what torch's node of a composite saves: the names of its tensor parameters,
    and "result" for its result; or one callable ({parameter's name: its argument, as given}) -> those
    names, where what torch saves depends on the arguments: on which gradients are asked (`wants`), or
    on the shapes that pick torch's kernel. `name`: the op named in the error (the function's name by
    default)."""

    def wrap(fn: Callable) -> Callable:
        params = list(inspect.signature(fn).parameters)
        label = name or fn.__name__

        @functools.wraps(fn)
        def run(*args, **kwargs):
            if _inside.get() or not grad_enabled.get():
                return fn(*args, **kwargs)
            token = _inside.set(True)
            trace = current_trace.get()
            start = len(trace.graph.ops) if trace is not None else 0
            try:
                out = fn(*args, **kwargs)
            finally:
                _inside.reset(token)
            if not isinstance(out, Tensor) or not out.requires_grad:
                return out
            given = {**dict(zip(params, args)), **kwargs}
            tensors = {k: v for k, v in given.items() if isinstance(v, Tensor)}
            picked = what[0](given) if callable(what[0]) else what
            kept = [tensors[k] for k in picked if k in tensors]
            if trace is not None:
                _mark_traced(trace, start, out, Declared(label, tuple(trace.value_of(t) for t in kept),
                                                         "result" in picked))
            elif out._node is not None:
                _mark_eager(out, tensors.values(), Declared(label, tuple((t, t._version) for t in kept),
                                                            "result" in picked))
            return out

        return run

    return wrap


def wants(given: dict, name: str) -> bool:
    """The argument of parameter `name` among a call's arguments (`given`) is a tensor that requires grad."""
    x = given.get(name)
    return isinstance(x, Tensor) and x.requires_grad


def _mark_traced(trace, start: int, out: Tensor, declared: Declared) -> None:
    for op in trace.graph.ops[start:]:
        trace.torch_saves[op] = NOTHING
    trace.torch_saves[trace.value_of(out).producer] = declared


def _mark_eager(out: Tensor, inputs, declared: Declared) -> None:
    """Mark the nodes between the composite's tensor arguments and its result."""
    seen = {id(t) for t in inputs}
    todo = [out]
    while todo:
        t = todo.pop()
        if id(t) in seen or t._node is None:
            continue
        seen.add(id(t))
        t._node.torch_saves = NOTHING
        todo.extend(x for x in t._node.inputs if isinstance(x, Tensor))
    out._node.torch_saves = declared
