"""@flame.compile: trace a function once per input signature into ONE graph, compile it through the
executor, and replay it on later calls without running the Python body again."""

from __future__ import annotations

import functools
import inspect
import logging
import numbers
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from flame import _gc, debug
from flame._env import env_int
from flame.compiler import (
    check_activation_budget,
    check_memory_budget,
    compile_graph,
    compile_instance,
    optimize_graph,
)
from flame.errors import ArgumentError, ArgumentTypeError, FlameError, MemoryBudgetError, RecompileWarning
from flame.frontend import anomaly, autocast, compiled_outputs, host_random  # noqa: F401 (its tracing hook)
from flame.frontend.context import current_trace, tracing_hooks, user_location, user_stacklevel
from flame.frontend.creation import as_tensor, zeros
from flame.frontend.data_writes import written_positions
from flame.frontend.dynamic import NotDynamic, Template, changed_dims
from flame.frontend.guards import (
    Expected,
    Namer,
    argument_changes,
    describe_arguments,
    guards_key,
    python_value_guards,
    trace_guards,
    value_key,
)
from flame.frontend.leaf_writes import stand_in
from flame.frontend.replay import (
    Replay,
    bind_keywords,
    call_with_keywords,
    flatten,
    returned_as_is,
    returned_shared,
    unflattener,
)
from flame.frontend.saved import hooks_installed
from flame.frontend.size_template import SizeTemplate, family, made_constants_differ, shapes_of
from flame.frontend.tensor import Tensor
from flame.frontend.trace import Trace
from flame.ir.graph import Graph
from flame.ir.verify import verify
from flame.plan.memory import memory_report
from flame.runtime.device import executor

log = logging.getLogger("flame")


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
    template: SizeTemplate | None = None  # set on an entry instantiated from a dynamic-size template
    needs: tuple = ()  # user outputs torch would say require grad, of a body that ran no backward (compiled_outputs)
    recompute: compiled_outputs.Recompute | None = None  # their backward, made at the first call that marks them
    data_written: tuple = ()  # the body's writes through .data, for that backward (data_writes.written_positions)
    refused: tuple = ()  # (output, op name, location, freed): a backward from it refuses (Trace.refused_by_outputs)

    @property
    def family(self) -> tuple:
        return family(self.key)

    @property
    def shapes(self) -> dict[int, tuple]:
        return shapes_of(self.key)

    def forward_graph(self) -> Graph:
        """The traced graph at this entry's sizes (an entry instantiated from a plan template has none
        of its own: it is instantiated from the size template here)."""
        if self.traced is None:
            self.traced = self.template.template.instantiate(self.template.size_of(self.key))
        return self.traced

    @functools.cached_property
    def replay(self) -> Replay:
        """The per-call work around the plan's run, worked out once (flame.frontend.replay)."""
        return Replay(self.trace, self.graph, self.grads, self.n_user, self.out_skeleton, self.namer)

    def valid(self, args: list) -> str:
        """'' if this trace still describes the function for these arguments, else what changed. Runs
        before every replay: the common case is an identity check per captured tensor."""
        why = self.replay.changed(args)
        if why:
            return why
        for gd in self.guards:
            why = gd.failed()
            if why:
                return why
        return ""


class Variant:
    """One compiled variant of a Compiled function (one traced input signature), from
    `Compiled.variants()`: `graph` (after the passes: what runs), `traced` (as traced), `plan` (the
    memory-planned Plan) and `run`, the executor's callable from the plan's input arrays to its output
    arrays (on the CUDA executor it also tells `captures` and `why_no_graph` of its CUDA graphs).
    Setting `run` replaces what calls of this variant execute (a benchmark times flame's own per-call
    work with a run that does nothing)."""

    __slots__ = ("_entry",)

    def __init__(self, entry: _Entry):
        self._entry = entry

    @property
    def graph(self) -> Graph:
        """The graph after the pass pipeline, as the executor runs it."""
        return self._entry.graph

    @property
    def traced(self) -> Graph:
        """The graph as traced, before any pass."""
        return self._entry.traced

    @property
    def plan(self):
        """The memory-planned Plan of `graph`."""
        return self._entry.plan

    @property
    def run(self) -> Callable:
        """The executor's callable: the plan's input arrays -> its output arrays."""
        return self._entry.run

    @run.setter
    def run(self, fn: Callable) -> None:
        """What calls of this variant execute from now on."""
        self._entry.run = fn


def _holds_tensor(a: Any) -> bool:
    """a is a tuple, list or dict with a Tensor somewhere inside."""
    if isinstance(a, dict):
        a = list(a.values())
    return isinstance(a, (tuple, list)) and any(isinstance(x, Tensor) or _holds_tensor(x) for x in a)


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
    instantiations: int = 0  # calls at a new size of a dynamic dim: the template compiled, no trace
    instantiate_seconds: float = 0.0  # instantiating + planning (+ passes until learned) + executor compile
    dynamic: tuple[str, ...] = ()  # the dynamic dims, per template ("argument 0 dim 0 (s0 = 64, 32, ...)")
    size_kernels: int = 0  # kernel sources new at an instantiated size after the first (0: all take s0)
    size_replans: int = 0  # instantiated sizes whose plan was built again (a decision differs there)
    size_rerenders: int = 0  # kernels rendered again at such sizes (a guard of theirs fails there)

    def __str__(self) -> str:
        lines = [f"{self.traces} trace(s), {self.instantiations} size instantiation(s), {self.cache_hits} "
                 f"cache hit(s) in {self.calls} call(s); {self.variants} traced variant(s) of at most "
                 f"{self.cache_limit} cached; {self.compile_seconds * 1e3:.1f} ms tracing and compiling, "
                 f"{self.instantiate_seconds * 1e3:.1f} ms instantiating sizes ({self.size_kernels} kernel "
                 f"source(s) new after the first; {self.size_replans} size(s) planned again, "
                 f"{self.size_rerenders} kernel(s) rendered again)"]
        lines += [f"  dynamic: {d}" for d in self.dynamic]
        lines += [f"  re-trace {i + 2}: {why}" for i, why in enumerate(self.recompile_reasons)]
        return "\n".join(lines)


def _default_cache_limit() -> int:
    return env_int("FLAME_CACHE_LIMIT", 8, minimum=1)


def _cache_limit(value: Any, name: str) -> int:
    """flame.compile's cache_limit: an int of at least 1 (ArgumentTypeError / ArgumentError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"flame.compile({name}): cache_limit must be an int, got {type(value).__name__} "
                                f"{value!r}")
    if value < 1:
        raise ArgumentError(f"flame.compile({name}): cache_limit must be at least 1, got {value}")
    return int(value)


class Compiled:
    """The result of @flame.compile. Call it like the function; `.trace(*args)` returns the Graph.

    It traces once per input signature (each tensor argument's shape, dtype and requires_grad, each
    other argument's value) and replays the trace while the Python state the trace read is unchanged
    (see flame.frontend.guards): modules' train/eval mode where read, whether a .grad the body read
    first was set, plain Python globals and closure variables the function names. Every trace after
    the first emits a flame.RecompileWarning naming the cause; `stats()` counts traces, cache hits and
    compile time. At most `cache_limit` traces are kept (default 8, or $FLAME_CACHE_LIMIT); past it
    the least recently used one is dropped, and the warning says so. memory_budget, activation_budget:
    see flame.compile.

    Dynamic sizes (`dynamic`, see flame.compile): once a tensor argument's dim has been traced at two
    sizes, the two traces make one template with that dim as a symbol (flame.frontend.dynamic), and
    each later size is an instantiation of it (the Python body does not run). Once the graphs the
    passes made at two sizes fit one template too (`SizeTemplate.learn`), an instantiation only plans
    (compiler.compile_instance: kernels take the size as a parameter, so the executor compiles no new
    kernel source); until then it runs the passes and compiles for its size. Each size keeps its own
    plan (and CUDA graph) in the cache;
    instantiations do not count against cache_limit, at most DYNAMIC_SIZES of them per template are
    kept (least recently used dropped; a dropped size is instantiated again when it comes back).

    A function that runs no backward() itself (a model's forward: `model = flame.compile(model)`), called
    with gradients on, returns results a backward() outside differentiates through: the backward
    recomputes the forward (flame.frontend.compiled_outputs). A compiled module answers the module's
    attributes and methods (parameters(), train(), eval()), as torch.compile's module does."""

    DYNAMIC_SIZES = 64

    def __init__(self, fn: Callable, name: str | None = None, memory_budget: float | None = None,
                 cache_limit: int | None = None, warn: bool = True, dynamic: bool | None = None,
                 activation_budget: float | None = None):
        if dynamic not in (None, True, False):
            raise ValueError(f"flame.compile: dynamic must be None, True or False, got {dynamic!r}")
        self.fn = fn
        self.dynamic = dynamic
        self.warn = warn  # False for flame's own uses that the user did not ask to compile (eager flame.grad)
        # the graph's name: an IR identifier, so the printed graph parses back ("train step" -> train_step)
        fname = getattr(fn, "__name__", None) or type(fn).__name__  # a module: its class name
        self.name = re.sub(r"[^\w.\-]", "_", name or fname.strip("<>")) or "fn"
        self.memory_budget = check_memory_budget(memory_budget, f"flame.compile({self.name})")
        self.activation_budget = check_activation_budget(activation_budget, f"flame.compile({self.name})",
                                                         self.memory_budget)
        self._budget = self.memory_budget if self.activation_budget is None else self.activation_budget
        self.cache_limit = _default_cache_limit() if cache_limit is None else _cache_limit(cache_limit, self.name)
        self._cache: dict[tuple, list[_Entry]] = {}  # signature -> its traces (they differ in guards)
        self._arenas: dict[str, Any] = {}  # executor name -> the arena its plans share (_arena)
        self._calls = self._hits = self._traces = 0
        self._compile_seconds = 0.0
        self._reasons: list[str] = []
        self._last: _Entry | None = None
        self._memo: tuple | None = None  # the last call's signature (see _signature)
        self._checked: _Entry | None = None  # the entry this call's _lookup found valid (a cache hit)
        self._templates: list[SizeTemplate] = []
        self._static: dict[tuple, str] = {}  # (family, dims) -> why those dims cannot be dynamic
        self._mispredicted: set[tuple] = set()  # (family, dims) whose template a later size's trace refuted
        self._instantiations = 0
        self._instantiate_seconds = 0.0
        self._size_kernels = 0
        self._size_replans = 0
        self._size_rerenders = 0
        # a function's attributes are copied; a module's are read from it when asked (__getattr__), so
        # they stay current (its training flag after model.eval())
        functools.update_wrapper(self, fn, updated=functools.WRAPPER_UPDATES if inspect.isroutine(fn) else ())

    def __getattr__(self, name: str):
        """An attribute Compiled does not have, from the compiled callable: a module's parameters(),
        train(), eval() and its own attributes, as torch.compile's module gives them."""
        fn = self.__dict__.get("fn")
        if fn is None or inspect.isroutine(fn):  # a function's attributes were copied (update_wrapper)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(fn, name)

    def _args(self, args: tuple) -> list:
        return [as_tensor(a) if isinstance(a, np.ndarray) else a for a in args]

    def _key(self, args: list) -> tuple:
        key = []
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                key.append(("T", a.shape, a.dtype.name, a.requires_grad, *(a._hooks or ())))  # hooks: their ids
            else:
                if _holds_tensor(a):
                    raise FlameError(
                        f"{self.name}: argument {i} is a {type(a).__name__} holding tensors; a compiled function "
                        f"takes each tensor as an argument of its own (anything else is a compile-time constant): "
                        f"pass them unpacked, as `step(x, *hidden)`, and rebuild the {type(a).__name__} inside"
                        f"\n  at {user_location()}")
                try:
                    hash(a)
                except TypeError:
                    raise FlameError(f"{self.name}: argument {a!r} is neither a Tensor nor hashable; "
                                     f"non-tensor arguments are compile-time constants") from None
                key.append(("S", value_key(a)))
        # a call inside flame.autocast traces its own graph; one inside saved_tensors_hooks traces again, where
        # an op recording a gradient is a TraceError (frontend/saved.py)
        return (*key, *autocast.cache_key(), *((("saved_tensors_hooks",),) if hooks_installed() else ()))

    def _trace(self, args: list) -> tuple[Trace, Any]:
        if current_trace.get() is not None:
            raise FlameError(f"{self.name}: calling a compiled function inside another compiled "
                             f"function is not supported; call the plain function instead")
        tr = Trace(Graph(self.name))
        targs = [tr.add_arg(a, i) if isinstance(a, Tensor) else a for i, a in enumerate(args)]
        token = current_trace.set(tr)
        try:
            with tracing_hooks():
                result = call_with_keywords(self.fn, targs)
        finally:
            current_trace.reset(token)
        return tr, result

    def trace(self, *args) -> Graph:
        """The traced Graph (joint forward+backward+update if the function asks for gradients), before
        any simplification pass. `optimized(*args)` gives the graph that actually runs. Neither counts
        as a call in stats()."""
        with _gc.paused():  # building, as a call's miss does (module flame._gc)
            return self._build(self._args(args)).traced

    def optimized(self, *args) -> Graph:
        """The graph after the pass pipeline, as it is handed to the executor."""
        with _gc.paused():  # building, as a call's miss does (module flame._gc)
            return self._build(self._args(args)).graph

    def stats(self) -> CompileStats:
        """Traces, cache hits, variants cached and the time spent tracing and compiling so far."""
        return CompileStats(self._calls, self._traces, self._hits, len(self._entries()),
                            self.cache_limit, self._compile_seconds, tuple(self._reasons),
                            self._instantiations, self._instantiate_seconds,
                            tuple(d.describe() for d in self._templates), self._size_kernels,
                            self._size_replans, self._size_rerenders)

    def _build(self, args: list, compile: bool = True) -> _Entry:
        """Trace the body for these arguments and compile the graph (compile=False: a probe trace,
        whose entry has no plan and is never run)."""
        python_values = python_value_guards(self.fn)  # as the body starts to run
        tr, result = self._trace(args)
        for check in tr.after_body:
            check()
        tr.requires_grad_final, tr.modes_final = tr.requires_grad_set(), tr.modes_set()
        tr.requires_grad_final += [(i, proxy.requires_grad) for i, proxy in tr.args  # x.requires_grad_() in the body
                                   if proxy.requires_grad != args[i].requires_grad]
        leaves: list[Tensor] = []
        skel = flatten(result, leaves)
        g = tr.graph
        g.outputs = [tr.value_of(t) for t in leaves]
        n_user = len(g.outputs)
        tr.returned_as_is = returned_as_is(leaves, tr.args)
        tr.returned_shared = returned_shared(leaves, tr.returned_as_is)
        for _t, idx, v in tr.mutated():
            g.aliases[len(g.outputs)] = idx
            g.outputs.append(v)
        n_updates = len(g.outputs)
        grads = tr.grad_outputs(g)  # what it leaves in .grad: entries, or outputs aliased to .grad inputs
        verify(g, shape_rules=False)  # the Builder ran every shape rule as the body was traced
        namer = Namer(self.fn)
        entry = _Entry(g, None, tr, None, skel, n_user, grads, g, self._key(args),
                       describe_arguments(self.fn, args), trace_guards(self.fn, tr, namer, python_values), namer)
        if not grads and len(g.outputs) == n_updates and not tr.backward_freed:
            entry.needs = tuple(i for i, t in enumerate(leaves) if t.dtype.is_float and tr.requires_grad(t)
                                and i not in tr.returned_as_is)  # a tensor handed back itself has its history
            entry.data_written = written_positions(g, tr.written_now(), tr.torch_saves, tr.data_links,
                                                   tr.view_copies)
            entry.refused = tr.refused_by_outputs(g.outputs, entry.needs)
        return self._compile(entry) if compile else entry

    def _compile(self, entry: _Entry) -> _Entry:
        """entry with its traced graph run through compile_graph (passes, plan, executor)."""
        try:
            c = compile_graph(entry.traced, report=True, own_run=True, memory_budget=self.memory_budget,
                              activation_budget=self.activation_budget, persist=guards_key(entry.guards),
                              arena=self._arena())
        except MemoryBudgetError as e:
            raise MemoryBudgetError(f"{e}\n  at {user_location()}") from None
        entry.graph, entry.plan, entry.run, entry.record = c.graph, c.plan, c.run, c.record
        return entry

    def _arena(self):
        """The arena this function's plans share on the current executor (runtime.cuda.Arena: they run
        one at a time, so its traces and batch sizes hold the largest one's temporaries, not each their own)."""
        ex = executor()
        if ex.name not in self._arenas:
            self._arenas[ex.name] = ex.arena()
        return self._arenas[ex.name]

    def variants(self) -> list[Variant]:
        """The compiled variants cached now (one per traced input signature; sizes instantiated from a
        dynamic template left out), the most recently called first: each one's graph, plan and run."""
        return [Variant(e) for e in self._entries()]

    def _entries(self) -> list[_Entry]:
        """Every cached trace (sizes instantiated from a template left out), the most recently used first."""
        return sorted((e for es in self._cache.values() for e in es if e.template is None),
                      key=lambda e: -e.last_used)

    def _instantiate(self, args: list, key: tuple) -> tuple[_Entry | None, str]:
        """(the entry for a new size of a dynamic dim, made from its template without tracing, '') or
        (None, why the template cannot take this size: '' if no template covers these arguments)."""
        for dyn in self._templates:
            s = dyn.size_of(key)
            if s is None or dyn.base.valid(args):
                continue
            if not dyn.checked and (refuted := self._check_template(dyn, args, s)) is not None:
                return refuted, ""  # the first size it serves is traced too (Template.differs)
            t0 = time.perf_counter()
            try:  # with a plan template, its guards and forms stand for the traced graph's shape rules
                g = dyn.template.instantiate(s) if dyn.plans is None else None
                c, inst = (None, None) if dyn.plans is None else compile_instance(dyn.plans, s, self._arena())
            except NotDynamic as e:
                return None, f"{dyn.describe()} cannot take size {s}: {e}; tracing this size"
            b = dyn.base
            entry = _Entry(g, None, b.trace, None, b.out_skeleton, b.n_user, b.grads, g, key,
                           describe_arguments(self.fn, args), b.guards, b.namer, template=dyn, needs=b.needs,
                           data_written=b.data_written, refused=b.refused)
            if c is None:  # passes, plan and kernels for this size
                entry = self._compile(entry)
                log.info("flame.compile: %s: s0=%d compiled from the traced graph (passes and kernels for this "
                         "size: %s)", self.name, s, dyn.not_planned or "the optimised graph is not learned")
                if len(dyn.optimised) < 4:  # two sizes may group ops alike where a third does not (a dim equal to s0)
                    dyn.learn(entry.graph, self._budget)
            else:
                entry.graph, entry.plan, entry.run = c.graph, c.plan, c.run
                self._note_kernels(dyn, entry.plan, s, inst)
            self._instantiate_seconds += time.perf_counter() - t0
            self._instantiations += 1
            dyn.instances += 1
            mine = [e for es in self._cache.values() for e in es if e.template is dyn]
            if len(mine) >= self.DYNAMIC_SIZES:
                old = min(mine, key=lambda e: e.last_used)
                self._drop(old)
            return entry, ""
        return None, ""

    def _check_template(self, dyn: SizeTemplate, args: list, s: int) -> _Entry | None:
        """Trace the body at s, the first size dyn serves: None where the trace is dyn's graph at s (dyn
        then serves it and later sizes); else the trace's entry, compiled, with dyn dropped, its dims
        traced per size from now on and a warning saying where the trace and the template differ."""
        self._traces += 1
        entry = self._build(args, compile=False)
        why = dyn.template.differs(entry.traced, s)
        if why:
            why += " (a number computed from the size that is not affine in it, equal at the sizes traced)"
        else:  # a tensor the body made from Python values, equal at the sizes traced
            why = made_constants_differ(dyn.base.trace, entry.trace, (dyn.size_of(dyn.base.key), s))
        if not why:
            dyn.checked = True
            return None
        self._templates.remove(dyn)
        self._mispredicted.add((dyn.base.family, tuple(sorted(dyn.template.dims))))
        self._warn(f"{dyn.describe()} does not hold: {why}; specialising per size")
        return self._compile(entry)

    def _note_kernels(self, dyn: SizeTemplate, plan, s: int, inst) -> None:
        """Count and log what size s cost beyond evaluating the plan template (flame.plan.instance
        Instance): a plan built again or recorded for its class, kernels rendered again (a guard
        fails) or per size (no size parameter), kernel sources new to dyn's sizes."""
        new = {k.source: k.name for k in plan.kernels() if k.source not in dyn.sources}
        first = not dyn.sources
        dyn.sources.update(new)
        if not first:
            self._size_kernels += len(new)
        if inst.recorded:
            log.info("flame.compile: %s: s0=%d: plan recorded for this size's class (no recorded plan "
                     "took it: %s)", self.name, s, inst.rebuilt)
        elif inst.rebuilt:
            self._size_replans += 1
            self._size_rerenders += len(inst.rerendered)
            log.info("flame.compile: %s: s0=%d: planned again (%s); kernels rendered again: %s", self.name, s,
                     inst.rebuilt, "; ".join(inst.rerendered) or "none")
        if inst.per_size:
            log.info("flame.compile: %s: s0=%d: kernels rendered for this size (no size parameter): %s",
                     self.name, s, "; ".join(inst.per_size))
        if new and not first:
            log.info("flame.compile: %s: s0=%d: %d kernel source(s) new at this size (compiled once each): %s",
                     self.name, s, len(new), ", ".join(new.values()))

    def _make_dynamic(self, old: _Entry, new: _Entry) -> str:
        """Try to make the dims in which `new` differs from `old` (same family, both traced) dynamic.
        Returns the RecompileWarning's reason: the dims becoming dynamic, or why they cannot."""
        dims = changed_dims(old.shapes, new.shapes)
        if (old.family, tuple(sorted(dims))) in self._mispredicted:
            return ""  # a template of these dims did not hold at a size after them (_check_template)
        shown = ", ".join(f"argument {i} dim {d}" for i, d in sorted(dims))
        sizes = ", ".join(f"{a}, {b}" for a, b in sorted(set(dims.values()), reverse=True))
        try:
            template = Template(old.traced, new.traced, dims)
            if made := made_constants_differ(old.trace, new.trace, dims[min(dims)]):
                raise NotDynamic(made)
        except NotDynamic as e:  # tried again at the next size (a boundary size may trace differently)
            if (old.family, tuple(sorted(dims))) in self._static:
                return ""  # said once: later sizes re-trace with the plain reason
            self._static[(old.family, tuple(sorted(dims)))] = str(e)
            return f"{shown} changed (sizes {sizes}) but cannot be dynamic: {e}; specialising per size"
        self._templates.insert(0, SizeTemplate(template, new))
        if old.plan is not None:  # both sizes ran the passes: a new size only plans
            self._templates[0].learn(old.graph, self._budget)
            self._templates[0].learn(new.graph, self._budget)
        return f"{shown} {'is' if len(dims) == 1 else 'are'} now dynamic (sizes {sizes})"

    def _probe(self, entry: _Entry, args: list) -> None:
        """dynamic=True, first trace of a signature (`entry`, traced, not compiled): trace again with
        the batch dim (dim 0 of every tensor argument of the first one's dim 0) one larger, so that
        dim is dynamic from now on, and compile entry. With a plan template, entry's plan is the
        template's at its own size: its kernels take the size as a parameter, so the sizes after it
        compile none (a first smaller batch would otherwise pay NVRTC for the whole step once more);
        without one, or while the debug CLI observes (it reads the compile record), entry's own."""
        shapes = entry.shapes
        if not shapes or not shapes[min(shapes)]:
            self._compile(entry)
            return
        batch = shapes[min(shapes)][0]
        probe = [zeros((a.shape[0] + 1, *a.shape[1:]), dtype=a.dtype).requires_grad_(a.requires_grad)
                 if isinstance(a, Tensor) and a.shape and a.shape[0] == batch else a for a in args]
        self._traces += 1
        probe_entry = self._build(probe, compile=False)
        why = self._make_dynamic(entry, probe_entry)
        if not self._templates or self._templates[0].base is not probe_entry:  # no template made
            if why:  # why not (said once per family and dims)
                self._warn(f"dynamic=True: {why}")
            self._compile(entry)
            return
        # the template's base is the entry that runs (the probe only lent its numbers and its passes)
        dyn = self._templates[0]
        dyn.base = entry
        dyn.learn(optimize_graph(entry.traced, persist=guards_key(entry.guards)), self._budget)
        dyn.learn(optimize_graph(probe_entry.traced, persist=guards_key(probe_entry.guards)), self._budget)
        if dyn.plans is None or debug.observing():
            self._compile(entry)
            return
        try:
            c, inst = compile_instance(dyn.plans, batch, self._arena())
        except NotDynamic as e:
            log.info("flame.compile: %s: s0=%d planned from its own graph (%s)", self.name, batch, e)
            self._compile(entry)
            return
        entry.graph, entry.plan, entry.run = c.graph, c.plan, c.run
        dyn.sources.update(k.source for k in entry.plan.kernels())  # the first size: nothing counted as new
        if inst.rebuilt:
            log.info("flame.compile: %s: s0=%d (the first size) planned from the template's graph (%s)",
                     self.name, batch, inst.rebuilt)

    def _lookup(self, args: list) -> _Entry:
        """The cached trace valid for these arguments, tracing (and warning why) when none is."""
        if current_trace.get() is not None:
            self._trace(args)  # raises: compiled functions do not nest
        self._calls += 1
        self._checked = None
        key, entries = self._signature(args)
        why = ""
        for entry in entries:
            failed = entry.valid(args)
            if not failed:
                self._hits += 1
                entry.last_used = self._calls
                self._last = self._checked = entry
                return entry
            why = why or failed
        with _gc.paused():  # building (module flame._gc): a new size's plan, or a trace and its compile
            return self._build_for(args, key, why)

    def _build_for(self, args: list, key: tuple, why: str) -> _Entry:
        """_lookup's miss: the entry made for these arguments (instantiated from a size template, or
        traced and compiled, warning why), remembered in the cache."""
        if not why and self.dynamic is not False:
            entry, why = self._instantiate(args, key)
            if entry is not None:
                return self._remember(entry, key)
        # a sibling: the last traced entry of these arguments' family at other sizes (it may become a template)
        sibling = None
        if not why and self.dynamic is not False:
            sibling = next((e for e in self._entries() if e.family == family(key) and e.key != key
                            and not e.valid(args)), None)
        # dynamic=True, the first trace of a family: compiled by _probe (from the size template when one is made)
        probe = self.dynamic is True and sibling is None and not any(e.family == family(key)
                                                                     for e in self._entries())
        t0 = time.perf_counter()
        entry = self._build(args, compile=not probe)
        self._compile_seconds += time.perf_counter() - t0
        self._traces += 1
        templates = len(self._templates)
        dynamic = self._make_dynamic(sibling, entry) if sibling is not None else ""
        if self._last is not None:
            expected = isinstance(why, Expected) and why not in self._reasons
            if not why:  # a new signature: what differs from the last call, and what else changed
                changes = [argument_changes(self._last.arguments, describe_arguments(self.fn, args)),
                           "" if self._last.key == key else self._last.valid(args)]
                why = "; ".join(c for c in changes if c)
                # only sizes changed, and the changed dims are dynamic from now on (a smaller last batch):
                # expected, said at info level
                expected = not changes[1] and len(self._templates) > templates
            self._warn("; ".join(c for c in (why, dynamic) if c) or "the cached trace was dropped", expected)
        if probe:
            t0 = time.perf_counter()
            self._probe(entry, args)
            self._compile_seconds += time.perf_counter() - t0
        return self._remember(entry, key)

    def _signature(self, args: list) -> tuple[tuple, list]:
        """(_key(args), the traces cached for it). The last call's, without building the key again,
        when the arguments are the same objects (a tensor still holding the same array, with the same
        requires_grad) and autocast is as it was: an optimizer step called with the same gradients."""
        ac = (autocast.cache_key(), hooks_installed())
        if self._memo is not None:
            prev, arrays, flags, prev_ac, key, entries = self._memo
            if len(args) == len(prev) and ac == prev_ac:
                for a, p, d, r in zip(args, prev, arrays, flags):
                    if a is not p or (d is not None and (a._data is not d or a.requires_grad != r)):
                        break
                else:
                    return key, entries
        key = self._key(args)
        entries = self._cache.get(key, [])
        if entries:  # the memo holds the last arguments (their arrays stay alive until the next call)
            self._memo = (list(args), [a._data if isinstance(a, Tensor) else None for a in args],
                          [a.requires_grad if isinstance(a, Tensor) else None for a in args], ac, key, entries)
        return key, entries

    def _remember(self, entry: _Entry, key: tuple) -> _Entry:
        self._memo = None
        entry.last_used = self._calls
        self._cache.setdefault(key, []).insert(0, entry)
        self._last = entry
        return entry

    def _drop(self, entry: _Entry) -> None:
        self._memo = None
        self._cache[entry.key].remove(entry)
        if not self._cache[entry.key]:
            del self._cache[entry.key]

    def _warn(self, why: str, expected: bool = False) -> None:
        """Say why a call re-traced: a RecompileWarning, or (an expected re-trace) the log at info level."""
        self._reasons.append(why)
        msg = f"flame.compile: re-tracing {self.name}: {why}"
        cached = self._entries()
        if len(cached) >= self.cache_limit:
            self._drop(cached[-1])
            msg += (f" (cache_limit={self.cache_limit} traces reached: the least recently used trace is "
                    f"dropped; raise it with flame.compile(fn, cache_limit=N) or FLAME_CACHE_LIMIT, or keep "
                    f"what changes between calls fixed)")
        log.info("%s", msg)
        if self.warn and (not expected or len(cached) >= self.cache_limit):
            warnings.warn(msg, RecompileWarning, stacklevel=user_stacklevel())

    def memory_report(self, *args):
        """The planned device memory of a call with these arguments, before it runs (traces and
        compiles like a first call, which then reuses the result): peak bytes, what is live at the
        peak, activations saved for the backward. Printable; see flame.plan.memory."""
        return memory_report(self._lookup(self._args(args)).plan)

    def __call__(self, *args, **kwargs):
        args = self._args(bind_keywords(self.fn, self.name, args, kwargs) if kwargs else args)
        entry = self._lookup(args)
        return self._run(entry, args, checked=entry is self._checked)

    def _run(self, entry: _Entry, args: list, checked: bool = False):
        """Run entry's plan on these arguments; checked: entry.valid() passed in this call (its captured
        tensors' arrays are those it checked)."""
        ex = executor()
        arrays = entry.replay.inputs(args, ex, checked)
        if entry.record is not None:
            if entry.record.inputs is None:
                entry.record.inputs = [np.array(ex.to_numpy(a)) for a in arrays]
            entry.record.next_inputs = lambda: [np.array(ex.to_numpy(a)) for a in entry.replay.inputs(args, ex)]
        inputs = _call_inputs(entry, args, arrays) if entry.needs and compiled_outputs.recording() else None
        if anomaly.MODE[0]:  # anomaly detection: the gradient computation's steps watched
            with anomaly.watching(entry.plan):
                outs = entry.run(arrays)
        else:
            outs = entry.run(arrays)
        result = entry.replay.hand_back(outs, args, checked)
        return self._marked(entry, result, inputs) if inputs is not None else result

    def _marked(self, entry: _Entry, result: Any, inputs: list) -> Any:
        """result with the outputs torch would differentiate through marked, so that a backward()
        outside reaching them differentiates through the call (flame.frontend.compiled_outputs)."""
        if entry.recompute is None:
            entry.recompute = compiled_outputs.Recompute(self.name, entry.forward_graph, entry.needs,
                                                         entry.data_written, entry.refused)
        leaves: list = []
        skel = flatten(result, leaves)
        return unflattener(skel)(compiled_outputs.attach(entry.recompute, leaves, inputs))


def _call_inputs(entry: _Entry, args: list, arrays: list) -> list | None:
    """The tensors a backward through this call's results recomputes its forward from, one per graph
    input (flame.frontend.compiled_outputs): the argument or captured tensor itself, or a copy of the
    array this call reads where the call updates it in place or it is a .grad or a scalar; None
    where none of them requires grad (the results are then plain)."""
    updated, types = set(entry.graph.aliases.values()), entry.graph.inputs
    out, wanted = [], False
    for j, (b, a) in enumerate(zip(entry.trace.bindings, arrays)):
        t = args[b.arg] if b.kind == "arg" else b.tensor if b.kind == "tensor" else None
        if t is not None and j in updated and t.requires_grad and t._node is None:
            # a leaf the call wrote with no gradient recorded (through .data): its values before the call,
            # its gradient reaching it (leaf_writes.stand_in)
            t = stand_in(t, a.copy())
        elif t is None or j in updated:
            t = Tensor._concrete(a.copy(), types[j].dtype)
        wanted = wanted or t.requires_grad
        out.append(t)
    return out if wanted else None


def compile(fn: Callable | None = None, *, name: str | None = None,  # noqa: A001
            memory_budget: float | None = None, cache_limit: int | None = None, dynamic: bool | None = None,
            activation_budget: float | None = None):
    """Decorator: `@flame.compile`, `@flame.compile(name="train_step", cache_limit=16)` or
    `flame.compile(fn, ...)`. The function is traced once per input signature and replayed; see
    Compiled for what re-traces (each time with a flame.RecompileWarning) and for `cache_limit`.

    dynamic: None (default): a tensor argument's dim seen at a second size becomes dynamic (the
    warning says "argument 0 dim 0 is now dynamic (sizes 64, 32)"): later sizes instantiate the
    traced graph for the size instead of running the function again. True: also the batch dim (dim 0
    of the tensor arguments whose dim 0 is the first one's) is dynamic from the first call, which
    traces the body a second time at batch+1 to learn it (no warning). False: every size is traced
    and compiled on its own (specialised). A dim that cannot be dynamic (the body branches on it,
    or a number derived from it is not affine in it) is specialised with a warning saying why.

    memory_budget: the planned peak device memory a call may take, in bytes (an int, or a whole float
    above 1) or as a fraction in (0, 1] of the peak planned without a budget (anything else, such as
    1.5, 0 or inf, raises flame.ArgumentError). The backward then
    recomputes forward values instead of keeping them: a minimum cut over the joint graph picks which
    (cheap elementwise work first; matmuls, attention and random draws only when the budget forces
    it; passes/remat.py). `memory_report(*args)` shows what is kept and recomputed and both peaks; a
    budget no recomputation meets raises flame.MemoryBudgetError naming the smallest reachable peak.

    activation_budget: PyTorch's activation_memory_budget: the fraction in [0, 1] of the activation
    memory (the forward values kept for the backward, not parameters, optimizer state or inputs) that
    the plan without a budget keeps and this one may keep. 1 is that plan; 0 recomputes every forward
    value that may be. The solver (passes/activation_budget.py) recomputes elementwise work, then
    matmuls, convolutions and attention, and offloads values to pinned host memory, cheapest per byte
    at the Target's rates first; gradients are bit-identical to the plan without it. A bool, a
    non-number, NaN, inf or a number outside [0, 1] raises flame.ArgumentError (ArgumentTypeError for
    the wrong type); a budget nothing meets raises flame.MemoryBudgetError naming the floor. Give one
    of memory_budget and activation_budget."""
    kw = dict(memory_budget=memory_budget, cache_limit=cache_limit, dynamic=dynamic,
              activation_budget=activation_budget)
    if fn is None:
        return lambda f: Compiled(f, name, **kw)
    return Compiled(fn, name, **kw)
