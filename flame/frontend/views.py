"""PyTorch's views. view/reshape (where the strides allow), transpose/t/permute, slicing, expand,
unsqueeze/squeeze, narrow, select, unbind and split/chunk return tensors that share their input's
storage and version counter: eagerly their arrays are NumPy/CuPy views of the input's array (made by
the op's `View.strided` trait, with no kernel), so a write through one is seen by the base and by
every other view of it, as in PyTorch.

A view remembers its base (the tensor that owns the storage, never itself a view), the view ops that
lead from the base to it (`_chain`) and the base's version when its value and gradient history were
derived (`_seen`). A write through a view updates the base's value and history
(frontend/indexing.py `assign`); another view of that base, used after the write, is derived again
from the base (dispatch.apply), so its value and its gradient follow the write. While tracing,
views are values like any other and the same bookkeeping makes a write through one reach its base.

This module holds what reads or links views without running an op: making an eager view, the
positions a view's elements take in its base, and PyTorch's layout queries (is_contiguous, stride,
storage_offset, data_ptr, untyped_storage)."""

from __future__ import annotations

import functools
import math

import numpy as np

from flame._identity import ByIdentity
from flame.errors import AutogradError, FlameError, OverlapError, ViewError
from flame.frontend.context import current_trace, user_location
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import is_ml_dtype
from flame.ir.ops._layouts import contiguous_strides, view_strides


def version(base: Tensor) -> int:
    """base's version as views see it: while tracing, a concrete tensor's counter is left alone (the
    compiled call bumps it when it runs) and the trace counts the writes into it."""
    trace = current_trace.get()
    if trace is None or base._value is not None:
        return base._vc[0]
    return base._vc[0] + trace.writes.get(id(base), 0)


def bump(t: Tensor, counted: bool = True) -> None:
    """Count a write into t's storage (its version, shared with its views). Not `counted`: a write
    through `.data`, which torch's version counter does not see; the counter notes the version it made
    (moved_since tells the others)."""
    trace = current_trace.get()
    if trace is None or t._value is not None:
        t._vc[0] += 1
        if not counted:
            t._vc.append(t._vc[0])
    else:
        trace.writes[id(t)] = trace.writes.get(id(t), 0) + 1


def moved_since(t: Tensor, ver: int) -> bool:
    """Whether a write torch's version counter counts changed t's storage since t was at version `ver`
    (a write through `.data` does not count)."""
    return any(v not in t._vc[1:] for v in range(ver + 1, t._vc[0] + 1))


def link(out: Tensor, src: Tensor, opdef, attrs: dict) -> None:
    """Make out a view of src's base: it shares the base's version counter and remembers how it was
    reached from the base (and, where src is one of several views a call returned, that: several_views)."""
    base = src._base if src._base is not None else src
    out._base, out._vc, out._seen = base, base._vc, version(base)
    out._chain = src._chain + ((opdef, attrs, out.shape),)
    out._inference = base._inference  # a view is an inference tensor where its base is, as torch's
    if opdef.view is not None and src in _SEVERAL:  # (not through detach() or .data: torch's are views of no call)
        _SEVERAL[out] = _SEVERAL.get(src)


_SEVERAL = ByIdentity()  # a view one of several a call returned, or a view of one -> (the call, the output's index)


def several_views(outs: tuple, call: str) -> tuple:
    """outs, the views one call returned (split, chunk, unbind: torch's node of several outputs, whose
    views, and views of them, may not be written in place while the write records a gradient:
    check_one_of_several)."""
    for k, o in enumerate(outs):
        if o._base is not None:
            _SEVERAL[o] = (call, k)
    return outs


def check_one_of_several(t: Tensor, what: str) -> None:
    """Refuse an in-place write that records a gradient into t where t is one of several views a call
    returned (or a view of one), with torch's error (its check comes before any other of the write's)."""
    got = _SEVERAL.get(t)
    if got is not None:
        call, k = got
        raise AutogradError(f"{what}: output {k} of {call} (or a view of it) is a view and is being modified in place. "
                            f"This view is the output of a function that returns multiple views. Such functions do "
                            f"not allow the output views to be modified in place: replace the in-place op by an "
                            f"out-of-place one (or write under `with flame.no_grad():`, or into a clone)"
                            f"\n  at {user_location()}")


def stale(x: Tensor) -> bool:
    """x is a view whose base was written (through the base or another view) since x was derived."""
    return x._base is not None and x._seen != version(x._base)


def _address(a) -> int:
    return a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data.ptr


def _extent(a) -> tuple[int, int]:
    """The byte range [lo, hi) a's elements occupy."""
    lo = hi = _address(a)
    for n, s in zip(a.shape, a.strides):
        if n == 0:
            return lo, lo
        lo, hi = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
    return lo, hi + a.itemsize


def _shares(a, b) -> bool:
    """a and b may share memory (their byte ranges overlap); a fresh copy never does."""
    (alo, ahi), (blo, bhi) = _extent(a), _extent(b)
    return alo < bhi and blo < ahi


shares = _shares


def strided_array(x: Tensor, opdef, attrs: dict, shape: tuple[int, ...]):
    """x's array seen through view op `opdef`, sharing x's storage; None where PyTorch's reshape would
    copy (the strides allow no view)."""
    a = x._data
    out = opdef.view.strided(a, shape, **attrs)
    if opdef.view.relabel and out.size > 1 and not _shares(out, a):  # only a reshape may have copied
        return None
    if isinstance(out, np.ndarray) and not out.flags.writeable and a.flags.writeable:
        # NumPy's broadcast_to is read-only; torch's expand is writable where no two elements share memory
        # (a new dim of size 1), and check_writable refuses a write into one where they do
        out = np.lib.stride_tricks.as_strided(a, out.shape, out.strides)
    return out


def view_error(x: Tensor, shape) -> ViewError:
    """PyTorch's error (a RuntimeError) for .view() of a tensor whose strides allow no such view."""
    return ViewError(
        f"view {list(x.shape)} -> {list(shape)}: view size is not compatible with input tensor's "
        f"size and stride (at least one dimension spans across two contiguous subspaces). Use "
        f".reshape(...) instead.\n  at {user_location()}"
    )


def positions(t: Tensor) -> np.ndarray:
    """For a view t: the flat position in its base of each of t's elements (int64, t's shape)."""
    pos = np.arange(math.prod(t._base.shape), dtype=np.int64).reshape(t._base.shape)
    for opdef, attrs, shape in t._chain:
        if opdef.view is not None:  # an op without the trait in a chain is detach's: the same elements
            pos = opdef.view.strided(pos, shape, **attrs)
    return pos


def overlap_error(what: str) -> FlameError:
    return OverlapError(f"{what}: unsupported operation: more than one element of the written-to tensor refers to a "
                      f"single memory location (an expanded tensor). Please clone() the tensor before performing "
                      f"the operation.\n  at {user_location()}")


def overlapping(t: Tensor) -> bool:
    """t is a view some of whose elements share a memory location (an expanded tensor: a stride of 0
    over a dim of more than one element; no other view op makes two elements meet)."""
    if t._base is None or t.numel() == 0:
        return False
    shape, steps = (t._data.shape, t._data.strides) if t._value is None else _layout(t)
    return any(s == 0 and n > 1 for n, s in zip(shape, steps))


_STRIDED_COPIES = ByIdentity()  # a copy torch's op would view -> the op


def mark_strided_copy(t: Tensor, op: str = "as_strided") -> Tensor:
    """Record that t is what `op` (as_strided, Tensor.unfold) returned: a copy of the elements torch's
    would view, so that a write into it (or into a view of it), which torch's would make into the input,
    is refused. t may be a view of the new tensor the gather made (a reshape of it): that tensor is
    marked too."""
    for u in (t, t._base):
        if u is not None:
            _STRIDED_COPIES[u] = op
    return t


def check_not_strided_copy(t: Tensor, what: str) -> None:
    """Refuse a write into as_strided's or unfold's result or a view of it (mark_strided_copy): in torch
    it writes into the input's storage; in flame it would silently write into a copy."""
    for u in (t, t._base):
        op = None if u is None else _STRIDED_COPIES.get(u)
        if op is not None:
            raise ViewError(f"{what}: a write into the result of {op}, which in flame is a copy of the "
                            f"elements it reads, not a view: the write would not reach the input. Write into the "
                            f"input (its views, index_put_ or scatter_), or clone() the result first\n  at "
                            f"{user_location()}")


def check_writable(t: Tensor, what: str, fill: bool, one_value: bool | None = None) -> None:
    """Refuse a write into a view whose elements share memory (expand), as PyTorch does, unless it is a
    fill (fill_, zero_, masked_fill_ or item assignment of a number: the same value wherever elements
    share a location, which PyTorch writes too). Into one whose windows overlap (unfold with a step
    below its size, as_strided), PyTorch writes each element in its kernel's order, a shared location
    taking the op once per element that reaches it (x.unfold(1, 3, 2).mul_(2) doubles it twice): flame,
    which writes each location once, refuses it too, with its own message, unless the write puts one value
    everywhere (`one_value`: a fill, recorded or not; `fill` by default)."""
    if not fill and overlapping(t):
        raise overlap_error(what)
    if not (fill if one_value is None else one_value) and t._base is not None and t.numel() > 1 \
            and _windows_overlap(t):
        raise OverlapError(f"{what}: more than one element of the written-to tensor refers to a single memory "
                           f"location (overlapping windows of unfold or as_strided): torch computes the write "
                           f"element by element in its kernel's order, which flame does not reproduce. Write "
                           f"into a clone(), or into the base\n  at {user_location()}")


def _windows_overlap(t: Tensor) -> bool:
    """Two of t's elements (a view with no stride of 0) share a memory location. Dims ordered by stride, each
    stride past the span of the smaller ones leaves none (the common case, answered without enumerating)."""
    shape, steps = (t._data.shape, [s // t._data.itemsize for s in t._data.strides]) if t._value is None \
        else _layout(t)
    dims = sorted((abs(s), n) for n, s in zip(shape, steps) if n > 1)
    span = 0
    for s, n in dims:
        if s <= span:
            break
        span += (n - 1) * s
    else:
        return False
    offsets = np.zeros((), dtype=np.int64)
    for n, s in zip(shape, steps):
        offsets = np.add.outer(offsets, np.arange(n, dtype=np.int64) * s)
    return np.unique(offsets).size < offsets.size


# ---- a write's inputs that share its destination's memory (PyTorch's assert_no_partial_overlap) ----------

def _dense(shape, steps) -> bool:
    """The elements fill a block of memory with no gap and no repeat (torch's is_non_overlapping_and_dense):
    the dims of more than one element, ordered by stride, are row-major."""
    need = 1
    for n, s in sorted(((n, s) for n, s in zip(shape, steps) if n != 1), key=lambda d: d[1]):
        if s != need:
            return False
        need *= n
    return True


def _eager_geometry(t: Tensor) -> tuple[int, tuple, tuple]:
    """(address of t's first element in bytes, shape, strides in elements) of an eager tensor."""
    a = t._data
    return _address(a), a.shape, tuple(s // a.itemsize for s in a.strides)


def _traced_geometry(t: Tensor) -> tuple[int, tuple, tuple]:
    """(bytes from its base's first element, shape, strides in elements) of a tensor as PyTorch lays it
    out (frontend/views.py _layout), from its base (row-major) through its view ops."""
    offset, shape, steps = _geometry(t)
    return offset * t.dtype.itemsize, tuple(shape), tuple(steps)


def overlap_status(out: Tensor, x) -> str:
    """How input x's memory meets that of out, the tensor an op writes, as PyTorch's get_overlap_status:
    "full" (the same elements in the same layout), "partial", "no", or "too_hard" (either has gaps or
    repeats, which PyTorch does not examine). Cheap where x cannot share out's storage."""
    if x is out:
        return "full"
    if not isinstance(x, Tensor):
        return "no"
    traced = out._value is not None or x._value is not None
    if traced and (out._base if out._base is not None else out) is not (x._base if x._base is not None else x):
        return "no"  # (asked first: cheaper than the sizes below)
    if x.numel() == 0 or out.numel() == 0:
        return "no"
    if not traced:  # eager: the arrays' own memory
        if not _shares(out._data, x._data):
            return "no"
        (a, ashape, asteps), (b, bshape, bsteps) = _eager_geometry(out), _eager_geometry(x)
    else:  # traced: the layouts views.py keeps, from the one base both share
        (a, ashape, asteps), (b, bshape, bsteps) = _traced_geometry(out), _traced_geometry(x)
    if not (_dense(ashape, asteps) and _dense(bshape, bsteps)):
        return "too_hard"
    a_end, b_end = a + out.numel() * out.dtype.itemsize, b + x.numel() * x.dtype.itemsize
    if (a, a_end) == (b, b_end):
        same = [s for n, s in zip(ashape, asteps) if n != 1] == [s for n, s in zip(bshape, bsteps) if n != 1]
        return "full" if same else "partial"
    return "partial" if a < b_end and b < a_end else "no"


def same_data(out: Tensor, x) -> bool:
    """x is out's own memory: the same elements, shape, strides and dtype (PyTorch's copy_ writes
    nothing then: copying a tensor onto itself, an expanded one included, is refused by no check)."""
    if x is out:
        return True
    if not isinstance(x, Tensor) or x.dtype != out.dtype or tuple(x.shape) != tuple(out.shape):
        return False
    traced = out._value is not None or x._value is not None
    if traced:
        if (out._base if out._base is not None else out) is not (x._base if x._base is not None else x):
            return False
        return _traced_geometry(out) == _traced_geometry(x)
    return _shares(out._data, x._data) and _eager_geometry(out) == _eager_geometry(x)


def partial_overlap_error(what: str) -> OverlapError:
    return OverlapError(f"{what}: unsupported operation: some elements of the input tensor and the written-to "
                        f"tensor refer to a single memory location. Please clone() the tensor before performing "
                        f"the operation.\n  at {user_location()}")


def check_overlap(out: Tensor, inputs, what: str, full: bool = False) -> None:
    """Refuse a write into out that reads an input sharing part of out's memory, as PyTorch does (its
    result would depend on the order the elements are written in); full: refuse an input sharing all
    of it too (torch's index_add_, index_copy_, scatter_, index_put_)."""
    bad = ("partial", "full") if full else ("partial",)
    for x in inputs:
        if isinstance(x, Tensor) and overlap_status(out, x) in bad:
            raise partial_overlap_error(what)


# ---- PyTorch's layout queries ----------------------------------------------------------------------------

def strides(t: Tensor) -> tuple[int, ...]:
    """Strides in elements, as torch's Tensor.stride(): the layout its view ops give it from its base
    (_geometry), eager or traced."""
    return tuple(int(s) for s in _geometry(t)[2])


def is_contiguous(t: Tensor) -> bool:
    """Row-major with no gaps (dims of size 1 may have any stride), as torch's is_contiguous()."""
    if t.numel() == 0:
        return True
    _, shape, steps = _geometry(t)
    return all(s == want for n, s, want in zip(shape, steps, contiguous_strides(shape)) if n != 1)


def _owner(a):
    """The array that owns a's memory (NumPy: the end of the .base chain, through the holder object
    np.lib.stride_tricks.as_strided leaves as an array's base)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        nxt = a.base if isinstance(a.base, np.ndarray) else getattr(a.base, "base", None)
        if not isinstance(nxt, np.ndarray):
            break
        a = nxt
    return a


def _storage_start(a) -> int:
    return _address(_owner(a)) if isinstance(a, np.ndarray) else a.data.mem.ptr


def data_ptr(t: Tensor) -> int:
    """The address of t's first element; 0 where it has none, as torch's."""
    t._need_concrete("data_ptr()")
    return _address(t._data) if t._data.size else 0


def _own_offset(a) -> int:
    """How many elements into its storage array a starts."""
    return (_address(a) - _storage_start(a)) // a.itemsize


def storage_offset(t: Tensor) -> int:
    """How many elements into its storage t starts: its base's start plus its view ops' offset (_geometry)."""
    offset = int(_geometry(t)[0])
    if t._value is not None:
        return offset
    return offset + _own_offset((t._base if t._base is not None else t)._data)


class UntypedStorage:
    """The memory a tensor and its views share (torch.UntypedStorage's queries): data_ptr(), nbytes(),
    size(); two tensors share storage when their storages' data_ptr() agree."""

    def __init__(self, array):
        self._array = array

    def data_ptr(self) -> int:
        return _storage_start(self._array)

    def nbytes(self) -> int:
        owner = _owner(self._array)
        return int(owner.nbytes) if isinstance(owner, np.ndarray) else int(owner.data.mem.size)

    def size(self) -> int:
        return self.nbytes()

    def __len__(self) -> int:
        return self.nbytes()


def untyped_storage(t: Tensor) -> UntypedStorage:
    t._need_concrete("untyped_storage()")
    return UntypedStorage(t._data)


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _as_bits(a):
    """a's elements as unsigned integers of their width where the dtype is not one NumPy/CuPy compute
    in (bfloat16 and the float8s from ml_dtypes): copies then move bits, which every array library can."""
    return a.view(_BITS[a.itemsize]) if is_ml_dtype(a.dtype) else a


def contiguous_array(t: Tensor):
    """t's array, row-major: itself, or a copy of a strided view (what executors and kernels read)."""
    a = t._data
    return a if a.flags.c_contiguous else _as_bits(a).copy().view(a.dtype)


def write(t: Tensor, src: Tensor) -> None:
    """Copy src's elements into t's storage (through t's strides, when t is a view)."""
    _as_bits(t._data)[...] = _as_bits(src._data)


def _aliases(out, inputs) -> bool:
    """out is one of the tensors in inputs, or a view of one's storage."""
    for x in inputs:
        if isinstance(x, Tensor) and (out is x or out._base is not None and (out._base is x or out._base is x._base)):
            return True
    return False


def new_tensor(fn):
    """fn, whose result PyTorch makes a new tensor (a pooling, an interpolation, a pad, a repeat),
    returning a copy where flame builds the result from view ops alone and it would share an input's
    storage (an identity pooling, a pad of zeros): a write into the result never reaches the input. A
    result flame builds as a strided view of its own intermediate (a permute back after a matmul along
    one axis) is copied too: torch's is contiguous, so a view of it (flatten, view) shares its memory
    and sees a later write into it."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        out = fn(*args, **kwargs)
        inputs = (*args, *kwargs.values())

        def own(o):
            if not isinstance(o, Tensor):
                return o
            return o.clone() if _aliases(o, inputs) or o._base is not None and not is_contiguous(o) else o

        if isinstance(out, tuple):  # (values, indices), a named tuple or a plain one
            return type(out)(*map(own, out)) if hasattr(out, "_fields") else tuple(map(own, out))
        return own(out)

    return call


# id(a view's chain) -> (the chain, its base's shape, _geometry's answer): a chain never changes once made
# (a view derived again gets a new one), and the views of one tensor (q, k, v of a packed projection) ask
# for the layout of the same chain each
_GEOMETRY: dict[int, tuple] = {}


def _base_strides(t: Tensor) -> tuple[int, ...]:
    """The strides, in elements, of a tensor that is no view: row-major while tracing; eagerly its array's
    (a channels-last tensor's are not row-major), row-major where it has no element (NumPy's are 0)."""
    a = t._data if t._value is None else None
    if a is None or a.size == 0:
        return contiguous_strides(t.shape)
    return tuple(s // a.itemsize for s in a.strides)


def _geometry(t: Tensor) -> tuple[int, tuple[int, ...], list[int]]:
    """(offset from its base's first element, shape, strides), in elements, of a tensor as PyTorch lays it
    out: a tensor that is no view as _base_strides; a view, its base's layout through the view ops that
    made it, each by PyTorch's rule for that op (the ops' View `layout`), eager and traced alike."""
    if t._base is None:
        return 0, t.shape, list(_base_strides(t))
    chain, base_shape, base_strides = t._chain, t._base.shape, _base_strides(t._base)
    known = _GEOMETRY.get(id(chain))
    if known is not None and known[0] is chain and known[1] == (base_shape, base_strides):
        offset, shape, strides = known[2]
        return offset, shape, list(strides)
    offset, shape, strides = 0, base_shape, list(base_strides)
    for opdef, attrs, out in chain:
        if opdef.view is None:  # detach's: the same layout
            continue
        moved, strides = opdef.view.layout(shape, strides, out, **attrs)
        offset, shape = offset + moved, out
    if len(_GEOMETRY) >= 4096:
        _GEOMETRY.clear()
    # (holds chain: its id stays its)
    _GEOMETRY[id(chain)] = (chain, (base_shape, base_strides), (offset, shape, tuple(strides)))
    return offset, shape, strides


def _layout(t: Tensor) -> tuple[tuple[int, ...], list[int]]:
    """(shape, strides in elements) of a traced tensor as PyTorch would lay it out (_geometry)."""
    return _geometry(t)[1:]


def traced_view(x: Tensor, opdef, shape) -> bool:
    """Whether view op `opdef` of traced tensor x to `shape` is a view in PyTorch (a reshape of a
    layout that allows none copies, as eagerly). A detached tensor (detach, while tracing) is a view
    of what it was detached from, linked with the stop_gradient op in its chain."""
    if not opdef.view.relabel or x._base is None:
        return True
    return view_strides(*_layout(x), shape) is not None
