"""Gradient reducers: objects that rewrite the .grad of their parameters right after a backward
(flame.nn.parallel.DistributedDataParallel averages them over the ranks). backward() — eager, or
inside @flame.compile, where the reducer's ops join the traced graph after the autodiff ops — calls
`run_grad_reducers` with the tensors whose .grad it has just set. Reducers run in the order they were
registered, which is the same on every rank, so every rank issues the same collectives in the same
order."""

from __future__ import annotations

import weakref
from collections.abc import Iterable

_reducers: list[weakref.ref] = []


def register_grad_reducer(reducer) -> None:
    """Call `reducer.reduce_grads(touched)` after each backward (touched: the tensors whose .grad
    that backward set). Held weakly: a reducer nobody keeps stops running."""
    _reducers[:] = [r for r in _reducers if r() is not None]
    _reducers.append(weakref.ref(reducer))


def run_grad_reducers(touched: Iterable) -> None:
    touched = list(touched)
    if not touched:
        return
    for ref in list(_reducers):
        reducer = ref()
        if reducer is not None:
            reducer.reduce_grads(touched)
