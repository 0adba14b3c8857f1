"""Python's cyclic garbage collector paused while flame builds a compiled function's program (a
trace, its passes and plan, or a new size's plan from its template).

Building allocates hundreds of thousands of IR objects (an Op and its Value refer to each other, so
every one is tracked by the collector), and each allocation burst triggers collections that scan the
process's older objects again: on a CPU, planning gpt_train's step (passes, plan, kernel sources; the
CUDA target) takes 1.58-1.69 s with the collector running and 1.22-1.25 s paused, and the digits MLP's
first calls at a new batch size (dynamic dim, reference executor) 3.43-3.83 ms (median) against
3.22-3.32 (a 2-core CPU). The graphs the passes replace are not left to the collector: their op-result
cycles are broken as they are dropped (ir.graph.discard), so reference counting frees them during the
build. What the build leaves is then nearly all alive (the compiled graph and plan, the trace; a
12-block GPT's compile leaves ~80k tracked objects, ~250k while a debug observer keeps every stage,
and a few hundred of them are garbage: template and helper cycles), and the young collection that
would run as the collector is enabled again only scans it to promote it (11 ms and 30 ms on a 2-core
CPU). So the young generations are collected as a build starts (the collector's thresholds keep
them small: microseconds), and a build that succeeds then moves every tracked object into the oldest
generation unscanned (gc.freeze then gc.unfreeze) before enabling the collector: the build's few
hundred objects of garbage are freed by the next full collection instead, and the program's own
garbage was collected already. A build that raises enables the collector as it is, which collects
the failed build's garbage (a traceback's frames) as usual; a program that froze objects itself
(gc.freeze, before forking) keeps them frozen, the build's objects left to the young collection.
A collector the program disabled itself stays disabled; building inside a build changes nothing."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector disabled for the block (if it was enabled), enabled again after it, also when
    the block raises."""
    if not gc.isenabled():
        yield
        return
    gc.collect(1)  # the young generations (small), so that what is young at the end is the build's
    gc.disable()
    try:
        yield
    except BaseException:
        gc.enable()  # a failed build's garbage (a traceback's frames) is collected as usual
        raise
    if gc.get_freeze_count() == 0:  # (a program that froze objects itself keeps them frozen)
        gc.freeze()  # every tracked object into the oldest generation, unscanned
        gc.unfreeze()
    gc.enable()
