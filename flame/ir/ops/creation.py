"""Creation ops: full, arange (no inputs), and the triangular masks triu / tril."""

from __future__ import annotations

import numpy as np

from flame.errors import ShapeError
from flame.ir.registry import Attr, OpDef, register
from flame.ir.types import TensorType

_NO_INPUTS = "no inputs to differentiate"


def _full_infer(types, shape, value, dtype):
    return TensorType(tuple(shape), dtype)


register(OpDef("full", "elementwise", 0, _full_infer,
               lambda shape, value, dtype: np.full(shape, value, dtype=dtype.np_dtype),
               {"shape": Attr("ints"), "value": Attr("number"), "dtype": Attr("dtype")},
               nondiff=_NO_INPUTS, constant=True))


def arange_len(start: float, stop: float, step: float) -> int:
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    return max(0, int(np.ceil((stop - start) / step)))


def _arange_infer(types, start, stop, step, dtype):
    return TensorType((arange_len(start, stop, step),), dtype)


def _arange_ref(start, stop, step, dtype):
    n = arange_len(start, stop, step)
    return (start + step * np.arange(n, dtype=np.float64)).astype(dtype.np_dtype)


register(OpDef("arange", "elementwise", 0, _arange_infer, _arange_ref,
               {"start": Attr("number"), "stop": Attr("number"), "step": Attr("number", 1),
                "dtype": Attr("dtype")}, nondiff=_NO_INPUTS, positional=True, constant=True))


def _tri_infer(name):
    def infer(types, k):
        if types[0].rank < 2:
            raise ShapeError(f"{name} {types[0]}: needs a tensor of rank >= 2")
        return types[0]
    return infer


register(OpDef("triu", "elementwise", 1, _tri_infer("triu"), lambda x, k: np.triu(x, k),
               {"k": Attr("int", 0)}, lambda b, g, x, out, k: (b.triu(g, k=k),), positional=True))
register(OpDef("tril", "elementwise", 1, _tri_infer("tril"), lambda x, k: np.tril(x, k),
               {"k": Attr("int", 0)}, lambda b, g, x, out, k: (b.tril(g, k=k),), positional=True))

