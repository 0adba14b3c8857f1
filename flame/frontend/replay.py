"""What a call of a compiled function does around the plan's run on a cache hit, worked out once per
trace: check that the captured tensors still fit the trace, gather the graph inputs' arrays, and hand
the outputs back (in-place updates, .grad, the result's structure).

This Python runs at every call, against a GPU step that can take well under a millisecond (an
optimizer step over a model's parameters: a few hundred captured tensors), so every per-binding
decision (which kind, which argument, which output) is made here, once: a call walks flat lists
with one attribute read or write per tensor, and the slower checks that make messages run only when
something changed (a tensor got a new buffer)."""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable
from typing import Any

from flame._lists import all_same
from flame._lists import gather as _gather
from flame.errors import OverlapError
from flame.frontend import views
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply, watch_count, watched
from flame.frontend.guards import Expected, KeywordNames, Namer, role_of
from flame.frontend.tensor import Tensor
from flame.frontend.trace import Trace
from flame.ir.graph import Graph

_data = operator.attrgetter("_data")
_requires_grad = operator.attrgetter("requires_grad")


def bind_keywords(fn: Callable, name: str, args: tuple, kwargs: dict) -> tuple:
    """args with each keyword argument at its parameter's position, as a call of fn binds them (a
    parameter left out in between takes its default), then the keyword-only ones (and those **kwargs
    takes) by name order and their KeywordNames: a compiled function's arguments are positional (each
    one a graph input or a constant of the trace). A keyword fn does not take, or an argument given
    twice, raises the TypeError Python's call would."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{name}() {e}") from None
    bound.apply_defaults()
    named = sorted(k for k in bound.kwargs if k in kwargs)
    if not named:
        return bound.args
    return (*bound.args, *(bound.kwargs[k] for k in named), KeywordNames(tuple(named)))


def call_with_keywords(fn: Callable, args: list) -> Any:
    """fn called with args, whose KeywordNames at the end (bind_keywords) names the keyword arguments."""
    if args and isinstance(args[-1], KeywordNames):
        names = args[-1].names
        n = len(args) - 1 - len(names)
        return fn(*args[:n], **dict(zip(names, args[n:-1])))
    return fn(*args)


def flatten(obj: Any, leaves: list) -> Any:
    """Replace each Tensor in a nested tuple (namedtuples too)/list/dict by its index in `leaves`; returns
    the skeleton."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return ("__leaf__", len(leaves) - 1)
    if isinstance(obj, (tuple, list)):
        parts = [flatten(x, leaves) for x in obj]
        return type(obj)(*parts) if hasattr(obj, "_fields") else type(obj)(parts)  # a namedtuple: by position
    if isinstance(obj, dict):
        return {k: flatten(v, leaves) for k, v in obj.items()}
    return obj


def unflattener(skel: Any) -> Callable[[list], Any]:
    """values -> flatten's skeleton with each ("__leaf__", i) replaced by values[i]; the skeleton is
    walked here, once."""
    if isinstance(skel, tuple) and len(skel) == 2 and skel[0] == "__leaf__":
        return operator.itemgetter(skel[1])
    if isinstance(skel, (tuple, list)):
        parts, kind = [unflattener(x) for x in skel], type(skel)
        if hasattr(skel, "_fields"):  # a namedtuple (sort's, max's, cummax's results): by position
            return lambda values: kind(*[p(values) for p in parts])
        return lambda values: kind([p(values) for p in parts])
    if isinstance(skel, dict):
        items = [(k, unflattener(v)) for k, v in skel.items()]
        return lambda values: {k: p(values) for k, p in items}
    return lambda values: skel  # no tensor in it (None, a number)


def returned_as_is(leaves: list, args: list) -> dict[int, Any]:
    """{result index: what it is handed back as} for the results that are, as torch returns them, the
    caller's tensors: a captured tensor itself (`return w`), an argument's position (`return x`,
    `return x.add_(1)`), or (one of those, its view ops) for a view of one (`return x[1:]`), made again on
    the updated tensor after each call, so a write through the result reaches it. args: the trace's
    (position, proxy) pairs."""
    positions = {id(proxy): i for i, proxy in args}

    def own(t):  # the caller's tensor t stands for, or None
        return t if t._value is None else positions.get(id(t))

    out = {}
    for k, t in enumerate(leaves):
        if own(t) is not None:
            out[k] = own(t)
        elif t._base is not None and own(t._base) is not None and all(op.view is not None for op, _, _ in t._chain):
            out[k] = (own(t._base), tuple((op.name, attrs) for op, attrs, _ in t._chain), t._base.shape)
    return out


def returned_shared(leaves: list, as_is: dict) -> list[tuple[int, Any]]:
    """(result index, spec) for the results, not handed back as is, that share storage with another
    result, as torch returns them: the same tensor again (`return y, y`: spec ("same", j), j its first
    place) or a view of another result (`return y, y.view(-1)`: spec (j, its view ops, y's shape)),
    made again from that result after each call so that a write through one reaches the other. Views
    first: a tensor returned twice may be such a view."""
    first: dict[int, int] = {}
    for k, t in enumerate(leaves):
        first.setdefault(id(t), k)
    views, same = [], []
    for k, t in enumerate(leaves):
        if k in as_is:
            continue
        if first[id(t)] != k:
            same.append((k, ("same", first[id(t)])))
        elif t._base is not None and id(t._base) in first and all(op.view is not None for op, _, _ in t._chain):
            views.append((k, (first[id(t._base)], tuple((op.name, a) for op, a, _ in t._chain), t._base.shape)))
    return views + same


def _as_is(spec: Any, args: list) -> Tensor | None:
    """The tensor returned_as_is's `spec` stands for in a call with these arguments; None for a view
    of a tensor of another shape than traced (a size a dynamic trace took: its view ops are another's)."""
    if isinstance(spec, tuple):
        t = args[spec[0]] if isinstance(spec[0], int) else spec[0]
        if t.shape != spec[2]:
            return None
        for name, attrs in spec[1]:
            t = apply(name, t, **attrs)
        return t
    return args[spec] if isinstance(spec, int) else spec


class Replay:
    """One trace's per-call work. graph: the graph that runs (its aliases and outputs); grads:
    (argument position or captured tensor, output or None) per .grad the body leaves behind."""

    def __init__(self, trace: Trace, graph: Graph, grads: list, n_user: int, out_skeleton: Any, namer: Namer):
        bindings = trace.bindings
        self.namer = namer
        # captured tensors: checked (type, requires_grad) before each call, then read
        self.captured = [b.tensor for b in bindings if b.kind == "tensor"]
        self.traced_types = [v.type for b, v in zip(bindings, graph.inputs) if b.kind == "tensor"]
        self.requires_grad = [b.requires_grad for b in bindings if b.kind == "tensor"]
        self.checked: list = [None] * len(self.captured)  # the arrays whose type was checked (same: skip)
        # captured tensors whose .grad is an input (read before the body set it)
        self.grad_of = [b.tensor for b in bindings if b.kind == "grad"]
        self.grad_types = [v.type for b, v in zip(bindings, graph.inputs) if b.kind == "grad"]
        # arguments whose .grad the body read: (position, whether it was set), checked at every call
        self.arg_grad_reads = list(trace.arg_grad_reads.items())
        self.arg_grad_positions = [b.arg for b in bindings if b.kind == "arg_grad"]  # those bound as inputs
        # the graph inputs, in order, gathered from: captured arrays, then arguments, .grad, getters
        kinds = [b.kind for b in bindings]
        self.arg_positions = [b.arg for b in bindings if b.kind == "arg"]
        self.gather_args = _gather(self.arg_positions)
        self.getters = [b for b in bindings if b.kind == "getter"]
        pool = [j for k in ("tensor", "arg", "grad", "arg_grad", "getter") for j, kind in enumerate(kinds) if kind == k]
        at = {j: n for n, j in enumerate(pool)}
        self.gather_inputs = _gather([at[j] for j in range(len(bindings))])
        # in-place updates: (output, argument position or -1, captured tensor or None) per alias of an
        # argument or captured tensor; (output, tensor or argument position) per .grad input updated in
        # place (its .grad)
        self.aliases = [(o, bindings[i].arg, None if bindings[i].kind == "arg" else bindings[i].tensor)
                        for o, i in graph.aliases.items() if bindings[i].kind in ("arg", "tensor")]
        self.grad_aliases = [(o, bindings[i].tensor if bindings[i].kind == "grad" else bindings[i].arg)
                             for o, i in graph.aliases.items() if bindings[i].kind in ("grad", "arg_grad")]
        self.aliased = None if any(t is None for _, _, t in self.aliases) else [t for _, _, t in self.aliases]
        self.alias_outputs = _gather([o for o, _, _ in self.aliases])
        self.written_args = sorted({i for _, i, t in self.aliases if t is None})  # (checked by shared_writes)
        # the captured tensors updated in place, as indices into `checked` (what changed() verified)
        self.pick_aliased = None if self.aliased is None else _gather(
            [next(k for k, c in enumerate(self.captured) if c is t) for t in self.aliased])
        self.bumped: tuple | None = None  # (dispatch.watch_count(), the aliased tensors eager graphs watch)
        outputs = graph.outputs
        # .grad: (argument position or tensor, output) per argument or captured tensor the body left a new
        # .grad; the arguments and captured tensors whose .grad the body set to None
        self.arg_grads = [(i, o, outputs[o].dtype) for i, o in grads if isinstance(i, int) and o is not None]
        self.arg_grads_cleared = [i for i, o in grads if isinstance(i, int) and o is None]
        self.grads_set = [(t, o, outputs[o].dtype) for t, o in grads if not isinstance(t, int) and o is not None]
        self.grads_cleared = [t for t, o in grads if not isinstance(t, int) and o is None]
        inputs = set(graph.inputs)  # a user output that is an input itself is handed back as a copy
        self.users = [(o, v.dtype, v in inputs) for o, v in enumerate(outputs[:n_user])]
        # a captured tensor or an argument the body returned itself (or a view of one) comes back as it
        self.as_is = list(trace.returned_as_is.items())
        self.shared = trace.returned_shared  # results that are another result, or a view of one
        self.before_run = trace.before_run  # Python state the body set, set again before each run
        self.requires_grad_set = trace.requires_grad_final  # (tensor, flag) per requires_grad the body set
        self.modes_set = trace.modes_final  # (module, training) per module the body switched (train()/eval())
        self.unflatten = unflattener(out_skeleton)

    def changed(self, args: list) -> str:
        """'' if every captured tensor and every .grad input still has its traced type (and the captured
        tensors their requires_grad; an argument's .grad the body read is still set, or unset), else
        what changed. The common case: an identity check of each captured tensor's array
        against the one checked before."""
        for i, had in self.arg_grad_reads:
            g = getattr(args[i], "_grad", None) if i < len(args) else None  # args of another signature: None
            if had != (g is not None):  # None -> set: gradient accumulation's first call, then the others
                return f"argument {i}.grad: set -> None" if had else Expected(f"argument {i}.grad: None -> set")
        # map/attrgetter/is_ walk the lists in C: a few hundred tensors cost microseconds
        same = all_same(map(_data, self.captured), self.checked)
        if not same or list(map(_requires_grad, self.captured)) != self.requires_grad:
            why = self._tensor_changed()
            if why:
                return why
        for t, ty in zip(self.grad_of, self.grad_types):  # new .grad tensors at every call: no memo
            g = t._grad
            if g is None or g.shape != ty.shape or g.dtype != ty.dtype:
                return f"{self.namer.tensor(t, role_of(t))}.grad: {ty} -> {'None' if g is None else g._type()}"
        return ""

    def _tensor_changed(self) -> str:
        for k, t in enumerate(self.captured):
            ty = self.traced_types[k]
            if t._data is not self.checked[k]:  # a tensor changes type only with its buffer
                if t.shape != ty.shape or t.dtype != ty.dtype:
                    return f"{self.namer.tensor(t, role_of(t))}: {ty} -> {t._type()}"
                self.checked[k] = t._data
            if t.requires_grad != self.requires_grad[k]:  # frozen or unfrozen (LoRA)
                return f"{self.namer.tensor(t, role_of(t))}: requires_grad {self.requires_grad[k]} -> {t.requires_grad}"
        return ""

    def inputs(self, args: list, executor, checked: bool = False) -> list:
        """The graph inputs' arrays for a call with these arguments, in input order. checked: changed()
        found nothing in this call, so the captured tensors hold the arrays it checked."""
        if self.written_args:
            _refuse_shared_writes(self.written_args, args)
        for set_again in self.before_run:  # an optimizer option the body set before using it
            set_again()
        pool = list(self.checked) if checked else list(map(_data, self.captured))
        pool += map(_data, self.gather_args(args))
        pool += [t._grad._data for t in self.grad_of]
        pool += [args[i]._grad._data for i in self.arg_grad_positions]
        pool += [b.scalar_array(executor) for b in self.getters]
        return list(self.gather_inputs(pool))

    def hand_back(self, outs: list, args: list, checked: bool = False) -> Any:
        """After a run: in-place updates land in the caller's tensors (their buffers, their versions),
        every .grad the body left goes to its tensor, and the user's outputs come back in the structure
        the function returned. checked: as for inputs()."""
        tensors = self.aliased if self.aliased is not None else \
            [args[i] if t is None else t for _, i, t in self.aliases]
        updated = self.alias_outputs(outs)
        held = self.pick_aliased(self.checked) if checked and self.pick_aliased is not None else map(_data, tensors)
        if not all_same(updated, held):  # usually updated in place
            for t, a in zip(tensors, updated):
                if a is not t._data:
                    t._data[...] = a
        self._bump_versions(tensors)
        for o, t in self.grad_aliases:  # usually written in place: the bound array is the plan's output
            grad, a = (args[t] if isinstance(t, int) else t)._grad, outs[o]
            if a is not grad._data:
                grad._data[...] = a
            grad._version += 1
        for i, o, dtype in self.arg_grads:
            args[i]._grad = Tensor._concrete(outs[o], dtype)
        for i in self.arg_grads_cleared:
            args[i]._grad = None
        for t, o, dtype in self.grads_set:
            t._grad = Tensor._concrete(outs[o], dtype)
        for t in self.grads_cleared:
            t._grad = None
        for t, flag in self.requires_grad_set:  # set by the body (a GAN's step freezing the discriminator)
            (args[t] if isinstance(t, int) else t)._requires_grad = flag
        for m, mode in self.modes_set:  # switched by the body (model.train() as a step begins)
            m.training = mode
        values = [Tensor._concrete(outs[o].copy() if copy else outs[o], dtype) for o, dtype, copy in self.users]
        for o, spec in self.as_is:
            t = _as_is(spec, args)
            if t is not None:
                values[o] = t
        for o, (j, *view) in self.shared:
            if j == "same":
                values[o] = values[view[0]]
            elif values[j].shape == view[1]:  # (a size a dynamic trace took: its view ops are another's)
                t = values[j]
                for name, attrs in view[0]:
                    t = apply(name, t, **attrs)
                values[o] = t
        return self.unflatten(values)

    def _bump_versions(self, tensors: list) -> None:
        """A new version for each updated tensor whose version an eager graph recorded (only those can
        make a backward() raise: dispatch.record_versions); the captured ones' list is worked out
        again only when a tensor joined the watched ones."""
        if self.aliased is None:  # arguments among them: other tensors at every call
            for t in tensors:
                t._version += 1
            return
        if self.bumped is None or self.bumped[0] != watch_count():
            self.bumped = watched(self.aliased)
        for t in self.bumped[1]:
            t._version += 1


def _refuse_shared_writes(written: list[int], args: list) -> None:
    """A compiled function takes each argument as a buffer of its own: where it writes argument i in place
    and another argument shares i's memory (the same tensor twice, views of one tensor), or i's own elements
    share memory (an expanded tensor), torch's reads of the other elements after the write see it and the
    plan's may not, so the call raises instead."""
    for i in written:
        if views.overlapping(args[i]):  # its buffer holds each shared element once per place it appears
            raise OverlapError(
                f"argument {i} is an expanded tensor (some of its elements share one memory location) and the "
                f"compiled function writes it in place: it takes the argument as a buffer of its own, so a write "
                f"into some of those elements would not reach the others as torch's does; pass the tensor it "
                f"expands (and expand it inside), or clone() it\n  at {user_location()}")
        for j, a in enumerate(args):
            if j != i and isinstance(a, Tensor) and a._data is not None and a.numel() and args[i].numel() and (
                    a is args[i] or views.shares(a._data, args[i]._data)):
                raise OverlapError(
                    f"argument {j} shares memory with argument {i}, which the compiled function writes in place: "
                    f"it takes each argument as a buffer of its own, so the write would not reach argument {j} "
                    f"as torch's does; pass the tensor once (and take the views inside), or clone() one of them"
                    f"\n  at {user_location()}")
