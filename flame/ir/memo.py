"""Memoising a costly NumPy reference on the exact bits of its arguments.

The reference executor evaluates some expensive pure functions several times per step on the same
values, because the plan recomputes them where the GPU recomputes for free: an exact GELU's erf in
the forward, again in the backward kernel that recomputes the GELU output for the weight gradient,
and a third time in the GELU's derivative; attention's scores in the forward, its softmax statistics and
its backward. On the tiny GPT of examples/train_gpt.py (CPU) the six erf evaluations would be about a
third of the step (benchmarks/results/2026-11-29-CPU-reference/). `exact_memo` keeps the last results
(up to a byte budget) keyed by the arguments' bits, so a repeat costs a comparison and a copy instead of
the evaluation, and the result is the same array, bit for bit, as evaluating again: the function must be
pure (its result a function of its arguments alone), which holds for registry references.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import wraps

import numpy as np

MAX_BYTES = 64 << 20  # of inputs and results kept, per memoised function
MAX_ENTRY_BYTES = 8 << 20  # an evaluation larger than this is not kept (its comparison would cost more)


def _bits(a: np.ndarray) -> np.ndarray:
    """a as unsigned integers of its item size: compares -0.0 apart from 0.0 and NaN equal to itself."""
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else a


def _key(a: np.ndarray) -> tuple:
    """What an array is looked up by: its type and three of its elements (a full comparison follows)."""
    n = a.size
    return a.shape, a.dtype.str, *((a.flat[0], a.flat[n // 2], a.flat[n - 1]) if n else ())


def _copy(result):
    return tuple(r.copy() for r in result) if isinstance(result, tuple) else result.copy()


def _nbytes(result) -> int:
    return sum(r.nbytes for r in result) if isinstance(result, tuple) else result.nbytes


def exact_memo(fn: Callable) -> Callable:
    """fn memoised on its arguments: NumPy arrays by their exact bits, everything else by equality
    (it must be hashable). fn returns an array or a tuple of arrays; a kept result comes back as a
    fresh copy, so a caller may write into it."""
    kept: OrderedDict[tuple, tuple] = OrderedDict()  # key -> (arrays, result), least recently used first
    used = [0]  # bytes kept
    lock = threading.Lock()

    @wraps(fn)
    def memoised(*args, **kwargs):
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        key = (tuple(_key(a) if isinstance(a, np.ndarray) else a for a in args), tuple(sorted(kwargs.items())))
        with lock:
            hit = kept.get(key)
            if hit is not None and all(np.array_equal(_bits(a), _bits(b)) for a, b in zip(arrays, hit[0])):
                kept.move_to_end(key)
                return _copy(hit[1])
        result = fn(*args, **kwargs)
        result = tuple(map(np.asarray, result)) if isinstance(result, tuple) else np.asarray(result)
        size = _nbytes(result) + sum(a.nbytes for a in arrays)
        if size <= MAX_ENTRY_BYTES:
            with lock:
                old = kept.pop(key, None)
                kept[key] = ([np.array(a) for a in arrays], _copy(result))
                used[0] += size - (0 if old is None else _nbytes(old[1]) + sum(a.nbytes for a in old[0]))
                while used[0] > MAX_BYTES:
                    _, (held, res) = kept.popitem(last=False)
                    used[0] -= _nbytes(res) + sum(a.nbytes for a in held)
        return result

    memoised.cache_clear = lambda: (kept.clear(), used.__setitem__(0, 0))
    return memoised
