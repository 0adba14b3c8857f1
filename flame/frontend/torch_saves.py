"""What torch's autograd node of a composite saves for its backward, where the composite is one node in
torch and several ops in flame: softmax's and log_softmax's nodes save their result, logsumexp's its input
and its result, mse_loss's its input and target. A write torch's version counter counts into a tensor the
node saved raises torch's error at backward (counted_writes.py); a write into one it did not save does not,
whatever the ops flame computes the composite with read (flame's recomputing backward reads the old values).

`saves(...)` declares it on the composite's function. A call recording a gradient history marks the ops
it recorded: the op that made its result carries the declaration (`Declared`: what it saved), the others
`inside(name)`: torch has no node of theirs, nor saved anything for them; an error about one names the
composite, as torch's names its node. Eagerly the marks are on the ops' Nodes (`torch_saves`);
while tracing, in Trace.torch_saves by op. A composite called inside another declared one marks nothing:
the outer one's node is the one torch records. A registered op declares the same with its OpDef's `saves`
trait (flame/ir/registry.py), read by saved.torch_saved.

`saves(..., vjp=fn)` also gives torch's backward formula of the composite on what its node saved:
fn(b, g, saved, args, given) -> {parameter name: gradient}, ops appended by Builder b to the gradient
graph, from the result's cotangent g, `saved` ({saved parameter's name, or "result": the value as the
backward reads it}), `args` ({tensor parameter's name: its value as the composite read it}) and `given`
(the call's other arguments by name, defaults included). flame differentiates the composite through its
own ops, the same gradient while nothing changed what torch's node saved; where a write through `.data`
did, torch's backward reads the new values through that formula, and so does flame's
(data_writes.composite_vjp). The declaration's mark carries the formula with the composite's tensor
arguments (`Formula`); where the result is a view of a value the composite made (logsumexp's squeeze),
the mark is on the op that made that value, which a write into the view writes into."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from flame.frontend.context import current_trace, grad_enabled
from flame.frontend.tensor import Tensor
from flame.ir import registry

_inside: ContextVar[bool] = ContextVar("flame_torch_saves_inside", default=False)


@dataclass(frozen=True)
class Formula:
    """torch's backward formula of one call of a composite (`saves`' vjp, `given`: the call's other
    arguments), its tensor arguments `args` by parameter name (eagerly (tensor, its version then, a node of
    the composite that read it and the position there, or None, None where no op that recorded a gradient
    read it), while tracing their Values) and the names of those
    torch's node saved (`saved`, "result" among them where it saved its result); `name`: the composite's.
    A formula flame does not have returns None (torch_formulas.not_in_flame): a backward that would need it
    raises."""

    fn: Callable
    given: dict
    args: tuple
    saved: tuple
    name: str = ""


@dataclass(frozen=True)
class Declared:
    """What torch's node of composite `name` saved: `inputs`, eagerly (tensor, its version then) pairs,
    while tracing their Values; `result`: whether it saved its result; `formula`: its backward on them.
    `outer`: for an op inside the composite (`inside`), eagerly, the node that carries the declaration."""

    name: str
    inputs: tuple
    result: bool
    formula: Formula | None = None
    outer: Any = field(default=None, compare=False)


def inside(name: str, outer=None) -> Declared:
    """The mark of an op inside declared composite `name` (eagerly, whose node is `outer`): torch records no
    node of its own for it."""
    return Declared(name, (), False, outer=outer)


def saves(*what, name: str | None = None, vjp: Callable | None = None) -> Callable[[Callable], Callable]:
    """Decorator declaring what torch's node of a composite saves: the names of its tensor parameters,
    and "result" for its result; or one callable ({parameter's name: its argument, as given}) -> those
    names, where what torch saves depends on the arguments: on which gradients are asked (`wants`), or
    on the shapes that pick torch's kernel. `name`: the op named in the error (the function's name by
    default). `vjp`: torch's backward formula on what its node saves (the module's docstring)."""

    def wrap(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        params = list(signature.parameters)
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
            formula = None if vjp is None else Formula(vjp, _given(signature, args, kwargs), (),
                                                      tuple(k for k in picked if k in tensors or k == "result"), label)
            if trace is not None:
                if formula is not None:
                    formula = replace(formula, args=tuple((k, trace.value_of(t)) for k, t in tensors.items()))
                _mark_traced(trace, start, out, Declared(label, tuple(trace.value_of(t) for t in kept),
                                                         "result" in picked, formula))
            elif out._node is not None:
                node, readers = _mark_eager(out, tensors.values(), Declared(label, tuple((t, t._version) for t in kept),
                                                                            "result" in picked))
                if formula is not None:
                    args = tuple((k, (t, t._version, *readers.get(id(t), (None, None)))) for k, t in tensors.items())
                    node.torch_saves = replace(node.torch_saves, formula=replace(formula, args=args))
            return out

        return run

    return wrap


def wants(given: dict, name: str) -> bool:
    """The argument of parameter `name` among a call's arguments (`given`) is a tensor that requires grad."""
    x = given.get(name)
    return isinstance(x, Tensor) and x.requires_grad


def of_every_element(given: dict) -> tuple[str, ...]:
    """What torch's node of max(), min(), median() or nanmedian() saves: over every element (no dim) its
    input and its result, which evenly_distribute_backward reads; max(other) and min(other), maximum's and
    minimum's, both operands. Along a dim the result is (values, indices), whose node saves the indices."""
    return ("self", "result") if given.get("dim") is None else ("self", "dim")


def _strided_view(name: str) -> bool:
    view = registry.get(name).view
    return view is not None and view.strided is not None


def _mark_traced(trace, start: int, out: Tensor, declared: Declared) -> None:
    ops = trace.graph.ops[start:]
    for op in ops:
        trace.torch_saves[op] = inside(declared.name)
    op = trace.value_of(out).producer
    made = set(ops)
    # a result that is a view of a value the composite made (logsumexp's squeeze): a write into it writes
    # into that value, which the ops after it read, so the mark goes on the op that made it
    while _strided_view(op.name) and op.inputs[0].producer in made:
        op = op.inputs[0].producer
    trace.torch_saves[op] = declared


def _given(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict:
    """The call's arguments other than tensors, by parameter name, defaults included."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if not isinstance(v, Tensor)}


def _mark_eager(out: Tensor, inputs, declared: Declared) -> tuple:
    """Mark the nodes between the composite's tensor arguments and its result. Returns (the node marked
    `declared`, {id(argument): (a node of the composite that read it, the position there)})."""
    seen = {id(t) for t in inputs}
    args = set(seen)
    readers: dict = {}
    todo, nodes = [out], []
    while todo:
        t = todo.pop()
        if id(t) in seen or t._node is None:
            continue
        seen.add(id(t))
        nodes.append(t._node)
        for k, x in enumerate(t._node.inputs):
            if isinstance(x, Tensor):
                todo.append(x)
                if id(x) in args:
                    readers.setdefault(id(x), (t._node, k))
    while _strided_view(out._node.name) and isinstance(out._node.inputs[0], Tensor) \
            and id(out._node.inputs[0]) not in args and out._node.inputs[0]._node is not None:
        out = out._node.inputs[0]  # (a view of a value the composite made: _mark_traced says why)
    for node in nodes:
        node.torch_saves = inside(declared.name, out._node)
    out._node.torch_saves = declared
    return out._node, readers
