"""Tensor's methods that cut a tensor into views along a dim (split, tensor_split, chunk) or reverse one
(fliplr, flipud), as torch's; methods.py binds them onto Tensor with the other mixins."""

from __future__ import annotations

import builtins

import numpy as np

from flame.errors import ArgumentTypeError, ShapeError
from flame.frontend.context import user_location
from flame.frontend.tensor import Tensor, dim_index, int_arg
from flame.frontend.views import several_views


class TensorPieces:
    """The mixin Tensor inherits (no state of its own)."""

    __slots__ = ()

    def split(self, split_size, dim: int = 0):
        """Pieces of split_size along dim (the last one smaller), or of the listed sizes: views, which
        may not be written in place while the write records a gradient, as torch's (views.several_views)."""
        split_size = int_arg(split_size)
        call = "split" if isinstance(split_size, (int, np.integer)) else "split_with_sizes"
        return several_views(self._split(split_size, dim), call)

    def _split(self, split_size, dim: int = 0):
        """split's pieces, not marked (torch.unsafe_split's)."""
        split_size_or_sections = int_arg(split_size)
        axis = dim_index("split", dim, self.ndim)
        n = self.shape[axis]
        if isinstance(split_size_or_sections, (int, np.integer)):
            size = int(split_size_or_sections)
            if size <= 0 and not (size == 0 and n == 0):
                raise ShapeError(f"split: split_size must be positive, got {size}\n  at {user_location()}")
            # an empty dim splits into one empty piece, as torch's (its count is max(ceil(n / size), 1))
            sizes = [size] * (n // size) + ([n % size] if n % size else []) if size and n else [0]
        else:
            sizes = [int(s) for s in split_size_or_sections]
            if sum(sizes) != n or any(s < 0 for s in sizes):
                raise ShapeError(f"split: sizes {sizes} must be non-negative and sum to the size of dimension {dim} "
                                 f"({n})\n  at {user_location()}")
        out, at = [], 0
        for s in sizes:
            out.append(self.narrow(axis, at, s))
            at += s
        return tuple(out)

    def tensor_split(self, tensor_indices_or_sections=None, dim: int = 0, *, sections=None, indices=None):
        """Views along dim, as torch.tensor_split: n sections (the first n % size one longer), or pieces
        between the listed indices (clipped to the dim, as slicing clips); given positionally or as torch's
        keywords sections= / indices=."""
        given = [v for v in (tensor_indices_or_sections, sections, indices) if v is not None]
        if len(given) != 1:
            raise ArgumentTypeError(f"tensor_split: give one of a number of sections or a list of indices "
                                    f"(positionally, sections= or indices=), got {len(given)}\n  at {user_location()}")
        indices_or_sections = given[0]
        axis = dim_index("tensor_split", dim, self.ndim)
        n = self.shape[axis]
        if isinstance(indices_or_sections, Tensor):
            indices_or_sections = indices_or_sections.tolist()
        if isinstance(indices_or_sections, (int, np.integer)):
            k = int(indices_or_sections)
            if k <= 0:
                raise ShapeError(f"tensor_split: number of sections must be greater than 0, got {k}\n"
                                 f"  at {user_location()}")
            sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
            bounds = np.cumsum([0, *sizes]).tolist()
        else:
            cuts = [min(builtins.max(int(i) + (n if int(i) < 0 else 0), 0), n) for i in indices_or_sections]
            bounds = [0, *cuts, n]
        # piece k is [bounds[k], bounds[k + 1]) as a slice clips it: empty where the cuts go backwards
        return tuple(self.narrow(axis, lo, builtins.max(hi - lo, 0)) for lo, hi in zip(bounds[:-1], bounds[1:]))

    def fliplr(self):
        """The columns (dim 1) in reverse, as torch.fliplr (at least 2-D)."""
        if self.ndim < 2:
            raise ShapeError(f"fliplr: input must be >= 2-d, got {list(self.shape)}\n  at {user_location()}")
        return self.flip(1)

    def flipud(self):
        """The rows (dim 0) in reverse, as torch.flipud (at least 1-D)."""
        if self.ndim < 1:
            raise ShapeError(f"flipud: input must be >= 1-d, got a 0-d tensor\n  at {user_location()}")
        return self.flip(0)

    def chunk(self, chunks: int, dim: int = 0):
        """At most `chunks` pieces of ceil(n / chunks) along dim (PyTorch's torch.chunk): views, as split's."""
        return several_views(self._chunk(chunks, dim), "split")

    def _chunk(self, chunks: int, dim: int = 0):
        """chunk's pieces, not marked (torch.unsafe_chunk's)."""
        chunks = int_arg(chunks)
        if chunks <= 0:
            raise ShapeError(f"chunk: chunks must be positive, got {chunks}\n  at {user_location()}")
        if self.ndim == 0:
            raise ShapeError(f"chunk expects at least a 1-dimensional tensor, as in PyTorch\n  at {user_location()}")
        n = self.shape[dim_index("chunk", dim, self.ndim)]
        if n == 0:
            return tuple(self for _ in range(chunks))
        return self._split(-(-n // chunks), dim)
