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
import logging
from collections.abc import Callable

from flame.ir import symbolic
from flame.ir.graph import Graph, Op
from flame.plan.build import KernelMemo, at_size, kernel_memo, to_plan
from flame.plan.memory import arena_blocks, place
from flame.plan.steps import Buffer, Plan
from flame.target import Target

log = logging.getLogger("flame")


@dataclasses.dataclass
class Instance:
    """A plan at one size: the plan, and the kernels rendered for this size ("name: why"; none when
    the template served it)."""

    plan: Plan
    rendered: list[str]


class _Variant:
    """The plan recorded at one size: its graph, plan, plan-level guards, kernels with their guards
    (KernelMemo), arena blocks, and which steps and buffers hold numbers of the size."""

    def __init__(self, graph: Graph, plan: Plan, guards: symbolic.Guards, kernels: KernelMemo):
        self.graph, self.plan, self.guards, self.kernels = graph, plan, guards, kernels
        self.blocks = arena_blocks(plan.buffers, plan.steps, plan.buffer_of)
        self.steps = [i for i, s in enumerate(plan.steps) if _sized(s)]
        self.buffers = [k for k, b in plan.buffers.items() if _sized(b)]

    def failed(self, s: int) -> str:
        """'' if every decision taken at the recorded size holds at s, else the first that does not."""
        why = self.guards.failed(s)
        if why:
            return why
        for guards, kernels in self.kernels.entries:
            why = guards.failed(s)
            if why:
                return f"{kernels[0].name if kernels else 'a kernel'}: {why}"
        return ""

    def at(self, g: Graph, s: int) -> Plan:
        """The recorded plan with every number at s, its steps reading g's ops, its arena placed anew."""
        p = self.plan
        values = dict(zip(self.graph.inputs, g.inputs))
        ops = dict(zip(self.graph.ops, g.ops))
        values.update((a.out, b.out) for a, b in ops.items())
        buffers = dict(p.buffers)
        for k in self.buffers:
            buffers[k] = at_size(buffers[k], s)
        buffers, size = place(buffers, self.blocks)
        steps = list(p.steps)
        for i in self.steps:
            steps[i] = _with_ops(at_size(steps[i], s), ops)
        buffer_of = {values[v]: b for v, b in p.buffer_of.items()}
        return dataclasses.replace(p, buffers=buffers, steps=steps, arena_size=size, graph=g, buffer_of=buffer_of)


class PlanTemplate:
    """The plan of a dynamic-size graph at every size (module doc). `graph_at(s, check)`: the graph
    at s0 = s with SymInt sizes (check: run the shape rules on it). `sizes`: the sizes the graph was
    fitted at; the plan is recorded at each (a variant per set of decisions: a size that is a
    multiple of a vector width and one that is not), each checked against another size where its
    decisions hold."""

    CHECK = (2, 4, 3)  # a variant recorded at s is checked at the first k*s, or s + 64*k, where its guards hold

    def __init__(self, graph_at: Callable[[int, bool], Graph], sizes: tuple[int, ...], target: Target):
        self.graph_at, self.target = graph_at, target
        self.variants: list[_Variant] = []
        self.why_not = ""  # why every size is planned in full ('' when the template serves them)
        for s in sizes:
            if any(not v.failed(s) for v in self.variants):
                continue
            v, why = self._variant(s)
            if v is not None:
                self.variants.append(v)
            else:
                self.why_not = why
        if self.variants:
            self.why_not = ""
        else:
            log.info("flame: no plan template, every size planned in full: %s", self.why_not)

    def _record(self, s: int) -> tuple[_Variant, list[str]]:
        memo = KernelMemo()
        with symbolic.rendering(s) as r, symbolic.recording() as guards, kernel_memo(memo):
            g = self.graph_at(s, True)
            plan = to_plan(g, target=self.target)
        return _Variant(g, plan, guards, memo), r.per_size

    def _variant(self, s: int) -> tuple[_Variant | None, str]:
        """The plan recorded at s, checked at another size where its decisions hold; or None and why not."""
        v, per_size = self._record(s)
        if per_size:
            return None, f"kernels rendered per size: {'; '.join(per_size)}"
        tries = [k * s for k in self.CHECK] + [s + 64 * k for k in self.CHECK]
        other = next((t for t in tries if not v.failed(t)), None)
        if other is None:
            return None, f"no size of {tries} takes the decisions taken at s0={s} ({v.failed(tries[0])})"
        w, _ = self._record(other)
        why = _differ(v.plan, w.plan, s, other)
        return (None, why) if why else (v, "")

    def instantiate(self, s: int) -> Instance:
        """The plan at size s (module doc)."""
        v = next((v for v in self.variants if not v.failed(s)), None)
        g = self.graph_at(s, v is None)
        if v is not None:
            return Instance(v.at(g, s), [])
        return self._rebuild(g, s)

    def _rebuild(self, g: Graph, s: int) -> Instance:
        """The plan of g at s built again, reusing the kernels of the first variant whose guards hold at
        s (with no template, rendering them all as the full path does)."""
        with symbolic.rendering(s) as r:
            if not self.variants:
                return Instance(to_plan(g, target=self.target), r.per_size)
            v = self.variants[0]
            memo = dataclasses.replace(v.kernels, size=s, at=0, rerendered=[])
            with kernel_memo(memo):
                plan = to_plan(g, target=self.target)
        log.info("flame: %s: s0=%d planned again (%s); kernels rendered again: %s", plan.name, s, v.failed(s),
                 "; ".join(memo.rerendered) or "none")
        return Instance(plan, memo.rerendered + r.per_size)


def _sized(x) -> bool:
    """x (a step or a buffer) holds a number that depends on the size, or an op (whose types do)."""
    for f in dataclasses.fields(x):
        v = getattr(x, f.name)
        vs = v if isinstance(v, tuple) else (v,)
        if any(isinstance(e, symbolic.SymInt | symbolic.SizeExpr | symbolic.SymFloat | Op) for e in vs):
            return True
    return False


def _with_ops(step, ops: dict):
    """step with every op it names replaced by the same op of the instantiated graph."""
    changed = {}
    for f in dataclasses.fields(step):
        v = getattr(step, f.name)
        if isinstance(v, Op):
            changed[f.name] = ops[v]
        elif isinstance(v, tuple) and v and isinstance(v[0], Op):
            changed[f.name] = tuple(ops[o] for o in v)
    return dataclasses.replace(step, **changed) if changed else step


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
