"""flame.Size, torch.Size: a tuple of ints that x.shape and x.size() return, with torch's numel(), its
repr (`flame.Size([2, 3])`) and its constructor's checks; slicing it, adding a tuple to it or repeating it
gives a Size, as torch's does. It is a tuple, so it equals the tuple of the same ints and goes wherever one
does."""

from __future__ import annotations

import math
import operator

import numpy as np


class Size(tuple):
    """torch.Size: the sizes of a tensor's dimensions (x.shape), a tuple of ints."""

    __slots__ = ()

    def __new__(cls, sizes=()):
        if isinstance(sizes, Size):
            return sizes
        try:
            items = tuple(sizes)
        except TypeError:
            raise TypeError(f"'{type(sizes).__name__}' object is not iterable") from None
        out = []
        for i, s in enumerate(items):
            if type(s) is not int:
                try:  # an int-like (a NumPy integer, a one-element integer tensor), never a float
                    if hasattr(s, "dtype"):
                        if not _integral(s) or getattr(s, "ndim", 0) != 0:
                            raise TypeError
                        s = int(s)
                    s = operator.index(s)
                except TypeError:
                    raise TypeError(f"flame.Size() takes an iterable of 'int' (item {i} is "
                                    f"'{type(s).__name__}')") from None
            out.append(s)
        return tuple.__new__(cls, out)

    def numel(self) -> int:
        """The number of elements a tensor of this shape holds (1 for Size([]))."""
        return math.prod(self)

    def __getitem__(self, key):
        got = tuple.__getitem__(self, key)
        return tuple.__new__(Size, got) if isinstance(key, slice) else got

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return tuple.__new__(Size, tuple.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return tuple.__new__(Size, tuple.__add__(other, self))

    def __mul__(self, n):
        return tuple.__new__(Size, tuple.__mul__(self, n))

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return f"flame.Size({list(self)})"

    __str__ = __repr__

    def __reduce__(self):
        return Size, (tuple(self),)


def _integral(s) -> bool:
    """s (a NumPy integer, or a tensor) has an integer dtype."""
    return s.dtype.kind in "iu" if isinstance(s.dtype, np.dtype) else getattr(s.dtype, "is_int", False)
