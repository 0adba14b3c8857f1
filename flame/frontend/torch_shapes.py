"""torch's shape helpers flame composes from indexing and views: Tensor.unfold (sliding windows),
as_strided (read as a gather from the storage),
slice_scatter / select_scatter / diagonal_scatter (input with src written into a slice, a copy),
fill_diagonal_, sum_to_size, the adjoint spellings (H, mH, adjoint, matrices of real numbers: the
transpose), split_with_sizes and the unsafe_ spellings of split and chunk, ger, ndimension, nbytes,
itemsize. Differentiable through the indexing they are written with, eagerly and inside
@flame.compile. TensorShapes holds the Tensor methods (bound by methods.py)."""

from __future__ import annotations

import numpy as np

from flame.errors import ArgumentError, ArgumentRangeError, AutogradError, ShapeError
from flame.frontend import views
from flame.frontend.context import current_trace, grad_enabled, user_location
from flame.frontend.creation import tensor
from flame.frontend.data_writes import data_link
from flame.frontend.dispatch import apply
from flame.frontend.size import Size
from flame.frontend.tensor import Tensor, dim_index
from flame.frontend.tensor_core import full
from flame.frontend.tensor_core import where as select
from flame.ir.dtypes import boolean

__all__ = ["adjoint", "as_strided", "diagonal_scatter", "ger", "index_reduce", "isreal", "narrow_copy", "put",
           "select_scatter", "slice_scatter", "split_with_sizes", "unsafe_chunk", "unsafe_split",
           "unsafe_split_with_sizes"]


def _written(input: Tensor, view, src: Tensor) -> Tensor:  # noqa: A002
    """A copy of input with src written through view(copy) (its gradient reaches input and src)."""
    out = input.clone()
    target = view(out)
    if tuple(src.shape) != tuple(target.shape):
        raise ShapeError(f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
                         f"slice size = {list(target.shape)}\n  at {user_location()}")
    target.copy_(src)
    return out


def slice_scatter(input: Tensor, src: Tensor, dim: int = 0, start: int | None = None, end: int | None = None,  # noqa: A002
                  step: int = 1) -> Tensor:
    """input with src in the slice start:end:step of dim, as torch.slice_scatter."""
    d = dim_index("slice_scatter", dim, input.ndim)
    key = (slice(None),) * d + (slice(start, end, step),)
    return _written(input, lambda t: t[key], src)


def select_scatter(input: Tensor, src: Tensor, dim: int, index: int) -> Tensor:  # noqa: A002
    """input with src at index of dim, as torch.select_scatter."""
    return _written(input, lambda t: t.select(dim, index), src)


def diagonal_scatter(input: Tensor, src: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # noqa: A002
    """input with src on its offset diagonal of (dim1, dim2), as torch.diagonal_scatter."""
    return _written(input, lambda t: t.diagonal(offset, dim1, dim2), src)


def isreal(input: Tensor) -> Tensor:  # noqa: A002
    """True everywhere: flame's numbers are real (torch.isreal)."""
    return full(tuple(input.shape), True, dtype=boolean)


def adjoint(input: Tensor) -> Tensor:  # noqa: A002
    """The last two dims swapped (the conjugate transpose of real matrices), as torch.adjoint."""
    return input.transpose(-2, -1)


def ger(input: Tensor, vec2: Tensor) -> Tensor:  # noqa: A002
    """torch.ger, the older name of torch.outer."""
    return input.outer(vec2)


def split_with_sizes(input: Tensor, split_sizes, dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    """Pieces of the given sizes along dim (they must add up to its size), as torch.split_with_sizes."""
    return tuple(input.split(list(split_sizes), dim))


def unsafe_split(input: Tensor, split_size: int, dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    """torch.unsafe_split: torch.split whose pieces are not checked for later in-place writes."""
    return tuple(input._split(split_size, dim))


def unsafe_split_with_sizes(input: Tensor, split_sizes, dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    return tuple(input._split(list(split_sizes), dim))


def unsafe_chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    return tuple(input._chunk(chunks, dim))


def index_reduce(input: Tensor, dim: int, index: Tensor, source: Tensor, reduce: str, *,  # noqa: A002
                 include_self: bool = True) -> Tensor:
    """input with source's slices along dim reduced into the slices index names ('prod', 'mean', 'amax'
    or 'amin'), as torch.index_reduce: scatter_reduce with index spread over source's other dims."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise ArgumentError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got "
                            f"{reduce}.\n  at {user_location()}")
    d = dim_index("index_reduce", dim, input.ndim)
    if index.ndim != 1 or index.shape[0] != (source.shape[d] if source.ndim else 1):
        raise ShapeError(f"index_reduce(): index {list(index.shape)} must be 1-D with one entry per slice of source "
                         f"{list(source.shape)} along dim {dim}\n  at {user_location()}")
    spread = index.reshape(*(1,) * d, -1, *(1,) * (source.ndim - d - 1)).expand(*source.shape)
    return input.scatter_reduce(d, spread, source, reduce, include_self=include_self)


def put(input: Tensor, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:  # noqa: A002
    """input with source written (or added, with accumulate) at flat indices of input (negative ones
    counting from the end), as torch.put."""
    flat = input.reshape(-1)
    return flat.index_put((index.reshape(-1),), source.reshape(-1), accumulate).reshape(input.shape)


def narrow_copy(input: Tensor, dim: int, start: int, length: int) -> Tensor:  # noqa: A002
    """input.narrow(dim, start, length) as a new tensor sharing no storage with input, as torch's."""
    return input.narrow(dim, start, length).clone()


def as_strided(input: Tensor, size, stride, storage_offset: int | None = None) -> Tensor:  # noqa: A002
    """torch.as_strided: the elements of input's storage (its base's elements in row-major order, or
    input's own when it is no view) at storage_offset + sum_i index_i * stride_i (storage_offset: input's
    own by default), in a tensor of shape `size`: sliding windows, overlapping and strided reads give
    torch's values and gradients (an element read twice gets both; an element of the storage outside a
    view input's own gets none, as torch's backward, which is input's), eagerly and inside @flame.compile,
    with torch's errors (negative strides, an offset or extent beyond the storage). As torch's, the result
    is a view of the storage (the op as_strided of its flat base, or of its detached base through detach()):
    its stride(), storage_offset() and is_contiguous() are torch's and a write into it reaches input. Of a
    view that requires grad and reads storage outside its own elements (which get no gradient) it is a
    copy, a write into which raises; as_strided_ raises."""
    size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
    where = f"\n  at {user_location()}"
    if len(size) != len(stride):
        raise ShapeError(f"mismatch in length of strides and shape{where}")
    if any(s < 0 for s in stride):
        raise ShapeError(f"as_strided: Negative strides are not supported at the moment, got strides: "
                         f"{list(stride)}{where}")
    base = input._base if input._base is not None else input
    own = 0 if input._base is None else views.storage_offset(input) - (0 if input._value is not None
                                                                       else views.storage_offset(base))
    offset = own if storage_offset is None else int(storage_offset)
    if offset < 0:
        raise ArgumentRangeError(f"Tensor: invalid storage offset {offset}{where}")
    need = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else 0
    if need > base.numel():
        item = input.dtype.itemsize
        raise ShapeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, and "
                         f"itemsize {item} requiring a storage size of {need * item} are out of bounds for "
                         f"storage of size {base.numel() * item}{where}")
    detached = any(opdef.view is None for opdef, _, _ in input._chain)
    if detached and input.requires_grad:
        raise NotImplementedError(f"as_strided of a detached view that requires grad (x.detach()"
                                  f".requires_grad_()): flame reads the storage through the tensor it was "
                                  f"detached from; clone() it first{where}")
    idx = np.full(size, offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        idx += (np.arange(n, dtype=np.int64) * s).reshape((n,) + (1,) * (len(size) - d - 1))
    own = None if input._base is None or not input.requires_grad else views.positions(input)
    # torch's gradient reaches only input's own elements: the gradient of a view of the storage is torch's
    # where it reads no other element and the storage's gradient flows on to input's history
    if _flat_storage(base) and (own is None or base.requires_grad and np.isin(idx, own).all()):
        # torch's view of the storage: base's elements as a flat vector, read at the strides (a write into
        # it, or into a view of it, reaches input; its stride(), storage_offset() and is_contiguous() are
        # torch's); through detach(), a view of the detached storage, which carries no gradient; through
        # .data, of the storage through that `.data` (a write through it is not counted, as torch's)
        link = data_link(input)
        storage = (base._detach_as(link) if link is not None else base.detach()) if detached else base
        return apply("as_strided", storage.reshape(-1), size=size, stride=stride, offset=offset)
    # a copy: input's own elements read from input (its gradient is theirs), the others from the storage
    flat = (base if own is None and not detached else base.detach()).reshape(-1)[tensor(idx)]
    if own is not None:
        at = np.full(base.numel(), -1, dtype=np.int64)
        at[own.reshape(-1)] = np.arange(own.size, dtype=np.int64)
        mine = at[idx]
        flat = select(tensor(mine >= 0), input.reshape(-1)[tensor(np.maximum(mine, 0))], flat)
    return views.mark_strided_copy(flat)


def _flat_storage(base: Tensor) -> bool:
    """base's elements lie row-major in its storage (eagerly: its array is C-contiguous), so that its
    reshape(-1) is the storage as a flat view."""
    return base._value is not None or bool(base._data.flags.c_contiguous)


def _view_in_place(x: Tensor, name: str, spelling: str, view, swaps: tuple[int, int] | None = None) -> Tensor:
    """x after torch's in-place view op `name`, whose out-of-place result `view()` gives: x itself where
    its layout stays (squeezing no dim of size 1, swapping a dim with itself), with torch's errors
    first (a leaf that requires grad, a dim out of range); else a NotImplementedError."""
    trace = current_trace.get()
    if grad_enabled.get() and x.requires_grad and (x._node is None if x._value is None
                                                    else trace is not None and id(x) in trace.inputs_of):
        raise AutogradError(f"a leaf Variable that requires grad is being used in an in-place operation.\n"
                            f"  at {user_location()}")
    out = view()
    same = out.shape == x.shape if swaps is None else \
        dim_index(name, swaps[0], x.ndim) == dim_index(name, swaps[1], x.ndim)
    if same:
        return x
    raise NotImplementedError(f"{name}: flame does not change a tensor's sizes or strides in place; write "
                              f"{spelling}, which returns the view\n  at {user_location()}")


class TensorShapes:
    """Tensor's methods of the functions above, and unfold, fill_diagonal_, sum_to_size, H, mH."""

    __slots__ = ()

    def unfold(self, dimension: int, size: int, step: int):
        """The windows of `size` elements every `step` along dimension, as a new last dim (torch's
        Tensor.unfold: that dim becomes the number of windows). A view, as torch's: self's storage read at
        the windows' strides (as_strided); a copy, as as_strided's, of a view that requires grad."""
        d = dim_index("unfold", dimension, self.ndim)
        length = self.shape[d] if self.ndim else 1
        if size > length:
            raise ShapeError(f"maximum size for tensor at dimension {d} is {length} but size is {size}\n"
                             f"  at {user_location()}")
        if step <= 0:
            raise ShapeError(f"step is {step} but must be > 0\n  at {user_location()}")
        if self.ndim == 0:
            return self.reshape(1)
        n = (length - size) // step + 1
        base = self._base if self._base is not None else self
        if (self._base is None or not self.requires_grad) and _flat_storage(base):
            # torch's view: the windows as the storage read at self's strides (a write into it reaches self;
            # through detach() or .data, as_strided's view of the storage through them)
            st = views.strides(self)
            off = views.storage_offset(self) - (views.storage_offset(base) if self._value is None else 0)
            return as_strided(self, (*self.shape[:d], n, *self.shape[d + 1:], size),
                              (*st[:d], st[d] * step, *st[d + 1:], st[d]), off)
        idx = (np.arange(n)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
        picked = self.index_select(d, tensor(idx))
        shape = (*self.shape[:d], n, size, *self.shape[d + 1:])
        return views.mark_strided_copy(picked.reshape(shape).movedim(d + 1, -1), "unfold")

    def narrow_copy(self, dim: int, start: int, length: int):
        return narrow_copy(self, dim, start, length)

    def as_strided(self, size, stride, storage_offset: int | None = None):
        return as_strided(self, size, stride, storage_offset)

    def as_strided_(self, size, stride, storage_offset: int | None = None):
        """torch's in-place restride, which flame does not have: its tensors are not restrided in place
        (as_strided reads a copy)."""
        raise NotImplementedError(f"as_strided_: flame does not restride a tensor in place; use "
                                  f"x = x.as_strided(size, stride), which reads a copy\n  at {user_location()}")

    # torch's in-place view ops change the tensor's own sizes and strides while its storage stays;
    # flame's tensors take no new layout in place (a view's base is never restrided under its other
    # views), so where the layout would change they raise, naming the out-of-place spelling
    def squeeze_(self, dim=None):
        return _view_in_place(self, "squeeze_", "x = x.squeeze(...)",
                              lambda: self.squeeze() if dim is None else self.squeeze(dim))

    def unsqueeze_(self, dim: int):
        return _view_in_place(self, "unsqueeze_", "x = x.unsqueeze(...)", lambda: self.unsqueeze(dim))

    def transpose_(self, dim0: int, dim1: int):
        return _view_in_place(self, "transpose_", "x = x.transpose(...)", lambda: self.transpose(dim0, dim1),
                              swaps=(dim0, dim1))

    def swapaxes_(self, axis0: int, axis1: int):
        return _view_in_place(self, "swapaxes_", "x = x.swapaxes(...)", lambda: self.transpose(axis0, axis1),
                              swaps=(axis0, axis1))

    def swapdims_(self, dim0: int, dim1: int):
        return _view_in_place(self, "swapdims_", "x = x.swapdims(...)", lambda: self.transpose(dim0, dim1),
                              swaps=(dim0, dim1))

    def fill_diagonal_(self, fill_value, wrap: bool = False):
        """The main diagonal (of every dim at once) set to fill_value in place; a tall matrix's restarts
        below the square with wrap, as torch's (and numpy.fill_diagonal's)."""
        if self.ndim < 2:
            raise ShapeError(f"dimensions must larger than 1\n  at {user_location()}")
        if self.ndim > 2 and len(set(self.shape)) != 1:
            raise ShapeError(f"all dimensions of input must be of equal length\n  at {user_location()}")
        mask = np.zeros(self.shape, dtype=bool)
        np.fill_diagonal(mask, True, wrap=wrap)
        return self.masked_fill_(tensor(mask), fill_value)

    def sum_to_size(self, *size):
        """self summed down to size (which must broadcast to self's shape), as torch's: the gradient of
        a broadcast."""
        size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
        lead = self.ndim - len(size)
        if lead < 0 or any(s not in (1, t) for s, t in zip(size, self.shape[lead:])):
            raise ShapeError(f"size {{{list(size)}}} is not expandable to size {{{list(self.shape)}}}.\n"
                             f"  at {user_location()}")
        out = self.sum(tuple(range(lead))) if lead else self
        dims = tuple(i for i, (s, t) in enumerate(zip(size, out.shape)) if s == 1 and t != 1)
        return out.sum(dims, keepdim=True) if dims else out

    def slice_scatter(self, src, dim: int = 0, start=None, end=None, step: int = 1):
        return slice_scatter(self, src, dim, start, end, step)

    def select_scatter(self, src, dim: int, index: int):
        return select_scatter(self, src, dim, index)

    def diagonal_scatter(self, src, offset: int = 0, dim1: int = 0, dim2: int = 1):
        return diagonal_scatter(self, src, offset, dim1, dim2)

    def split_with_sizes(self, split_sizes, dim: int = 0):
        return split_with_sizes(self, split_sizes, dim)

    def unsafe_split(self, split_size: int, dim: int = 0):
        return unsafe_split(self, split_size, dim)

    def unsafe_split_with_sizes(self, split_sizes, dim: int = 0):
        return unsafe_split_with_sizes(self, split_sizes, dim)

    def unsafe_chunk(self, chunks: int, dim: int = 0):
        return unsafe_chunk(self, chunks, dim)

    def index_reduce(self, dim: int, index, source, reduce: str, *, include_self: bool = True):
        return index_reduce(self, dim, index, source, reduce, include_self=include_self)

    def put(self, index, source, accumulate: bool = False):
        return put(self, index, source, accumulate)

    def ger(self, vec2):
        return ger(self, vec2)

    def adjoint(self):
        return adjoint(self)

    def isreal(self):
        return isreal(self)

    def new_empty_strided(self, size, stride, dtype=None, device=None, requires_grad: bool = False,
                          layout=None, pin_memory: bool = False):
        """self.new_empty(size): flame's tensors are row-major, so the strides are accepted and not kept."""
        return self.new_empty(*size, dtype=dtype, device=device).requires_grad_(requires_grad)

    def new(self, *args, device=None):
        """torch's legacy constructor: x.new(2, 3) or x.new(flame.Size([2, 3])) an uninitialised tensor of self's
        dtype (flame's are zeros, as new_empty's), x.new([1, 2]) (a list or tuple: data) new_tensor's, x.new()
        an empty 1-d one, x.new(t) t itself for a tensor t of self's dtype; never requiring grad."""
        if len(args) == 1 and isinstance(args[0], Tensor):
            if args[0].dtype != self.dtype:
                raise TypeError(f"new(): expected a tensor of dtype {self.dtype} (got {args[0].dtype})")
            return args[0].detach()
        if len(args) == 1 and isinstance(args[0], (list, tuple)) and not isinstance(args[0], Size):
            return self.new_tensor(args[0], device=device)
        if len(args) == 1 and isinstance(args[0], Size):
            return self.new_empty(tuple(args[0]), device=device)
        for a in args:
            if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
                what = "new(): data must be a sequence" if len(args) == 1 else "new(): argument 'size' must be int"
                raise TypeError(f"{what} (got {type(a).__name__})")
        return self.new_empty(*(args or (0,)), device=device)

    def ndimension(self) -> int:
        return self.ndim

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    @property
    def H(self):  # noqa: N802  (torch's name)
        """The transpose of a matrix (the conjugate transpose of real numbers), as torch's Tensor.H."""
        if self.ndim > 2 or self.ndim == 1:
            raise ShapeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor.\n"
                             f"  at {user_location()}")
        return self.t() if self.ndim == 2 else self

    @property
    def mH(self):  # noqa: N802
        """The last two dims swapped (torch's Tensor.mH, the conjugate transpose of real matrices)."""
        if self.ndim < 2:
            raise ShapeError(f"tensor.mH is only supported on matrices or batches of matrices. Got {self.ndim}-D "
                             f"tensor.\n  at {user_location()}")
        return self.transpose(-2, -1)
