"""@flame.compile: trace a function once per input signature into ONE graph, compile it through the
executor, and replay it on later calls without running the Python body again."""

from __future__ import annotations

import functools
import logging
import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from flame import debug
from flame.compiler import compile_graph
from flame.errors import FlameError, MemoryBudgetError, RecompileWarning
from flame.frontend import autocast
from flame.frontend.context import current_trace, no_grad, user_location, user_stacklevel
from flame.frontend.creation import as_tensor
from flame.frontend.guards import (
    Namer,
    argument_changes,
    describe_arguments,
    python_value_guards,
    role_of,
    trace_guards,
    value_key,
)
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


@dataclass
class _Entry:
    """One cached trace (a variant): what runs, and what must hold for it to replay."""

    graph: Graph  # after the pass pipeline: what runs
    plan: object  # the memory-planned Plan of graph
    trace: Trace
    run: Callable
    out_skeleton: Any
    n_user: int
    grads: list  # (argument position or captured tensor, output index or None): .grad after the call
    traced: Graph  # as traced, before any pass
    key: tuple  # the input signature it was traced for
    arguments: list  # guards.describe_arguments of the call that traced it
    guards: list  # Python state the trace baked in (objects with failed() -> str: see guards.py)
    namer: Namer
    record: debug.CompileRecord | None = None  # kept only while the debug CLI observes
    last_used: int = 0

    @functools.cached_property
    def user_outputs_are_inputs(self) -> tuple[bool, ...]:
        """Per user output: is it a graph input itself (then the caller gets a copy, not the buffer)."""
        inputs = set(self.graph.inputs)
        return tuple(v in inputs for v in self.graph.outputs[: self.n_user])

    @functools.cached_property
    def _captured(self) -> tuple[list, list]:
        """(binding, tensor, traced type) of the captured tensors, and of the .grad inputs."""
        pairs = list(zip(self.trace.bindings, self.graph.inputs))
        return ([(b, b.tensor, v.type) for b, v in pairs if b.kind == "tensor"],
                [(b.tensor, v.type) for b, v in pairs if b.kind == "grad"])

    def valid(self) -> str:
        """'' if this trace still describes the function for these inputs, else what changed. Runs
        before every replay: the common case is a few identity checks per captured tensor."""
        tensors, grads = self._captured
        for b, t, ty in tensors:
            if t._data is not b.checked:  # a tensor changes type only with its buffer
                if t.shape != ty.shape or t.dtype != ty.dtype:
                    return f"{self.namer.tensor(t, role_of(t))}: {ty} -> {t._type()}"
                b.checked = t._data
            if t.requires_grad != b.requires_grad:  # frozen or unfrozen (LoRA)
                return f"{self.namer.tensor(t, role_of(t))}: requires_grad {b.requires_grad} -> {t.requires_grad}"
        for t, ty in grads:
            g = t._grad
            if g is None or g.shape != ty.shape or g.dtype != ty.dtype:
                return f"{self.namer.tensor(t, role_of(t))}.grad: {ty} -> {'None' if g is None else g._type()}"
        for gd in self.guards:
            why = gd.failed()
            if why:
                return why
        return ""


@dataclass(frozen=True)
class CompileStats:
    """What a compiled function has done so far (`Compiled.stats()`)."""

    calls: int  # calls that ran the function (memory_report's lookups included)
    traces: int  # times the Python body was traced (the first included)
    cache_hits: int  # calls that replayed a cached trace
    variants: int  # traces cached now
    cache_limit: int
    compile_seconds: float  # tracing + passes + planning + executor compile, over every trace
    recompile_reasons: tuple[str, ...]  # why each trace after the first was made

    def __str__(self) -> str:
        lines = [f"{self.traces} trace(s), {self.cache_hits} cache hit(s) in {self.calls} call(s); "
                 f"{self.variants} of at most {self.cache_limit} cached; {self.compile_seconds * 1e3:.1f} ms "
                 f"tracing and compiling"]
        lines += [f"  re-trace {i + 2}: {why}" for i, why in enumerate(self.recompile_reasons)]
        return "\n".join(lines)


def _default_cache_limit() -> int:
    return int(os.environ.get("FLAME_CACHE_LIMIT", "8"))


class Compiled:
    """The result of @flame.compile. Call it like the function; `.trace(*args)` returns the Graph.

    It traces once per input signature (each tensor argument's shape, dtype and requires_grad, each
    other argument's value) and replays the trace while the Python state the trace read is unchanged
    (see flame.frontend.guards): modules' train/eval mode where read, whether a .grad the body read
    first was set, plain Python globals and closure variables the function names. Every trace after
    the first emits a flame.RecompileWarning naming the cause; `stats()` counts traces, cache hits and
    compile time. At most `cache_limit` traces are kept (default 8, or $FLAME_CACHE_LIMIT); past it
    the least recently used one is dropped, and the warning says so. memory_budget: see flame.compile."""

    def __init__(self, fn: Callable, name: str | None = None, memory_budget: float | None = None,
                 cache_limit: int | None = None, warn: bool = True):
        self.fn = fn
        self.memory_budget = memory_budget
        self.warn = warn  # False for flame's own uses that the user did not ask to compile (eager flame.grad)
        # the graph's name: an IR identifier, so the printed graph parses back ("train step" -> train_step)
        self.name = re.sub(r"[^\w.\-]", "_", name or getattr(fn, "__name__", "fn").strip("<>")) or "fn"
        self.cache_limit = _default_cache_limit() if cache_limit is None else int(cache_limit)
        if self.cache_limit < 1:
            raise ValueError(f"flame.compile({self.name}): cache_limit must be at least 1, got {self.cache_limit}")
        self._cache: dict[tuple, list[_Entry]] = {}  # signature -> its traces (they differ in guards)
        self._calls = self._hits = self._traces = 0
        self._compile_seconds = 0.0
        self._reasons: list[str] = []
        self._last: _Entry | None = None
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
                key.append(("S", value_key(a)))
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
        any simplification pass. `optimized(*args)` gives the graph that actually runs. Neither counts
        as a call in stats()."""
        return self._build(self._args(args)).traced

    def optimized(self, *args) -> Graph:
        """The graph after the pass pipeline, as it is handed to the executor."""
        return self._build(self._args(args)).graph

    def stats(self) -> CompileStats:
        """Traces, cache hits, variants cached and the time spent tracing and compiling so far."""
        return CompileStats(self._calls, self._traces, self._hits, len(self._entries()),
                            self.cache_limit, self._compile_seconds, tuple(self._reasons))

    def _build(self, args: list) -> _Entry:
        python_values = python_value_guards(self.fn)  # as the body starts to run
        tr, result = self._trace(args)
        leaves: list[Tensor] = []
        skel = _flatten(result, leaves)
        g = tr.graph
        g.outputs = [tr.value_of(t) for t in leaves]
        n_user = len(g.outputs)
        for _t, idx, v in tr.mutated():
            g.aliases[len(g.outputs)] = idx
            g.outputs.append(v)
        grads = _grad_outputs(tr, g)
        verify(g)
        try:
            c = compile_graph(g, report=True, own_run=True, memory_budget=self.memory_budget)
        except MemoryBudgetError as e:
            raise MemoryBudgetError(f"{e}\n  at {user_location()}") from None
        namer = Namer(self.fn)
        return _Entry(c.graph, c.plan, tr, c.run, skel, n_user, grads, g, self._key(args),
                      describe_arguments(self.fn, args), trace_guards(self.fn, tr, namer, python_values),
                      namer, c.record)

    def _entries(self) -> list[_Entry]:
        """Every cached trace, the most recently used first."""
        return sorted((e for es in self._cache.values() for e in es), key=lambda e: -e.last_used)

    def _lookup(self, args: list) -> _Entry:
        """The cached trace valid for these arguments, tracing (and warning why) when none is."""
        if current_trace.get() is not None:
            self._trace(args)  # raises: compiled functions do not nest
        self._calls += 1
        key = self._key(args)
        why = ""
        for entry in self._cache.get(key, ()):
            failed = entry.valid()
            if not failed:
                self._hits += 1
                entry.last_used = self._calls
                self._last = entry
                return entry
            why = why or failed
        if self._last is not None:
            if not why:  # a new signature: what differs from the last call, and what else changed
                changes = [argument_changes(self._last.arguments, describe_arguments(self.fn, args)),
                           "" if self._last.key == key else self._last.valid()]
                why = "; ".join(c for c in changes if c)
            self._warn(why or "the cached trace was dropped")
        t0 = time.perf_counter()
        entry = self._build(args)
        self._compile_seconds += time.perf_counter() - t0
        self._traces += 1
        entry.last_used = self._calls
        self._cache.setdefault(key, []).insert(0, entry)
        self._last = entry
        return entry

    def _warn(self, why: str) -> None:
        self._reasons.append(why)
        msg = f"flame.compile: re-tracing {self.name}: {why}"
        cached = self._entries()
        if len(cached) >= self.cache_limit:
            old = cached[-1]
            self._cache[old.key].remove(old)
            if not self._cache[old.key]:
                del self._cache[old.key]
            msg += (f" (cache_limit={self.cache_limit} traces reached: the least recently used trace is "
                    f"dropped; raise it with flame.compile(fn, cache_limit=N) or FLAME_CACHE_LIMIT, or keep "
                    f"what changes between calls fixed)")
        log.info("%s", msg)
        if self.warn:
            warnings.warn(msg, RecompileWarning, stacklevel=user_stacklevel())

    def memory_report(self, *args):
        """The planned device memory of a call with these arguments, before it runs (traces and
        compiles like a first call, which then reuses the result): peak bytes, what is live at the
        peak, activations saved for the backward. Printable; see flame.plan.memory."""
        from flame.plan.memory import memory_report

        return memory_report(self._lookup(self._args(args)).plan)

    def __call__(self, *args):
        args = self._args(args)
        return self._run(self._lookup(args), args)

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
        for target, o in entry.grads:
            new = None if o is None else Tensor._concrete(outs[o], entry.graph.outputs[o].dtype)
            if isinstance(target, int):  # an argument's .grad accumulates across calls, as eager backward()
                t = args[target]
                if t.grad is not None and new is not None:
                    with no_grad():
                        new = t.grad + new
                t.grad = new if new is not None else t.grad
            else:
                target.grad = new
        values = [Tensor._concrete(a.copy() if is_input else a, v.dtype)
                  for a, v, is_input in zip(outs, entry.graph.outputs, entry.user_outputs_are_inputs)]
        return _unflatten(entry.out_skeleton, values)


def _grad_outputs(tr: Trace, g: Graph) -> list:
    """Appends to g's outputs every .grad the body leaves behind and returns, per tensor, (argument
    position or the captured tensor, output index or None for "set to None")."""
    grads = []
    for position, proxy in tr.args:  # arguments: their traced proxies carry the .grad backward() set
        if isinstance(proxy._grad, Tensor) and proxy._grad._trace is tr:
            grads.append((position, len(g.outputs)))
            g.outputs.append(proxy._grad._value)
    for key, (t, view) in tr.grad_view.items():
        if view is None:
            if key in tr.grad_writes:
                grads.append((t, None))
            continue
        v = tr.value_of(view)
        if key not in tr.grad_writes and v is tr.grad_inputs.get(key):
            continue  # read and left as it was
        grads.append((t, len(g.outputs)))
        g.outputs.append(v)
    return grads


def _input_tensor(binding, args: list) -> Tensor:
    """The caller's tensor behind a graph input: a call argument or a captured tensor."""
    return args[binding.arg] if binding.kind == "arg" else binding.tensor


def compile(fn: Callable | None = None, *, name: str | None = None,  # noqa: A001
            memory_budget: float | None = None, cache_limit: int | None = None):
    """Decorator: `@flame.compile`, `@flame.compile(name="train_step", cache_limit=16)` or
    `flame.compile(fn, ...)`. The function is traced once per input signature and replayed; see
    Compiled for what re-traces (each time with a flame.RecompileWarning) and for `cache_limit`.

    memory_budget: the planned peak device memory a call may take, in bytes (an int, or a float
    above 1) or as a fraction in (0, 1] of the peak planned without a budget. The backward then
    recomputes forward values instead of keeping them: a minimum cut over the joint graph picks which
    (cheap elementwise work first; matmuls, attention and random draws only when the budget forces
    it; passes/remat.py). `memory_report(*args)` shows what is kept and recomputed and both peaks; a
    budget no recomputation meets raises flame.MemoryBudgetError naming the smallest reachable peak."""
    if fn is None:
        return lambda f: Compiled(f, name, memory_budget=memory_budget, cache_limit=cache_limit)
    return Compiled(fn, name, memory_budget=memory_budget, cache_limit=cache_limit)
