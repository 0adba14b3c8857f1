"""@flame.compile: trace a function once per input signature into ONE graph, compile it through the
executor, and replay it on later calls without running the Python body again."""

from __future__ import annotations

import functools
import logging
import re
import struct
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from flame import debug
from flame.compiler import compile_graph
from flame.errors import FlameError, MemoryBudgetError
from flame.frontend import autocast
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.creation import as_tensor
from flame.frontend.tensor import Tensor
from flame.frontend.trace import Trace
from flame.ir.graph import Graph
from flame.ir.verify import verify
from flame.runtime.device import executor

log = logging.getLogger("flame")


def _flatten(obj: Any, leaves: list) -> Any:
    """Replace each Tensor in a nested tuple/list/dict by its index in `leaves`; returns the skeleton."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return ("__leaf__", len(leaves) - 1)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_flatten(x, leaves) for x in obj)
    if isinstance(obj, dict):
        return {k: _flatten(v, leaves) for k, v in obj.items()}
    return obj


def _unflatten(skel: Any, values: list) -> Any:
    if isinstance(skel, tuple) and len(skel) == 2 and skel[0] == "__leaf__":
        return values[skel[1]]
    if isinstance(skel, (tuple, list)):
        return type(skel)(_unflatten(x, values) for x in skel)
    if isinstance(skel, dict):
        return {k: _unflatten(v, values) for k, v in skel.items()}
    return skel


def _constant_key(a: Any) -> Hashable:
    """A non-tensor argument's part of the trace-cache key: its type and, for numbers, its bit pattern,
    so 0.0 and -0.0, 1 and 1.0 trace apart and a NaN matches itself (== would say otherwise)."""
    if isinstance(a, (tuple, list)):
        return type(a).__name__, tuple(_constant_key(x) for x in a)
    if isinstance(a, float):
        return "float", struct.pack("<d", a)
    if isinstance(a, complex):
        return "complex", struct.pack("<dd", a.real, a.imag)
    if isinstance(a, np.generic):
        return type(a).__name__, a.tobytes()
    return type(a).__name__, a


@dataclass
class _Entry:
    graph: Graph  # after the pass pipeline: what runs
    plan: object  # the memory-planned Plan of graph
    trace: Trace
    run: Callable
    out_skeleton: Any
    n_user: int
    grads: list  # (input index, output index or None): the input tensor's .grad after the call
    traced: Graph  # as traced, before any pass
    had_grad: list  # (tensor, whether its .grad was set when traced): a change means re-trace
    record: debug.CompileRecord | None = None  # kept only while the debug CLI observes

    @functools.cached_property
    def user_outputs_are_inputs(self) -> tuple[bool, ...]:
        """Per user output: is it a graph input itself (then the caller gets a copy, not the buffer)."""
        inputs = set(self.graph.inputs)
        return tuple(v in inputs for v in self.graph.outputs[: self.n_user])

    def guards_differ(self) -> str:
        """'' if the Python state the trace depends on (Trace.guard) reads as when traced, else what changed."""
        for read, value, what in self.trace.guards:
            if read() != value:
                return f"{what} changed"
        return ""

    def valid(self) -> str:
        """'' if every captured tensor still has its traced type, else why not."""
        for b, v in zip(self.trace.bindings, self.graph.inputs):
            t = b.tensor
            if b.kind == "tensor" and t._data is not b.checked:  # a tensor changes type only with its buffer
                if t.shape != v.type.shape or t.dtype != v.type.dtype:
                    return f"a captured tensor changed from {v.type} to {t.dtype}{list(t.shape)}"
                b.checked = t._data
            if b.kind == "tensor" and t.requires_grad != b.requires_grad:
                return f"a captured tensor's requires_grad is now {t.requires_grad} (frozen or unfrozen)"
            if b.kind == "grad" and (t._grad is None or t._grad.shape != v.type.shape):
                return "a .grad read by the traced function is now None or of another shape"
        for t, had_grad in self.had_grad:
            if (t._grad is not None) != had_grad:
                return ".grad of a parameter was None when traced and is set now (or the reverse)"
        return ""


class Compiled:
    """The result of @flame.compile. Call it like the function; `.trace(*args)` returns the Graph.
    memory_budget: see flame.compile."""

    def __init__(self, fn: Callable, name: str | None = None, memory_budget: float | None = None):
        self.fn = fn
        self.memory_budget = memory_budget
        # the graph's name: an IR identifier, so the printed graph parses back ("train step" -> train_step)
        self.name = re.sub(r"[^\w.\-]", "_", name or getattr(fn, "__name__", "fn").strip("<>")) or "fn"
        self._cache: dict[tuple, _Entry] = {}
        self._guarded: dict[tuple, list[_Entry]] = {}  # traces of a signature under other guard values
        functools.update_wrapper(self, fn)

    def _args(self, args: tuple) -> list:
        return [as_tensor(a) if isinstance(a, np.ndarray) else a for a in args]

    def _key(self, args: list) -> tuple:
        key = []
        for a in args:
            if isinstance(a, Tensor):
                key.append(("T", a.shape, a.dtype.name, a.requires_grad))
            else:
                try:
                    hash(a)
                except TypeError:
                    raise FlameError(f"{self.name}: argument {a!r} is neither a Tensor nor hashable; "
                                     f"non-tensor arguments are compile-time constants") from None
                key.append(("S", _constant_key(a)))
        return (*key, *autocast.cache_key())  # a call inside flame.autocast traces its own graph

    def _trace(self, args: list) -> tuple[Trace, Any]:
        if current_trace.get() is not None:
            raise FlameError(f"{self.name}: calling a compiled function inside another compiled "
                             f"function is not supported; call the plain function instead")
        tr = Trace(Graph(self.name))
        targs = [tr.add_arg(a, i) if isinstance(a, Tensor) else a for i, a in enumerate(args)]
        token = current_trace.set(tr)
        try:
            result = self.fn(*targs)
        finally:
            current_trace.reset(token)
        return tr, result

    def trace(self, *args) -> Graph:
        """The traced Graph (joint forward+backward+update if the function asks for gradients), before
        any simplification pass. `optimized(*args)` gives the graph that actually runs."""
        return self._build(self._args(args)).traced

    def optimized(self, *args) -> Graph:
        """The graph after the pass pipeline, as it is handed to the executor."""
        return self._build(self._args(args)).graph

    def _build(self, args: list) -> _Entry:
        tr, result = self._trace(args)
        had_grad = list(tr.grad_at_lift.values())
        leaves: list[Tensor] = []
        skel = _flatten(result, leaves)
        g = tr.graph
        g.outputs = [tr.value_of(t) for t in leaves]
        n_user = len(g.outputs)
        for _t, idx, v in tr.mutated():
            g.aliases[len(g.outputs)] = idx
            g.outputs.append(v)
        grads = []
        for t, _v in list(tr.current.values()):
            idx = g.inputs.index(tr.inputs_of[id(t)])
            if isinstance(t.grad, Tensor) and t.grad._trace is tr:
                grads.append((idx, len(g.outputs)))
                g.outputs.append(t.grad._value)
                t.grad = None
            elif t.grad is None and t._value is None:  # the body reset a captured tensor's .grad
                grads.append((idx, None))
        verify(g)
        try:
            c = compile_graph(g, report=True, own_run=True, memory_budget=self.memory_budget)
        except MemoryBudgetError as e:
            raise MemoryBudgetError(f"{e}\n  at {user_location()}") from None
        return _Entry(c.graph, c.plan, tr, c.run, skel, n_user, grads, g, had_grad, c.record)

    def memory_report(self, *args):
        """The planned device memory of a call with these arguments, before it runs (traces and
        compiles like a first call, which then reuses the result): peak bytes, what is live at the
        peak, activations saved for the backward. Printable; see flame.plan.memory."""
        from flame.plan.memory import memory_report

        args = self._args(args)
        key = self._key(args)
        entry = self._cache.get(key)
        if entry is None or entry.valid():
            entry = self._cache[key] = self._build(args)
        return memory_report(entry.plan)

    def _guarded_entry(self, key: tuple, entry: _Entry | None) -> tuple[_Entry | None, str]:
        """The trace for key whose guards hold now (swapping the current one out), or (None, why)."""
        changed = entry.guards_differ() if entry is not None else ""
        if not changed:
            return entry, ""
        others = self._guarded.setdefault(key, [])
        hit = next((e for e in others if not e.guards_differ()), None)
        others.append(entry)
        if hit is None:
            del others[:-8]  # a few traces per signature at most
            return None, changed
        others.remove(hit)
        self._cache[key] = hit
        return hit, ""

    def __call__(self, *args):
        args = self._args(args)
        key = self._key(args)
        entry, changed = self._guarded_entry(key, self._cache.get(key))
        why = changed or ("first call" if entry is None else entry.valid())
        if why:
            if self._cache:
                log.debug("flame: re-tracing %s: %s (signature %s)", self.name, why, key)
            entry = self._cache[key] = self._build(args)
        return self._run(entry, args)

    def _run(self, entry: _Entry, args: list):
        ex = executor()
        arrays = [entry.trace.concrete_value(b, args, ex) for b in entry.trace.bindings]
        if entry.record is not None and entry.record.inputs is None:
            entry.record.inputs = [np.array(ex.to_numpy(a)) for a in arrays]
        outs = entry.run(arrays)
        for o, i in entry.graph.aliases.items():
            t = _input_tensor(entry.trace.bindings[i], args)
            if outs[o] is not t._data:  # the plan usually updates the input's buffer in place
                t._data[...] = outs[o]
            t._version += 1
        for i, o in entry.grads:
            t = _input_tensor(entry.trace.bindings[i], args)
            new = None if o is None else Tensor._concrete(outs[o], entry.graph.outputs[o].dtype)
            if entry.trace.bindings[i].kind == "arg" and t.grad is not None:
                with no_grad():  # an argument's .grad accumulates across calls, as eager backward()
                    new = t.grad + new
            t.grad = new
        values = [Tensor._concrete(a.copy() if is_input else a, v.dtype)
                  for a, v, is_input in zip(outs, entry.graph.outputs, entry.user_outputs_are_inputs)]
        return _unflatten(entry.out_skeleton, values)


def _input_tensor(binding, args: list) -> Tensor:
    """The caller's tensor behind a graph input: a call argument or a captured tensor."""
    return args[binding.arg] if binding.kind == "arg" else binding.tensor


def compile(fn: Callable | None = None, *, name: str | None = None,  # noqa: A001
            memory_budget: float | None = None):
    """Decorator: `@flame.compile`, `@flame.compile(name="train_step")` or `flame.compile(fn, ...)`.

    memory_budget: the planned peak device memory a call may take, in bytes (an int, or a float
    above 1) or as a fraction in (0, 1] of the peak planned without a budget. The backward then
    recomputes forward values instead of keeping them: a minimum cut over the joint graph picks which
    (cheap elementwise work first; matmuls, attention and random draws only when the budget forces
    it; passes/remat.py). `memory_report(*args)` shows what is kept and recomputed and both peaks; a
    budget no recomputation meets raises flame.MemoryBudgetError naming the smallest reachable peak."""
    if fn is None:
        return lambda f: Compiled(f, name, memory_budget)
    return Compiled(fn, name, memory_budget)
