"""Python's cyclic garbage collector paused while flame builds a compiled function's program (a
trace, its passes and plan, or a new size's plan from its template).

Building allocates hundreds of thousands of IR objects (an Op and its Value refer to each other, so
every one is tracked by the collector), and each allocation burst triggers collections that scan the
process's older objects again: on a CPU, planning gpt_train's step (passes, plan, kernel sources; the
CUDA target) takes 1.58-1.69 s with the collector running and 1.22-1.25 s paused, and the digits MLP's
first calls at a new batch size (dynamic dim, reference executor) 3.43-3.83 ms (median) against
3.22-3.32 (a 2-core CPU). What a build leaves as cyclic garbage is
small (43 objects after gpt_train's), and the collector, enabled again at the end, collects it as usual.
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
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
