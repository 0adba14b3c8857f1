"""A plan made once for every size of a dynamic dim (flame.ir.symbolic): `PlanTemplate`.

The plan is built once, at one size s_a, while the sizes are SymInts and every decision taken on
them is recorded (symbolic.recording): the graph's shape rules, codegen's choices per kernel (vector
width, 32- or 64-bit indexing, a split or capped grid, alignment: each lowering's own guards) and
the builder's and memory planner's (which buffers are views, which outputs update their input in
place, which temporaries share a slot). Its numbers are functions of s0: shapes and byte counts are
SymInts, launch geometry and aligned sizes SizeExprs. It is then built at a second size s_b and the
two must agree number for number (a size read as a plain int somewhere would differ there: that plan
is not a template, and every size is planned in full, as before).

`instantiate(s)` is then: the graph at s (without its shape rules: the recorded guards stand for
them), every step and buffer with its numbers evaluated at s, the arena placed again by best fit
(flame.plan.memory.place: only the sizes change; which blocks exist was decided under guards). When
a plan-level guard fails at s the plan is built again at s, reusing every kernel whose own guards
hold there (plan.build.KernelMemo) and rendering the others (said in the log and the result)."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable

from flame.ir import symbolic
from flame.ir.graph import Graph, Op
from flame.plan.build import KernelMemo, at_size, kernel_memo, to_plan
from flame.plan.memory import arena_blocks, place
from flame.plan.steps import Buffer, Plan, with_fields
from flame.target import Target

log = logging.getLogger("flame")


@dataclasses.dataclass
class Instance:
    """A plan at one size. `rebuilt`: '' when a recorded plan served the size, else the decision that
    differs here (the plan was built again, or recorded anew for this size's class: `recorded`);
    `rerendered`: the kernels rendered again because a guard of theirs fails here ("name: why");
    `per_size`: kernels rendered with this size's value (no size parameter: "name: why")."""

    plan: Plan
    rebuilt: str = ""
    rerendered: list[str] = dataclasses.field(default_factory=list)
    per_size: list[str] = dataclasses.field(default_factory=list)
    recorded: bool = False


class _Variant:
    """The plan recorded at one size: its graph, plan, plan-level guards, kernels with their guards
    (KernelMemo), arena blocks, and for each step and buffer holding numbers of the size a function
    making it at another size (precomputed: instantiating is evaluating them and placing the arena)."""

    def __init__(self, size: int, graph: Graph, plan: Plan, guards: symbolic.Guards, kernels: KernelMemo):
        self.size, self.graph, self.plan, self.guards, self.kernels = size, graph, plan, guards, kernels
        self.blocks = arena_blocks(plan.buffers, plan.steps, plan.buffer_of)
        index = {op: i for i, op in enumerate(graph.ops)}  # steps name ops by position: the graph at s has them there
        self.steps = [(i, f) for i, f in enumerate(_maker(x, index) for x in plan.steps) if f is not None]
        self.buffers = [(k, f) for k, f in ((k, _maker(b, index)) for k, b in plan.buffers.items()) if f is not None]
        numbers = graph.numbering()
        self.buffer_of = [(numbers[v], b) for v, b in plan.buffer_of.items()]  # (value number, buffer id)
        self.coincidences = guards.coincidences() + [c for g, _ in kernels.entries for c in g.coincidences()]
        self.every = symbolic.Guards()  # the plan's and the kernels' guards as one (each test once)
        for g in [guards] + [g for g, _ in kernels.entries]:
            self.every.update(g)

    def holds(self, s: int) -> bool:
        """Whether every decision taken at the recorded size holds at s (`failed` says which does not)."""
        return self.every.holds(s)

    def failed(self, s: int) -> str:
        """'' if every decision taken at the recorded size holds at s, else the first that does not."""
        if self.every.holds(s):
            return ""
        why = self.guards.failed(s)
        if why:
            return why
        for guards, kernels in self.kernels.entries:
            why = guards.failed(s)
            if why:
                return f"{kernels[0].name if kernels else 'a kernel'}: {why}"
        return self.every.failed(s)  # '' (holds and failed agree)

    def at(self, g: Graph, s: int) -> Plan:
        """The recorded plan with every number at s, its steps reading g's ops, its arena placed anew."""
        p, ops = self.plan, g.ops
        buffers = dict(p.buffers)
        for k, make in self.buffers:
            buffers[k] = make(s, ops)
        buffers, size = place(buffers, self.blocks)
        steps = list(p.steps)
        for i, make in self.steps:
            steps[i] = make(s, ops)
        values = g.inputs + [op.out for op in ops]
        buffer_of = {values[n]: b for n, b in self.buffer_of}
        return dataclasses.replace(p, buffers=buffers, steps=steps, arena_size=size, graph=g, buffer_of=buffer_of)


class PlanTemplate:
    """The plan of a dynamic-size graph at every size (module doc). `graph_at(s, check)`: the graph at s0 =
    s; with check, with SymInt sizes and the shape rules run on it (to record or rebuild a plan), else
    with plain ints (a recorded plan serves s: its numbers come from its forms). `sizes`: the sizes the
    graph was fitted at. The plan is recorded for each (a variant per set of decisions: a size that is a
    multiple of a vector width and one that is not), at that size or, where a decision there holds at it
    alone (Guards.coincidences: a temporary as large as a weight), at one 64k away (the same residues:
    the same vector widths); each variant is checked at another size where its decisions hold. A later
    size that no variant takes is recorded (a variant for its class, up to MAX_VARIANTS; at a
    coincidence the recorded plan serves that size alone), else the plan is built again there, reusing
    every kernel whose guards hold."""

    CHECK = (2, 4, 3)  # a variant recorded at s is checked at the first k*s, or s + d, where its guards hold
    CHECK_NEAR = (64, 128, 192, -64, 4, 8, -4, -8, 12, -12, 1, -1, 2, -2, 3, -3)
    NEAR = (0, 64, 128, 192)  # a variant for size s is recorded at s + one of these, the first without coincidences
    MAX_VARIANTS, MAX_FAILURES = 4, 2

    def __init__(self, graph_at: Callable[[int, bool], Graph], sizes: tuple[int, ...], target: Target):
        self.graph_at, self.target = graph_at, target
        self.variants: list[_Variant] = []
        self.why_not = ""  # why every size is planned in full ('' when the template serves them)
        self.failures = 0  # later sizes for which recording a variant failed (at most MAX_FAILURES tried)
        for s in sizes:
            if all(v.failed(s) for v in self.variants):
                self._add(s)
        if not self.variants:
            log.info("flame: no plan template, every size planned in full: %s", self.why_not)

    def _record(self, s: int) -> tuple[_Variant, list[str]]:
        memo = KernelMemo()
        with symbolic.rendering(s) as r, symbolic.recording() as guards, kernel_memo(memo):
            g = self.graph_at(s, True)
            plan = to_plan(g, target=self.target)
        return _Variant(s, g, plan, guards, memo), r.per_size

    def _add(self, s: int) -> _Variant | None:
        """A variant recorded for s's class (at s, or NEAR it where s is a coincidence) and checked,
        appended to the variants; or None (why_not says why)."""
        for d in self.NEAR:
            v = self._recorded(s + d)
            if v is None or not v.coincidences:
                return v
            self.why_not = f"s0={s + d}: {v.coincidences[0]}"
        return None

    def _recorded(self, s: int) -> _Variant | None:
        """The plan recorded at s, checked and appended unless it holds coincidences (returned all
        the same: it is the plan at s); None where it cannot be a template (why_not says why)."""
        try:
            v, per_size = self._record(s)
        except symbolic.NotSymbolic as e:
            self.why_not = f"s0={s}: {e}"
            return None
        if per_size:
            self.why_not = f"kernels rendered per size: {'; '.join(per_size)}"
            return None
        if v.coincidences:
            return v
        why = self._check(v)
        if why:
            self.why_not = why
            return None
        self.variants.append(v)
        return v

    def _check(self, v: _Variant) -> str:
        """'' if the plan recorded at v.size is the one built at another size where its decisions hold
        (number for number, as functions of s0), else why not."""
        s = v.size
        tries = [t for t in [k * s for k in self.CHECK] + [s + d for d in self.CHECK_NEAR] if t > 0]
        other = next((t for t in tries if not v.failed(t)), None)
        if other is None:
            return f"no size of {tries} takes the decisions taken at s0={s} ({v.failed(tries[0])})"
        w, _ = self._record(other)
        return _differ(v.plan, w.plan, s, other)

    def instantiate(self, s: int) -> Instance:
        """The plan at size s (class doc)."""
        v = next((v for v in self.variants if v.holds(s)), None)
        if v is not None:
            return Instance(v.at(self.graph_at(s, False), s))
        why = self.variants[0].failed(s) if self.variants else self.why_not
        if self.variants and len(self.variants) < self.MAX_VARIANTS and self.failures < self.MAX_FAILURES:
            v = self._recorded(s)  # a new class of sizes (or a coincidence at s: its plan serves s alone)
            if v is not None:
                return Instance(v.at(self.graph_at(s, False), s), why, recorded=not v.coincidences)
            self.failures += 1
        return self._rebuild(self.graph_at(s, True), s, why)

    def _rebuild(self, g: Graph, s: int, why: str) -> Instance:
        """The plan of g at s built again, reusing the kernels of the first variant (with no template,
        rendering them all as the full path does)."""
        with symbolic.rendering(s) as r:
            if not self.variants:
                return Instance(to_plan(g, target=self.target), why, [], r.per_size)
            memo = dataclasses.replace(self.variants[0].kernels, size=s, at=0, rerendered=[])
            with kernel_memo(memo):
                plan = to_plan(g, target=self.target)
        return Instance(plan, why, memo.rerendered, r.per_size)


def _maker(x, index: dict[Op, int]) -> Callable | None:
    """(s, ops) -> x (a step or a buffer) with its numbers at size s and its ops replaced by those
    at the same positions (`index`: recorded op -> position) in `ops` (the instantiated graph's);
    None where x holds neither."""
    fields = {}
    for f in dataclasses.fields(x):
        v = getattr(x, f.name)
        if isinstance(v, Op):
            fields[f.name] = functools.partial(_op_at, index[v])
        elif isinstance(v, tuple) and v and isinstance(v[0], Op):
            fields[f.name] = functools.partial(_ops_at, tuple(index[o] for o in v))
        elif f.name != "ops" and isinstance(v, int | float | tuple):
            e = _evaluator(v)
            if e is not None:
                fields[f.name] = functools.partial(_number_at, e)
    if not fields:
        return None
    return functools.partial(_made, x, tuple(fields.items()))


def _made(x, fields: tuple, s: int, ops: list):
    return with_fields(x, {name: f(s, ops) for name, f in fields})


def _op_at(i: int, s: int, ops: list) -> Op:
    return ops[i]


def _ops_at(t: tuple, s: int, ops: list) -> tuple:
    return tuple([ops[i] for i in t])


def _number_at(e: Callable, s: int, ops: list):
    return e(s)


def _evaluator(x) -> Callable[[int], object] | None:
    """s -> x at size s (as plan.build.at_size evaluates it), or None where x does not depend on it."""
    if isinstance(x, symbolic.SymInt | symbolic.SizeExpr | symbolic.SymFloat):
        return x.at
    if isinstance(x, tuple):
        parts = [_evaluator(v) for v in x]
        if all(p is None for p in parts):
            return None
        return functools.partial(_tuple_at, tuple((p, v) for p, v in zip(parts, x)))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return functools.partial(at_size, x) if _numbers(x) else None
    return None


def _tuple_at(parts: tuple, s: int) -> tuple:
    return tuple(v if p is None else p(s) for p, v in parts)


def _numbers(x) -> bool:
    """x (a dataclass) holds a function of the size in its number fields (what at_size evaluates)."""
    return any(f.name != "ops" and _evaluator(getattr(x, f.name)) is not None
               for f in dataclasses.fields(x) if isinstance(getattr(x, f.name), int | float | tuple))


def _form(x):
    """A plan number as what must agree between two sizes: its form if it is a function of the size,
    else its value."""
    if isinstance(x, symbolic.SymInt):
        return ("s", x.a, x.b)
    if isinstance(x, symbolic.SizeExpr):
        return ("e", x.text)
    if isinstance(x, symbolic.SymFloat):
        return ("f", x.k, x.f32, _form(x.n))
    if isinstance(x, tuple):
        return tuple(_form(v) for v in x)
    if isinstance(x, Op):
        return ("op", x.name)
    if isinstance(x, Buffer):
        return tuple(_form(getattr(x, f.name)) for f in dataclasses.fields(x) if f.name != "offset")
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__,) + tuple(_form(getattr(x, f.name)) for f in dataclasses.fields(x))
    return x


def _differ(a: Plan, b: Plan, sa: int, sb: int) -> str:
    """'' if plans a and b (the same graph at sizes sa and sb) agree in every number's form, else the
    first difference, in words."""
    if sorted(a.buffers) != sorted(b.buffers) or len(a.steps) != len(b.steps) or a.outputs != b.outputs:
        return f"the plans at s0={sa} and s0={sb} have different buffers or steps"
    for k in a.buffers:
        if _form(a.buffers[k]) != _form(b.buffers[k]):
            return f"buffer b{k} is {a.buffers[k].describe()} at s0={sa}, {b.buffers[k].describe()} at s0={sb}"
    for x, y in zip(a.steps, b.steps):
        if _form(x) != _form(y):
            name = getattr(x, "name", type(x).__name__)
            return f"step {name} differs between s0={sa} and s0={sb} (a size read as a plain number)"
    return ""
