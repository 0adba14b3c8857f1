"""compile_graph: the one way a Graph becomes something that runs, with the one compile cache.

Its three callers are the frontend's: @flame.compile (a traced function), eager dispatch (a one-op
graph per op signature) and loss.backward() (the rebuilt forward plus the autodiff pass). The stages
are, in order: the SIMPLIFY pipeline, legalization (attention the backend cannot run becomes the
unfused graph, convolutions it cannot run im2col + matmul; also for graphs that are not optimised)
and lowering (fusion) from passes/, `to_plan` (steps and memory placement), then the executor's
compile step (runtime/). So this module sits above passes/, the plan builder and runtime/, and below
frontend/: it lives at the package root rather than in frontend/ because nothing in it knows about
Tensors or tracing, and the CLI or a test can compile a parsed Graph with it without the frontend.
Nothing below it (ir, passes, plan, codegen, runtime) imports it.

The cache is keyed by everything that decides what comes out: the executor, the GPU it compiles for
(its id: the runnable's kernels are loaded there), the Target the passes and the plan builder plan for
(what the backend can do, the GPU architecture included), the settings read while compiling (FLAME_FUSE
for lowering, FLAME_ROWS_SCHEDULE and FLAME_BALANCED_SCALARS for the kernels codegen renders,
FLAME_CUDA_GRAPHS and FLAME_COMM_STREAM for the CUDA executor), whether the passes run,
and the graph itself (its printed text, which parses back to the same graph, or a caller's cheaper
key that determines the graph, such as eager dispatch's (op, attributes, input types)), with its
ops' source lines (flame.ir.locs.layout): what a compiled graph reports (an error at run time,
`flame explain`) names the lines of the graph it was compiled for, so an identical graph traced at
other lines is not served from here. A caller that asks for it (`persist`: @flame.compile) also
reaches the persistent plan cache (flame.plan.cache) on a miss: a graph compiled by an earlier
process is loaded from disk, its passes, plan builder and NVRTC skipped; the entry's key leaves the
lines out (the same program in another file loads it) and the loaded graph gets this graph's."""

from __future__ import annotations

import logging
import math
import numbers
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from flame import debug
from flame.codegen.kernel import codegen_settings
from flame.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError
from flame.ir import locs as loc_data
from flame.ir.graph import Graph, Op, discard
from flame.ir.printer import print_graph
from flame.ir.registry import get
from flame.passes import activation_budget as activation
from flame.passes import remat as remat_pass
from flame.passes.pipeline import fusion_enabled, legalize, lower, remat, run_pipeline
from flame.plan import cache as plan_cache
from flame.plan.build import to_plan
from flame.plan.instance import Instance, PlanTemplate
from flame.plan.memory import human_bytes, memory_report, planned_peak, saved_bytes
from flame.plan.steps import ActivationBudget, MemoryBudget, Plan
from flame.runtime import determinism
from flame.runtime.backend import (
    attention_lowering,
    bgrad_enabled,
    capabilities,
    comm_stream_enabled,
    pieces_enabled,
    side_stream_enabled,
    target_identity,
)
from flame.runtime.cuda_graphs import graphs_setting
from flame.runtime.device import executor
from flame.target import Target

log = logging.getLogger("flame")

_SHOWN = 8  # values named by the error of a budget that cannot be met (the largest live at its peak)
CACHE_SIZE = 4096  # compiled graphs kept (least recently used dropped first); one-op eager graphs dominate


@dataclass(frozen=True)
class CompiledGraph:
    """What compile_graph returns: the graph after the passes (what runs), its memory-planned Plan,
    `run(arrays) -> outputs` (the executor's compiled plan), each stage's (name, seconds) from when
    it was compiled, and the debug record (only while a debug observer or FLAME_DUMP watches)."""

    graph: Graph
    plan: object
    run: Callable | None
    timings: tuple[tuple[str, float], ...]
    record: debug.CompileRecord | None = None


_CACHE: OrderedDict[tuple, CompiledGraph] = OrderedDict()


def _settings(ex, optimize: bool) -> tuple[tuple, Target]:
    """The process settings a compilation reads, and the Target it plans for: both part of every key."""
    cuda = ex.name == "cuda"
    gpu = _current_gpu() if cuda else None
    comm, side = cuda and comm_stream_enabled(), cuda and side_stream_enabled()
    bgrad, pieces = bgrad_enabled(), pieces_enabled()
    attention = attention_lowering() if cuda else None
    deterministic = (determinism.mode(), determinism.cudnn()) if cuda else None
    settings = (ex.name, gpu, optimize and fusion_enabled(), graphs_setting() if cuda else None, comm, side,
                codegen_settings(), bgrad, pieces, attention, deterministic)
    return settings, _target(ex.name, gpu, comm, side, bgrad, pieces, attention, deterministic)


def _current_gpu() -> int:
    import cupy

    return cupy.cuda.Device().id


@lru_cache(maxsize=16)
def _target(executor_name: str, gpu: int | None, comm_stream: bool, side_stream: bool, bgrad: bool,
            pieces: bool, attention: str | None = None, deterministic: tuple | None = None) -> Target:
    """capabilities() of the executor, once per (executor, current GPU, FLAME_COMM_STREAM,
    FLAME_SIDE_STREAM, FLAME_MATMUL_BGRAD, FLAME_FUSE_PIECES, FLAME_ATTENTION, the determinism
    settings): what it reads."""
    return capabilities(executor_name)


def compile_graph(
    graph: Graph | Callable[[], Graph],
    *,
    key: Hashable | None = None,
    optimize: bool = True,
    report: bool = False,
    own_run: bool = False,
    memory_budget: float | None = None,
    activation_budget: float | None = None,
    persist: str | None = None,
    arena: Any = None,
) -> CompiledGraph:
    """Compile `graph` for the current executor, or return the cached result of an identical one.

    graph: a verified Graph, or a function making one, called only on a cache miss (then `key` is
    required and must determine the graph: eager dispatch pays for building its one-op graph once).
    optimize: run the SIMPLIFY pipeline and lowering (fusion) before planning; eager one-op graphs
    skip them (nothing to simplify, and an op must not be rewritten into one of its inputs).
    report: record the stages and hand the record to debug.notify (FLAME_DUMP, the CLI's observers),
    as @flame.compile does; while something watches, such a call always compiles, so every traced
    function shows up, and its result carries the record.
    own_run: the caller keeps the runnable for itself (@flame.compile: its arena and CUDA graph live and
    die with the compiled function, and two functions with identical graphs (traced at the same lines)
    never re-capture each other's pointers); it shares the cached passes and plan but gets a fresh executor compile, and
    the cache keeps no runnable for it. Otherwise (eager ops, backward graphs) the runnable is shared.
    memory_budget: the planned peak to fit in (bytes, or a fraction in (0, 1] of the peak planned
    without it; check_memory_budget says what else it may be) by recomputing forward values in the
    backward (`_fit_budget`); MemoryBudgetError,
    saying the smallest reachable peak, when it cannot be met. Needs optimize.
    activation_budget: the fraction in [0, 1] of the activation memory the plan without it keeps for
    the backward that may be kept (check_activation_budget), met by recomputing or offloading forward
    values (passes/activation_budget.py); MemoryBudgetError naming the floor when it cannot be met.
    persist: also use the persistent plan cache (flame.plan.cache), with this text (@flame.compile: the
    trace's guards, guards.guards_key) in the key beside the graph's printed text: on a miss here a
    result an earlier process stored is loaded (not while something watches: it reads every stage),
    and a result compiled here is stored.
    arena: with own_run, the executor's arena (executor().arena()) the runnable shares with the caller's
    other runnables (@flame.compile's traces and batch sizes, which run one at a time); None: its own.
    """
    memory_budget = check_memory_budget(memory_budget, "compile_graph")
    activation_budget = check_activation_budget(activation_budget, "compile_graph", memory_budget)
    ex = executor()
    text = None  # the graph's printed text, where it is the key: the pass pipeline starts from it
    if key is None:
        key = text = print_graph(graph)
    settings, target = _settings(ex, optimize)
    lines = None if callable(graph) else loc_data.layout(graph)  # a function's graph: `key` determines it
    full_key = (settings, target, key, lines, memory_budget, activation_budget)
    watched = report and debug.watching()
    hit = None if watched else _CACHE.get(full_key)
    if hit is not None:
        _CACHE.move_to_end(full_key)
        if own_run:
            log.debug("flame: %s: an identical graph was compiled before; reusing its plan", hit.graph.name)
            return replace(hit, run=ex.compile(hit.plan, arena))
        if hit.run is None:  # planned for an own_run caller: compile the shared runnable once
            hit = _CACHE[full_key] = replace(hit, run=ex.compile(hit.plan))
        return hit
    g = graph() if callable(graph) else graph
    disk = _disk_key(ex, settings, target, g, key, (memory_budget, activation_budget), persist, lines)
    result = None if disk is None or watched else _from_disk(disk, g, ex, target, arena)
    if result is None:
        result = _compile(g, ex, target, optimize, watched, memory_budget, activation_budget, text, arena)
        if disk is not None:
            plan_cache.store(disk, result.graph, result.plan, g)
    _CACHE[full_key] = replace(result, run=None if own_run else result.run, record=None)
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return result


def _compile(g: Graph, ex, target: Target, optimize: bool, watched: bool,
             memory_budget: float | None = None, activation_budget: float | None = None,
             text: str | None = None, arena: Any = None) -> CompiledGraph:
    """Run the stages on g for `target` (what the backend can do: fusion, legalization and the plan
    builder ask it) and time them; with watched, record every stage and notify debug. text: g's
    printed text, where the caller has it; arena: compile_graph's."""
    record = debug.CompileRecord(g.name) if watched else None
    dump = None if record is None else (lambda stage, graph, sec: record.stages.append((stage, graph, sec)))
    timings: list[tuple[str, float]] = []

    def finish(graph: Graph, allow=remat_pass.never, dump=None, timings=None, memory_first=False):
        """remat (checkpoint regions; what `allow` lets a budget recompute), legalize, lower (with
        memory_first: in the kernel order that keeps the fewest bytes live), plan."""
        graph = _lower_for(graph, target, optimize, allow, dump, timings, memory_first)
        start = time.perf_counter()
        plan = to_plan(graph, target=target)
        if timings is not None:
            timings.append(("plan", time.perf_counter() - start))
        return graph, plan

    given = g
    if optimize:
        g = run_pipeline(g, dump=dump, timings=timings, text=text)
    if memory_budget is not None and optimize:
        start = time.perf_counter()
        allow, budget, memory_first = _fit_budget(g, memory_budget, finish)
        timings.append(("memory budget search", time.perf_counter() - start))
        g, plan = finish(g, allow, dump, timings, memory_first)
        plan = replace(plan, memory_budget=budget)
    elif activation_budget is not None and optimize:
        start, steps = time.perf_counter(), []
        allow, g, plan, fitted = _fit_activation(g, activation_budget, target, finish, steps)
        timings.append(("activation budget", time.perf_counter() - start - sum(sec for _, sec in steps)))
        if dump is None:
            timings += steps
        else:  # the stages of the chosen plan again, recorded
            g, plan = finish(g, allow, dump, timings)
        plan = replace(plan, activation_budget=fitted)
    else:
        simplified, (g, plan) = g, finish(g, dump=dump, timings=timings)
        if dump is None and simplified is not given and simplified is not g:  # (a watched compile keeps every stage)
            discard(simplified.ops, {*g.ops, *given.ops})  # freed now, not by the cyclic collector
    start = time.perf_counter()
    run = ex.compile(plan, arena)
    timings.append((f"{ex.name} compile", time.perf_counter() - start))
    if record is not None:
        record.graph, record.plan, record.plan_seconds = g, plan, timings[-2][1]
        debug.notify(record)
    return CompiledGraph(g, plan, run, tuple(timings), record if debug.observing() else None)


_ACTIVATION_TRIES = 4  # plans made with a tighter estimate before the floor's plan is tried


def _fit_activation(g: Graph, fraction: float, target: Target, finish: Callable,
                    timings: list) -> tuple[Callable[[Op], bool], Graph, Plan, ActivationBudget]:
    """The plan that keeps at most `fraction` of the activations the plan without a budget keeps, both
    measured on the finished plan (plan/memory.saved_bytes, what the memory report says): the `allow`
    it was made with, its graph and plan, and its ActivationBudget in those bytes. The solver
    (passes/activation_budget.py) fits its estimate into the budget; a plan that still keeps too much
    is made again with the estimate's budget lowered by the excess, at most _ACTIVATION_TRIES times,
    then with every choice taken (the floor). MemoryBudgetError naming the floor when that misses too.
    `timings` gets the stages of the plan returned."""
    trial: list = []
    graph, plan = finish(g, timings=trial)
    unconstrained = saved_bytes(plan)
    goal = int(fraction * unconstrained)
    if unconstrained <= goal:
        timings += trial
        return remat_pass.never, graph, plan, ActivationBudget(fraction, unconstrained, goal, unconstrained)
    budget = goal
    for _ in range(_ACTIVATION_TRIES):
        try:
            decision = activation.solve(g, fraction, target, budget=budget)
        except MemoryBudgetError:
            break
        trial = []
        graph, plan = finish(g, decision, timings=trial)
        kept = saved_bytes(plan)
        if kept <= goal:
            timings += trial
            return decision, graph, plan, ActivationBudget(fraction, unconstrained, goal, kept, decision.lines)
        budget = min(budget, decision.kept) - (kept - goal)
        if budget < 0:
            break
    decision = activation.floor_choice(g, target)
    trial = []
    graph, plan = finish(g, decision, timings=trial)
    kept = saved_bytes(plan)
    if kept > goal:  # the least any plan keeps: the floor's, or the unconstrained plan's where that is less
        raise MemoryBudgetError(activation.unreachable(g.name, fraction, goal, unconstrained, min(kept, unconstrained),
                                                       True))
    timings += trial
    return decision, graph, plan, ActivationBudget(fraction, unconstrained, goal, kept, decision.lines)


def _lower_for(graph: Graph, target, optimize: bool, allow=remat_pass.never, dump=None, timings=None,
               memory_first: bool = False) -> Graph:
    """remat (checkpoint regions; what `allow` lets a budget recompute), legalize, lower (with
    memory_first: in the kernel order that keeps the fewest bytes live): the stages between the
    SIMPLIFY pipeline and planning."""
    given = graph
    if optimize:
        graph = remat(graph, allow, dump=dump, timings=timings)
    # every graph, optimised or not: what the backend cannot run goes before planning
    graph = legalize(graph, target.attention_unsupported, dump=dump, timings=timings,
                     conv_unsupported=target.conv_unsupported)
    if optimize:
        before, graph = graph, lower(graph, dump=dump, timings=timings, target=target, memory_first=memory_first)
        if before is not given and before is not graph and dump is None:  # remat's or legalize's graph
            discard(before.ops, {*graph.ops, *given.ops})
    return graph


def optimize_graph(g: Graph, persist: str | None = None) -> Graph:
    """The graph compile_graph would plan for the current executor (every pass, lowering included),
    neither planned nor compiled: what a dynamic-size template learns from a size it will not run
    (flame.compile(dynamic=True)'s probe). persist: as compile_graph's (the graph is loaded from, or
    stored in, the persistent plan cache under the key compile_graph uses)."""
    ex = executor()
    settings, target = _settings(ex, True)
    disk = _disk_key(ex, settings, target, g, None, (None, None), persist)
    found = None if disk is None else plan_cache.load(disk, g.name, g)
    if found is not None:
        return found[0]
    out = _lower_for(run_pipeline(g), target, True)
    if disk is not None:
        plan_cache.store(disk, out, None, g)
    return out


def _storable(g: Graph) -> bool:
    """Whether g's compile may go to the persistent plan cache: not with ops the user defined with their
    own CUDA code (flame.cuda.kernel / elementwise), whose code and NumPy reference live in this process's
    registry, not in the graph's text that keys the entry."""
    return not any(get(op.name).user is not None for op in g.ops)


def _disk_key(ex, settings: tuple, target: Target, g: Graph, key: Hashable | None, budgets: tuple,
              persist: str | None, lines: loc_data.Layout | None = None) -> str | None:
    """The persistent plan cache's key text for compiling g (None: not persisted, because persist is None,
    g is not _storable or the cache is off): the executor's and Target's identity, the settings read (the
    GPU's id aside), the (memory, activation) budgets, `persist` (the guards), the graph's text (`key`, or
    printed here: one line per op, in order) and which of its ops share a source line (`lines`, or
    flame.ir.locs.layout here; not the lines: an entry loads with the loading graph's, plan_cache.load).
    flame.plan.cache adds flame's version."""
    if persist is None or not plan_cache.enabled() or not _storable(g):
        return None
    key = print_graph(g) if key is None else key
    lines = loc_data.layout(g) if lines is None else lines
    return "\n".join((target_identity(ex.name, target, settings[1]), repr(settings[:1] + settings[2:]),
                      f"budgets {budgets!r}", f"guards {persist}", f"lines {lines.text}", str(key)))


def _from_disk(disk: str, g: Graph, ex, target: Target, arena: Any = None) -> CompiledGraph | None:
    """The compiled result of g from the persistent plan cache (the executor compiles the loaded plan;
    an entry holding the optimised graph alone is planned here and stored whole), with g's source
    lines, or None on a miss."""
    start = time.perf_counter()
    found = plan_cache.load(disk, g.name, g)
    if found is None:
        return None
    graph, plan = found
    timings = [("plan cache", time.perf_counter() - start)]
    if plan is None:
        start = time.perf_counter()
        plan = to_plan(graph, target=target)
        timings.append(("plan", time.perf_counter() - start))
        plan_cache.store(disk, graph, plan, g)
    start = time.perf_counter()
    run = ex.compile(plan, arena)
    timings.append((f"{ex.name} compile", time.perf_counter() - start))
    log.debug("flame: %s: loaded from the plan cache", g.name)
    return CompiledGraph(graph, plan, run, tuple(timings))


def plan_template(graph_at: Callable[[int, bool], Graph], sizes: tuple[int, int]) -> PlanTemplate:
    """The plan of an optimised dynamic-size graph at every size (flame.plan.instance), for the
    current executor's target: made once, from the graphs `graph_at(s, check)` gives at `sizes`."""
    return PlanTemplate(graph_at, sizes, _settings(executor(), True)[1])


def compile_instance(template: PlanTemplate, size: int, arena: Any = None) -> tuple[CompiledGraph, Instance]:
    """Plan and compile the graph of a dynamic-size template at s0 = size without running the passes
    again: the plan template's numbers at this size (flame.plan.instance); the kernels take s0 as a
    parameter, so their sources are the same at every size and the executor's compile cache (keyed
    by source) compiles each once; grids, buffer sizes, arena offsets and library-call descriptors
    are this size's. Returns the compiled graph and the Instance (whether the plan was built again
    here and why, the kernels rendered again or per size). Not cached here: the caller keeps one
    per size; arena: as compile_graph's."""
    ex = executor()
    start = time.perf_counter()
    inst = template.instantiate(size)
    planned = time.perf_counter()
    run = ex.compile(inst.plan, arena)
    timings = (("plan", planned - start), (f"{ex.name} compile", time.perf_counter() - planned))
    return CompiledGraph(inst.plan.graph, inst.plan, run, timings), inst


_BUDGET_MEANS = ("a whole number of bytes (an int, or a float above 1 with no fraction) or a fraction in (0, 1] "
                 "of the peak planned without a budget")


def check_memory_budget(value: float | None, owner: str = "flame.compile") -> float | None:
    """`value` as compile_graph plans for it (an int of bytes, or a float: a fraction in (0, 1] of the
    peak planned without a budget, or a whole number of bytes above 1), None for no budget. Anything
    else raises ArgumentTypeError (not a number: a bool, a string) or ArgumentError (zero, negative,
    NaN, infinite, or a float above 1 with a fraction, such as 1.5), naming `owner`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{owner}: memory_budget must be {_BUDGET_MEANS}; got {type(value).__name__} "
                                f"{value!r}")
    if isinstance(value, numbers.Integral):
        if value >= 1:
            return int(value)
    elif math.isfinite(value) and 0 < value and (value <= 1 or float(value).is_integer()):
        return float(value)
    elif math.isfinite(value) and value > 1:
        raise ArgumentError(f"{owner}: memory_budget={value!r} has a fraction of a byte: a float above 1 is a "
                            f"number of bytes, and a fraction of the peak planned without a budget is in (0, 1]")
    raise ArgumentError(f"{owner}: memory_budget={value!r} is not {_BUDGET_MEANS}")


_ACTIVATION_MEANS = "a fraction in [0, 1] of the activation memory the plan without a budget keeps for the backward"


def check_activation_budget(value: float | None, owner: str = "flame.compile",
                            memory_budget: float | None = None) -> float | None:
    """`value` as a float in [0, 1] (PyTorch's activation_memory_budget: 0 recomputes everything that
    may be, 1 is the plan without a budget), None for no budget. A bool or a non-number raises
    ArgumentTypeError; NaN, infinities and numbers outside [0, 1] raise ArgumentError, as does giving
    both it and a memory_budget; each names `owner` and the argument."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{owner}: activation_budget must be {_ACTIVATION_MEANS}; got {type(value).__name__} "
                                f"{value!r}")
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise ArgumentError(f"{owner}: activation_budget must be {_ACTIVATION_MEANS}; got {value!r}")
    if memory_budget is not None:
        raise ArgumentError(f"{owner}: give activation_budget or memory_budget, not both (got activation_budget="
                            f"{value!r} and memory_budget={memory_budget!r})")
    return float(value)


def _budget_bytes(requested: float, unconstrained: int) -> int:
    return int(requested * unconstrained) if isinstance(requested, float) and requested <= 1 else int(requested)


def _fit_budget(g: Graph, requested: float, finish: Callable) -> tuple[Callable[[Op], bool], MemoryBudget, bool]:
    """Which ops the backward may recompute so that the planned peak fits `requested` (bytes, or a
    fraction of the peak planned without a budget), and whether the kernels run in memory-first
    order (passes/schedule_memory.py). Tries the memory-first order alone, then cheap work (remat
    tier 0), then one by one the ops of the higher tiers (reductions, matmuls, attention, random
    draws; remat.candidates), each kept unless its try raises the peak planned in the fusion pass's
    order (cheap work stays allowed even then: recomputing a matmul's input often needs it); every
    try is also planned in memory-first order. Plans are made for real, since the peak
    depends on fusion, placement and when the backward's recomputations run (so it need not fall as
    more is allowed).
    The first plan that fits wins. Raises MemoryBudgetError with the smallest peak any try reached,
    and what is live then, when none fits."""
    unconstrained = planned_peak(finish(g)[1])
    budget = MemoryBudget(requested, _budget_bytes(requested, unconstrained), unconstrained)
    if unconstrained <= budget.bytes:
        return remat_pass.never, budget, False
    best, path, kept = None, unconstrained, frozenset()  # best: (peak, plan); path: the peak `kept` reached
    for op in ["order", None, *remat_pass.candidates(g)]:  # None: tier 0
        chosen = kept if op == "order" else kept | {op}
        allow = lambda o, chosen=chosen: o in chosen or (None in chosen and remat_pass.tier(o) == 0)  # noqa: E731
        peaks = {}
        for memory_first in (True,) if op == "order" else (False, True):
            plan = finish(g, allow, memory_first=memory_first)[1]
            peaks[memory_first] = peak = planned_peak(plan)
            if peak <= budget.bytes:
                return allow, budget, memory_first
            if best is None or peak < best[0]:
                best = (peak, plan)
        if op is None or (op != "order" and peaks[False] <= path):  # more recomputation can raise the peak;
            path, kept = peaks[False], chosen  # cheap work stays allowed: the higher tiers build on it
    raise MemoryBudgetError(_unreachable(g.name, requested, budget, *best))


def _unreachable(name: str, requested: float, budget: MemoryBudget, peak: int, plan) -> str:
    """Why a budget cannot be met: the smallest peak reached, and what it holds (memory_report)."""
    report = memory_report(plan)
    bound = sum(report.bound.values())
    live = "; ".join(f"{human_bytes(n)} {t} from {src.split(' = ')[-1].split(' :')[0]}"
                     for _, t, _, n, src in report.live_at_peak[:_SHOWN])
    more = len(report.live_at_peak) - _SHOWN
    return (f"{name}: memory_budget={requested!r} ({human_bytes(budget.bytes)}) cannot be met: the smallest "
            f"reachable planned peak is {human_bytes(peak)} ({peak} bytes, {peak / budget.unconstrained_peak:.2f} of "
            f"the {human_bytes(budget.unconstrained_peak)} planned without a budget; recomputing up to matmuls, "
            f"attention and random draws, in either kernel order). Of that peak, parameters, optimizer state, "
            f"inputs and outputs take {human_bytes(bound)} and the arena {human_bytes(report.arena)}; live in it "
            f"at its busiest step ({report.peak_step}), largest first: {live}"
            + (f"; and {more} smaller" if more > 0 else ""))
