"""Per-call list work in C: a compiled call walks lists of a few hundred arrays (an optimizer step's
parameters and moments), against GPU work that can take well under a millisecond, so the walks that
run at every call (picking items, checking that items are the same objects as last time) go through
operator.itemgetter, map and all instead of Python loops."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

_call = getattr(operator, "call", lambda f: f())  # operator.call: Python 3.11+


def gather(indices: Sequence[int]) -> Callable[[Sequence], tuple]:
    """xs -> tuple(xs[i] for i in indices), as one C call (itemgetter returns a bare item for one index)."""
    if len(indices) > 1:
        return operator.itemgetter(*indices)
    if indices:
        i = indices[0]
        return lambda xs: (xs[i],)
    return lambda xs: ()


def all_same(xs, ys) -> bool:
    """Whether xs[i] is ys[i] for every i (iterables of equal length)."""
    return all(map(operator.is_, xs, ys))


def alive_same(refs, xs) -> bool:
    """Whether refs[i]() is xs[i] for every i: refs are weak references (or callables returning None)
    to the objects a previous call saw, xs this call's objects."""
    return all(map(operator.is_, map(_call, refs), xs))
