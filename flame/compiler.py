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

The cache is keyed by everything that decides what comes out: the executor, the settings read while
compiling (FLAME_FUSE for lowering, FLAME_CUDA_GRAPHS for the CUDA executor), whether the passes run,
and the graph itself (its printed text, which parses back to the same graph, or a caller's cheaper
key that determines the graph, such as eager dispatch's (op, attributes, input types))."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace

from flame import debug
from flame.ir.graph import Graph
from flame.ir.printer import print_graph
from flame.passes.pipeline import fusion_enabled, legalize, lower, run_pipeline
from flame.plan.build import to_plan
from flame.runtime.backend import capabilities
from flame.runtime.cuda import graphs_setting
from flame.runtime.device import executor

log = logging.getLogger("flame")

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


def _settings(ex, optimize: bool) -> tuple:
    """The process settings a compilation reads: part of every cache key."""
    return ex.name, optimize and fusion_enabled(), graphs_setting() if ex.name == "cuda" else None


def compile_graph(
    graph: Graph | Callable[[], Graph],
    *,
    key: Hashable | None = None,
    optimize: bool = True,
    report: bool = False,
    own_run: bool = False,
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
    die with the compiled function, and two functions with identical graphs never re-capture each
    other's pointers); it shares the cached passes and plan but gets a fresh executor compile, and
    the cache keeps no runnable for it. Otherwise (eager ops, backward graphs) the runnable is shared.
    """
    ex = executor()
    if key is None:
        key = print_graph(graph)
    full_key = (_settings(ex, optimize), key)
    watched = report and debug.watching()
    hit = None if watched else _CACHE.get(full_key)
    if hit is not None:
        _CACHE.move_to_end(full_key)
        if own_run:
            log.debug("flame: %s: an identical graph was compiled before; reusing its plan", hit.graph.name)
            return replace(hit, run=ex.compile(hit.plan))
        if hit.run is None:  # planned for an own_run caller: compile the shared runnable once
            hit = _CACHE[full_key] = replace(hit, run=ex.compile(hit.plan))
        return hit
    result = _compile(graph() if callable(graph) else graph, ex, optimize, watched)
    _CACHE[full_key] = replace(result, run=None if own_run else result.run, record=None)
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return result


def _compile(g: Graph, ex, optimize: bool, watched: bool) -> CompiledGraph:
    """Run the stages on g and time them; with watched, record every stage and notify debug."""
    record = debug.CompileRecord(g.name) if watched else None
    dump = None if record is None else (lambda stage, graph, sec: record.stages.append((stage, graph, sec)))
    timings: list[tuple[str, float]] = []
    target = capabilities(ex.name)  # what the backend can do: fusion, legalization and the plan builder ask it
    if optimize:
        g = run_pipeline(g, dump=dump, timings=timings)
    # every graph, optimised or not: what the backend cannot run goes before planning
    g = legalize(g, target.attention_unsupported, dump=dump, timings=timings, conv_unsupported=target.conv_unsupported)
    if optimize:
        g = lower(g, dump=dump, timings=timings, target=target)
    start = time.perf_counter()
    plan = to_plan(g, target=target)
    timings.append(("plan", time.perf_counter() - start))
    start = time.perf_counter()
    run = ex.compile(plan)
    timings.append((f"{ex.name} compile", time.perf_counter() - start))
    if record is not None:
        record.graph, record.plan, record.plan_seconds = g, plan, timings[-2][1]
        debug.notify(record)
    return CompiledGraph(g, plan, run, tuple(timings), record if debug.observing() else None)
