"""The activation-budget solver: which forward values the backward recomputes or brings back from
host memory so that the activations kept on the device for the backward fit a fraction of what the
unconstrained plan keeps (`flame.compile(fn, activation_budget=f)`, PyTorch's
`torch._functorch.config.activation_memory_budget`; ARCHITECTURE.md "Planned memory").

What is counted has one owner, the finished plan: plan/memory.saved_for_backward, the bytes the memory
report lists as "saved for backward" (buffers of forward values a backward step reads, a view counted
as the buffer it views, once; not graph inputs, which the caller holds, nor values offloaded to host
memory). The budget is f times that measure on the plan compiled without a budget, and the plan
compiled with it keeps at most that many bytes by the same measure (compiler._fit_activation checks
the finished plan and asks this solver again with a tighter byte budget when it misses).

This pass runs before fusion and planning, so it searches on an estimate of that measure (`estimate`):
forward values (not graph inputs, nor graph outputs) read by the backward (but for the loss gradient's
work that runs in the forward's kernels: remat._early) or by a recomputation, a relabelling view counted
as the value it views. The plan can differ from it: a library call that writes its result into the
buffer of the view a later op makes of it (attention's output into its permute) keeps one buffer where
the estimate counts two, and slices a library call reads in place are one buffer. `solve` fits the
estimate into a byte budget (`budget`, by default f times the estimate without choices); the
unconstrained estimate recomputes the free elementwise work (remat.free), as every plan does.

The solver is a greedy knapsack over two kinds of choice, each priced in seconds by the Target's
rates (`seconds`, `offload_seconds`):
- recompute: let the minimum cut (remat.choose) recompute one more forward op (elementwise work and
  views, reductions, matmuls, convolutions, attention, random draws; never a collective: every rank
  must issue the same ones), priced as the work of every op the cut then recomputes (a matmul's or a
  convolution's FLOPs over the GEMM rate of its dtype, other work as the bytes it moves over the
  memory bandwidth);
- offload: copy a kept value to pinned host memory after its last forward use and back before its
  first backward use (plan steps on a side stream on the GPU, so the copies overlap compute), priced
  as its two transfers over the host link (plus a fixed latency per copy).
Choices are taken cheapest per byte saved first until the estimate fits, then each recomputation
taken is dropped again, dearest first, when the rest still fits (so a matmul let in early is not kept
when later choices made it unnecessary). A budget nothing reaches (values no choice may free: a
collective's result) raises MemoryBudgetError naming the floor, the least activation memory reachable
(`floor_choice`: every choice that may be made, taken; the compiler measures it on the finished plan).

Recomputing or offloading changes no value: a recomputed op computes the same bits from the same
inputs, and an offloaded value comes back byte for byte, so gradients are those of the unconstrained
plan."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field

from flame.errors import MemoryBudgetError
from flame.ir.graph import Graph, Op, Value
from flame.ir.ops.collective import is_collective
from flame.ir.printer import format_op
from flame.ir.registry import REGISTRY, flops, is_relabel
from flame.passes import remat
from flame.target import Target

COPY_LATENCY = 10e-6  # seconds a host copy costs beyond its bytes (issue, synchronisation)
OFFLOAD_MIN = 4096  # a value under this many bytes is never offloaded (the copies would cost more than it holds)


@dataclass(frozen=True)
class Decision:
    """What the solver chose, an `allow(op)` for the remat pass (passes/remat.py) that also carries the
    values to offload. allow: the forward ops the minimum cut may recompute; offload: the kept values
    that go to host memory; the rest describes the choice, in the solver's estimate of the bytes kept
    (module docstring: `estimate`): fraction asked, bytes kept without the budget, the budget in bytes,
    bytes kept with it, and per choice (kind "recompute" or "offload", the value, its bytes, the seconds
    it costs)."""

    allow: frozenset[Op]
    offload: frozenset[Value] = frozenset()
    fraction: float = 1.0
    unconstrained: int = 0
    budget: int = 0
    kept: int = 0
    choices: tuple[tuple[str, Value, int, float], ...] = field(default=())
    lines: tuple[tuple[str, str, int, float], ...] = field(default=())  # choices with their values' IR lines

    def __call__(self, op: Op) -> bool:
        return op in self.allow


def recomputable(op: Op) -> bool:
    """op may be recomputed in the backward when a budget asks: anything pure, not a collective (every
    rank must issue the same collectives, once each)."""
    return not is_collective(op)


def seconds(op: Op, target: Target) -> float:
    """What computing op once costs on `target`: a matmul's, a convolution's or attention's FLOPs over
    the GEMM rate of its operands' dtype; other work, the bytes it reads and writes over the memory
    bandwidth (views move nothing)."""
    opdef = REGISTRY[op.name]
    if opdef.category == "matmul" or opdef.library in ("attention", "conv"):
        narrow = op.inputs[0].dtype.itemsize <= 2
        return flops(op) / (target.matmul_rate if narrow else target.matmul_rate_f32)
    if is_relabel(op):
        return 0.0
    moved = remat.nbytes(op.out) + sum(remat.nbytes(u) for u in op.inputs)
    return moved / target.memory_bandwidth


def offload_seconds(v: Value, target: Target) -> float:
    """What offloading v costs: its copy to the host and back over the link, each with COPY_LATENCY."""
    return 2 * (COPY_LATENCY + remat.nbytes(v) / target.host_link_bandwidth)


def base(v: Value) -> Value:
    """The value whose buffer holds v: v itself, or the value a relabelling view (reshape) views."""
    while v.producer is not None and is_relabel(v.producer):
        v = v.producer.inputs[0]
    return v


def recomputed(g: Graph, recompute: Collection[Value]) -> list[Op]:
    """The forward ops the backward actually recomputes when the cut says `recompute`: those whose
    values a backward op reads (`_late`), and the recomputed values those read, in graph order."""
    todo = [u for op in _late(g) for u in op.inputs if u in recompute]
    reached: set[Value] = set()
    while todo:
        u = todo.pop()
        if u not in reached:
            reached.add(u)
            todo.extend(w for w in u.producer.inputs if w in recompute)
    return [op for op in g.ops[: remat.split(g)] if op.out in reached]


def _late(g: Graph) -> list[Op]:
    """The backward ops that run after the forward's kernels: not the loss gradient's work fusion runs
    inside them (remat._early), which keeps nothing alive for the backward."""
    early = remat._early(g)
    return [op for op in g.ops[remat.split(g) :] if op not in early]


def estimate(g: Graph, recompute: Collection[Value], offload: Collection[Value] = ()) -> dict[Value, int]:
    """The solver's estimate of the activations kept on the device for the backward (module docstring)
    when the cut recomputes `recompute` and `offload` goes to host memory: {buffered value: bytes}."""
    s = remat.split(g)
    forward = {op.out for op in g.ops[:s]}
    outputs = {base(v) for v in g.outputs}
    readers = [*_late(g), *recomputed(g, recompute)]
    out: dict[Value, int] = {}
    for op in readers:
        for u in op.inputs:
            if u not in forward or u in recompute:
                continue
            b = base(u)
            if b.producer is not None and b not in outputs and b not in offload:
                out[b] = remat.nbytes(b)
    return out


def _cut(g: Graph, allow: frozenset[Op]) -> set[Value]:
    return remat.choose(g, lambda op: op in allow)


def _cost(g: Graph, recompute: set[Value], offload: Collection[Value], target: Target) -> float:
    return sum(seconds(op, target) for op in recomputed(g, recompute)) + sum(
        offload_seconds(v, target) for v in offload
    )


def _offloadable(g: Graph, values: dict[Value, int]) -> list[Value]:
    """The kept values that may go to host memory, largest first, then in graph order (small ones cost
    more than they hold)."""
    order = {op.out: i for i, op in enumerate(g.ops)}
    return sorted((v for v, n in values.items() if n >= OFFLOAD_MIN), key=lambda v: (-values[v], order[v]))


def solve(
    g: Graph, fraction: float, target: Target, offload: bool = True, name: str = "", budget: int | None = None
) -> Decision:
    """The cheapest choice of recomputations (and, with offload, host copies) whose estimate of the
    activations kept (module docstring) fits `budget` bytes, by default `fraction` of the estimate
    without choices. Raises MemoryBudgetError naming the estimate's floor when no choice fits."""
    free = frozenset(remat.free(g))
    unconstrained = sum(estimate(g, _cut(g, free)).values()) if remat.split(g) < len(g.ops) else 0
    budget = int(fraction * unconstrained) if budget is None else budget
    if unconstrained <= budget:
        return Decision(free, frozenset(), fraction, unconstrained, budget, unconstrained)
    ops = _candidates(g, free, target)
    allow, moved = set(free), set()
    state = _fits(g, frozenset(allow), moved, budget)
    link = 2 / target.host_link_bandwidth
    while state is None and (ops or offload):
        values = estimate(g, _cut(g, frozenset(allow)), moved)
        room = _offloadable(g, values) if offload else []
        nxt = ops[0] if ops else None
        per_byte = None if nxt is None else seconds(nxt, target) / max(remat.nbytes(nxt.out), 1)
        if room and (per_byte is None or per_byte > link + 2 * COPY_LATENCY / values[room[0]]):
            moved.add(room[0])
        elif nxt is not None:
            allow.add(ops.pop(0))
        else:
            break
        state = _fits(g, frozenset(allow), moved, budget)
    if state is None:
        floor = sum(estimate(g, _cut(g, frozenset(allow)), moved).values())
        raise MemoryBudgetError(unreachable(name or g.name, fraction, budget, unconstrained, floor, offload))
    allow, moved = _prune(g, allow - free, free, moved, budget, target)
    return _decision(g, allow, moved, fraction, unconstrained, budget, target)


def floor_choice(g: Graph, target: Target, offload: bool = True) -> Decision:
    """The choice that keeps the least: every forward op recomputed that may be and, with offload, every
    value still kept offloaded that is worth a host copy (OFFLOAD_MIN). Its plan's kept bytes are the
    floor no budget goes below."""
    free = frozenset(remat.free(g))
    allow = free | frozenset(_candidates(g, free, target))
    moved = set(_offloadable(g, estimate(g, _cut(g, allow)))) if offload else set()
    return _decision(g, allow, moved, 0.0, 0, 0, target)


def _candidates(g: Graph, free: frozenset[Op], target: Target) -> list[Op]:
    """The forward ops a budget may let the cut recompute, cheapest per byte first."""
    forced = remat.checkpointed(g)
    ops = [op for op in remat._ancestors(g, remat.saved(g)) if op not in free and op not in forced and recomputable(op)]
    order = {op: i for i, op in enumerate(g.ops)}
    ops.sort(key=lambda op: (seconds(op, target) / max(remat.nbytes(op.out), 1), order[op]))
    return ops


def _decision(
    g: Graph, allow: frozenset[Op], moved: set[Value], fraction: float, unconstrained: int, budget: int, target: Target
) -> Decision:
    """The Decision for these choices, each listed with its bytes and the seconds it costs."""
    recompute = _cut(g, allow)
    left = estimate(g, recompute, moved)
    hosted = _offloadable(g, {v: remat.nbytes(v) for v in moved})
    choices = [("recompute", op.out, remat.nbytes(op.out), seconds(op, target)) for op in recomputed(g, recompute)]
    choices += [("offload", v, remat.nbytes(v), offload_seconds(v, target)) for v in hosted]
    ids = g.numbering()
    lines = tuple((kind, format_op(v.producer, ids), n, sec) for kind, v, n, sec in choices)
    return Decision(allow, frozenset(moved), fraction, unconstrained, budget, sum(left.values()), tuple(choices), lines)


def _fits(g: Graph, allow: frozenset[Op], moved: set[Value], budget: int) -> int | None:
    """The kept bytes with these choices, or None when they exceed the budget."""
    n = sum(estimate(g, _cut(g, allow), moved).values())
    return n if n <= budget else None


def _prune(
    g: Graph, taken: set[Op], free: frozenset[Op], moved: set[Value], budget: int, target: Target
) -> tuple[frozenset[Op], set[Value]]:
    """The choices with each recomputation and offload dropped again, dearest first, while the rest
    still fits and costs less; offloads of values no longer kept are dropped."""
    allow = free | taken
    cost = _cost(g, _cut(g, allow), moved, target)
    for op in sorted(taken, key=lambda op: -seconds(op, target)):
        trial = allow - {op}
        if _fits(g, trial, moved, budget) is not None:
            c = _cost(g, _cut(g, trial), moved, target)
            if c <= cost:
                allow, cost = trial, c
    for v in sorted(moved, key=lambda v: -remat.nbytes(v)):
        rest = moved - {v}
        if _fits(g, allow, rest, budget) is not None:
            moved = rest
    still = estimate(g, _cut(g, allow))
    return allow, {v for v in moved if v in still}


def _least_fraction(floor: int, unconstrained: int) -> float:
    """The smallest fraction of three decimals whose budget (int(fraction * unconstrained) bytes) holds
    `floor` bytes: what the error asks for (rounded up, never below the floor)."""
    if not unconstrained:
        return 0.0
    f = math.ceil(floor * 1000 / unconstrained) / 1000
    while int(f * unconstrained) < floor:
        f = round(f + 0.001, 3)
    return f


def unreachable(name: str, fraction: float, budget: int, unconstrained: int, floor: int, offload: bool) -> str:
    """Why `fraction` of `unconstrained` bytes (`budget`) cannot be kept: the floor reached, with the
    least fraction that holds it."""
    from_floor = floor / unconstrained if unconstrained else 0.0
    return (
        f"{name}: activation_budget={fraction!r} ({budget} bytes of the {unconstrained} bytes of activations "
        f"the unconstrained plan keeps for the backward) cannot be met: the floor is {floor} bytes "
        f"({from_floor:.3f} of them), with every value recomputed that may be (not a collective's result)"
        + (f" and every kept value of at least {OFFLOAD_MIN} bytes offloaded to host memory" if offload else "")
        + f"; ask for activation_budget >= {_least_fraction(floor, unconstrained):.3f}"
    )
