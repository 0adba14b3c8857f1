"""Pipelines: plain lists of passes, run in order, verified in debug mode, timed, optionally dumped."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial, update_wrapper

from flame._env import env_flag
from flame.errors import VerifyError
from flame.ir.graph import Graph, Op, discard, is_backward
from flame.ir.ops.conv import CONV_OPS
from flame.ir.printer import print_graph
from flame.ir.verify import verify
from flame.passes.cse import eliminate_common_subexpressions
from flame.passes.dce import eliminate_dead_code
from flame.passes.decompose_attention import ATTENTION_OPS, all_supported, decompose_attention
from flame.passes.decompose_conv import decompose_conv
from flame.passes.fold_constants import fold_constants
from flame.passes.fuse import fuse
from flame.passes.layout import channels_last
from flame.passes.remat import never, rematerialize
from flame.passes.rewrite_attention import rewrite_attention
from flame.passes.schedule_collectives import schedule_collectives
from flame.passes.schedule_memory import schedule_memory
from flame.passes.simplify import simplify_algebra
from flame.target import DEFAULT_TARGET, Target

Pass = Callable[[Graph], Graph]
Dump = Callable[[str, Graph, float], None]

SIMPLIFY: list[Pass] = [
    eliminate_dead_code,
    rewrite_attention,  # forward-only graphs; autodiff has already rewritten those it differentiates
    fold_constants,
    simplify_algebra,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    schedule_collectives,  # last: the passes above keep the order it makes
]
LOWER = [channels_last, fuse]  # run once, after SIMPLIFY, each given the Target: fuse records the kernels
MAX_ROUNDS = 8  # a rewrite exposing another is rare; more rounds than this means a rule loops


def debug_enabled() -> bool:
    """FLAME_DEBUG=1 turns on the verifier after every pass."""
    return env_flag("FLAME_DEBUG", False)


def stage_name(p: Pass, rnd: int) -> str:
    """`simplify_algebra` in the first round, `simplify_algebra (round 2)` after."""
    name = getattr(p, "__name__", type(p).__name__)
    return name if rnd == 0 else f"{name} (round {rnd + 1})"


def _check(stage: str, g: Graph) -> None:
    try:
        verify(g)
    except VerifyError as e:
        raise VerifyError(f"after {stage}: {e}") from None


def run_pipeline(
    g: Graph,
    passes: Sequence[Pass] = SIMPLIFY,
    debug: bool = False,
    dump: Dump | None = None,
    timings: list[tuple[str, float]] | None = None,
    max_rounds: int = MAX_ROUNDS,
    text: str | None = None,
) -> Graph:
    """Run `passes` in order, repeating the whole list until a round leaves the graph's text unchanged
    (at most max_rounds rounds; pass max_rounds=1 for passes that must run once, such as lowering). A
    round whose passes all returned the graph they were given changed nothing; one that changed the ops'
    count or names changed the text; the texts are printed and compared only otherwise.

    With debug=True or FLAME_DEBUG=1 the verifier checks the input and the result of every pass, and a
    failure names the pass. `dump(stage, graph, seconds)` is called with stage "traced" (0 s) first, then
    after every pass with its name (see stage_name) and its time; `timings`, when given, receives the
    same (stage, seconds) pairs. `text`: print_graph(g), where the caller has it (the first round
    compares against it). Before: a verified graph. After: the passes' combined contract; g is
    not modified (a pass builds a new graph, or returns the one it was given when it changes nothing)."""
    debug = debug or debug_enabled()
    if debug:
        _check("tracing", g)
    if dump is not None:
        dump("traced", g, 0.0)
    printed = (g, text)  # the last graph whose text is known (printed only when a round must compare)
    first = g
    for rnd in range(max_rounds):
        same = True  # every pass so far returned the graph it was given: the text cannot have changed
        start = g
        for p in passes:
            stage = stage_name(p, rnd)
            began = time.perf_counter()
            given, g = g, p(g)
            seconds = time.perf_counter() - began
            same = same and g is given
            if debug:
                _check(stage, g)
            if timings is not None:
                timings.append((stage, seconds))
            if dump is not None:
                dump(stage, g, seconds)
            if given is not start:  # the round's start stays until the round's text comparison
                _drop(given, g, first, dump)
        if rnd + 1 == max_rounds or same:
            break
        done = False
        if not _ops_differ(start, g):  # else the text has changed: no need to print it
            before = printed[1] if printed[0] is start and printed[1] is not None else print_graph(start)
            printed = (g, print_graph(g))
            done = printed[1] == before
        _drop(start, g, first, dump)
        if done:
            break
    return g


def _drop(old: Graph, new: Graph, first: Graph, dump: Dump | None) -> None:
    """Free `old`, a graph a pass replaced by `new`, without the cyclic collector (graph.discard): not
    the pipeline's input (its caller holds it) nor a graph handed to `dump`, and none of the ops that
    `new` or the input hold (a pass may hand ops on to the graph it returns)."""
    if old is not new and old is not first and dump is None:
        discard(old.ops, {*new.ops, *first.ops})


def _ops_differ(a: Graph, b: Graph) -> bool:
    """Whether the texts of a and b certainly differ, without printing them: the text has one line per op,
    in order, naming the op (`%3 = mul ...`), so another count or another name in a place changes it."""
    return len(a.ops) != len(b.ops) or any(x.name != y.name for x, y in zip(a.ops, b.ops))


def fusion_enabled() -> bool:
    """FLAME_FUSE=0 turns the fusion pass off (one kernel per op), for A/B tests and debugging."""
    return env_flag("FLAME_FUSE", True)


def _after_traced(dump: Dump | None) -> Dump | None:
    """dump without the "traced" stage (a stage after the first pipeline shows what it changed)."""
    return None if dump is None else (lambda stage, graph, sec: stage != "traced" and dump(stage, graph, sec))


def legalize(g: Graph, attention_unsupported: Callable[[Op], str] = all_supported, debug: bool = False,
             dump: Dump | None = None, timings: list[tuple[str, float]] | None = None,
             conv_unsupported: Callable[[Op], str] = all_supported) -> Graph:
    """Replace the ops the backend cannot run as they are by primitive ops: an attention op for which
    `attention_unsupported(op)` gives a reason becomes the unfused graph (passes/decompose_attention.py),
    a convolution for which `conv_unsupported(op)` does becomes im2col + matmul
    (passes/decompose_conv.py), the reason on its ops' source lines. Runs on every compiled graph,
    eager and FLAME_FUSE=0 ones too (a backend's limit, not an optimisation), before lowering so the
    decomposed ops fuse; dumps show a stage ("decompose_attention", "decompose_conv") only for graphs
    with such an op."""
    stages = []
    for ops, decompose_pass, unsupported in ((ATTENTION_OPS, decompose_attention, attention_unsupported),
                                             (CONV_OPS, decompose_conv, conv_unsupported)):
        if any(op.name in ops for op in g.ops):
            stage = partial(decompose_pass, supported=unsupported)
            stage.__name__ = decompose_pass.__name__  # the stage's name in dumps and timings
            stages.append(stage)
    if not stages:
        return g
    return run_pipeline(g, stages, debug=debug, dump=_after_traced(dump), timings=timings, max_rounds=1)


def remat(g: Graph, allow: Callable[[Op], bool] = never, debug: bool = False, dump: Dump | None = None,
          timings: list[tuple[str, float]] | None = None) -> Graph:
    """Run the rematerialisation pass once on a simplified joint graph (after SIMPLIFY: its CSE would
    merge the recomputations back; before legalize and lower). `allow(op)`: which ops outside
    flame.utils.checkpoint regions may be recomputed (passes/remat.py; the compiler's memory-budget
    search chooses it; what fuses into the backward for free is always recomputed). Forward-only graphs
    skip the stage."""
    if not any(is_backward(op) for op in g.ops):
        return g  # nothing to recompute: keep forward-only graphs out of the stage list

    def rematerialize_(graph: Graph) -> Graph:
        return rematerialize(graph, allow)

    rematerialize_.__name__ = rematerialize.__name__
    return run_pipeline(g, [rematerialize_], debug=debug, dump=_after_traced(dump), timings=timings, max_rounds=1)


def lower(g: Graph, debug: bool = False, dump: Dump | None = None,
          timings: list[tuple[str, float]] | None = None, target: Target = DEFAULT_TARGET,
          memory_first: bool = False) -> Graph:
    """Run LOWER once on a simplified graph (unless FLAME_FUSE=0) for a backend that can do what
    `target` says (the CUDA backend's: flame.runtime.matmul.capabilities()); dumps start at stage
    "fuse". memory_first (a plan fitted to a memory budget): then schedule_memory, the kernel order
    that keeps the fewest bytes live."""
    if not fusion_enabled():
        return g
    passes = [update_wrapper(partial(p, target=target), p) for p in LOWER]  # keeps each pass's name
    if memory_first:
        passes.append(schedule_memory)
    return run_pipeline(g, passes, debug=debug, dump=_after_traced(dump), timings=timings, max_rounds=1)
