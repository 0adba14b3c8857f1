"""Tensor's gather / scatter / index methods (gather, index_select, take, take_along_dim, index_add,
index_copy, index_fill, scatter, scatter_add, scatter_reduce, index_put and their in-place forms): each
a function of frontend/index_ops.py, scatter_reduce.py or indexing.py; the in-place forms through
Tensor._inplace (frontend/tensor_ops.py). frontend/methods.py binds them onto Tensor."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError
from flame.frontend import index_ops, scatter_reduce
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.indexing import index_put
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import full
from flame.ir.dtypes import i64


class TensorIndexOps:
    def gather(self, dim: int, index):
        """self's elements at index along dim (frontend/index_ops.py: an index must be in [0, size))."""
        return index_ops.gather(self, dim, index)

    def index_select(self, dim: int, index):
        """self's slices at index (1-D) along dim; an index must be in [0, size)."""
        return index_ops.index_select(self, dim, index)

    def scatter_add(self, dim: int, index, src):
        """self with src added at index along dim (duplicates add up)."""
        return index_ops.scatter_add(self, dim, index, src)

    def take_along_dim(self, indices, dim: int | None = None):
        """self's elements at indices along dim (flattened when dim is None), broadcast except along dim;
        along a dim a negative index counts from the end, as torch.take_along_dim."""
        return index_ops.take_along_dim(self, indices, dim)

    def take(self, index):
        """self's elements at index (any shape) of the flattened tensor, as torch.take; a negative index
        counts from the end and the index must be int64."""
        if not isinstance(index, Tensor) or index.dtype != i64:
            got = index.dtype if isinstance(index, Tensor) else type(index).__name__
            raise DTypeError(f"take(): Expected a long tensor for index, but got {got}\n  at {user_location()}")
        return self.reshape(-1)[index]

    def index_add(self, dim: int, index, source, *, alpha=1):
        """self with alpha * source's slices added at index along dim (repeated indices add up)."""
        return index_ops.index_add(self, dim, index, source, alpha=alpha)

    def index_add_(self, dim: int, index, source, *, alpha=1):
        """index_add, in place."""
        return self._inplace(lambda x: x.index_add(dim, index, source, alpha=alpha), source, check="any",
                             what="index_add_")

    def index_copy(self, dim: int, index, source):
        """self with source's slices written at index along dim (a repeated index: the last wins)."""
        return index_ops.index_copy(self, dim, index, source)

    def index_copy_(self, dim: int, index, source):
        """index_copy, in place."""
        return self._inplace(lambda x: index_ops.copy_slices(x, dim, index, source), source, check="any",
                             what="index_copy_")

    def index_fill(self, dim: int, index, value):
        """self with the slices at index along dim set to value (negative indices count from the end)."""
        return index_ops.index_fill(self, dim, index, value)

    def index_fill_(self, dim: int, index, value):
        """index_fill, in place."""
        return self._inplace(lambda x: x.index_fill(dim, index, value), value, check=None)  # torch reads value first

    def scatter(self, dim: int, index, src=None, value=None, *, reduce: str | None = None):
        """self with src (or value) written at index along dim; of several writes to one position the
        last in row-major order wins, as torch.scatter on the CPU. reduce="add" / "multiply" are torch's
        older spellings of scatter_reduce's "sum" / "prod" (src counted in, whole)."""
        if reduce == "multiply" and (src is None) != (value is None):
            src = value if src is None else src
            if not isinstance(src, Tensor):
                shape = tuple(index.shape) if isinstance(index, Tensor) else np.shape(index)
                src = full(shape, src, self.dtype)
            return scatter_reduce.scatter_reduce(self, dim, index, src, "prod")
        return index_ops.scatter(self, dim, index, src, value, reduce=reduce)

    def scatter_(self, dim: int, index, src=None, value=None, *, reduce: str | None = None):
        """scatter, in place."""
        return self._inplace(lambda x: x.scatter(dim, index, src, value, reduce=reduce), src, value, check="any",
                             what="scatter_")

    def scatter_reduce(self, dim: int, index, src, reduce: str, *, include_self: bool = True):
        """self with src reduced ("sum", "prod", "mean", "amax", "amin") into the positions index names
        along dim, as torch.scatter_reduce (frontend/scatter_reduce.py)."""
        return scatter_reduce.scatter_reduce(self, dim, index, src, reduce, include_self=include_self)

    def scatter_reduce_(self, dim: int, index, src, reduce: str, *, include_self: bool = True):
        """scatter_reduce, in place."""
        return self._inplace(lambda x: x.scatter_reduce(dim, index, src, reduce, include_self=include_self), src,
                             check="any", what="scatter_reduce_")

    def scatter_add_(self, dim: int, index, src):
        """scatter_add, in place."""
        return self._inplace(lambda x: x.scatter_add(dim, index, src), src, check="any", what="scatter_add_")

    # autocast: on PyTorch's CUDA promote list (the widest input; index_put_, in place, is not cast), none of its CPU
    # lists
    @policy("promote", cpu="")
    def index_put(self, indices, values, accumulate: bool = False):
        """torch.index_put: values written at (accumulate=True: added to) the elements self[indices]
        selects; a position written twice keeps the last write (frontend/indexing.py)."""
        return index_put(self, indices, values, accumulate)

    def index_put_(self, indices, values, accumulate: bool = False):
        """index_put, in place."""
        return self._inplace(lambda x: x.index_put(indices, values, accumulate), values, check="any", what="index_put_")
