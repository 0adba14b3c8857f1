"""Tensor indexing with PyTorch's semantics, built from IR primitives.

Reads (`x[key]`): ints, slices (any step, negative too), None, Ellipsis, Python bools (torch's 0-d
masks: x[True] is x[None], x[False] an empty new dim, also compiled), integer tensors / lists
(advanced indexing: several index tensors broadcast together and pick elements pairwise; their result
dimensions replace them where they are adjacent, else come first, as in PyTorch) and boolean masks
(`x[mask]`: the selected elements in row-major order). A mask's result has as many elements as the
mask has True values, which the graph cannot know while tracing, so `x[mask]` reads work eagerly and
raise TraceError inside @flame.compile (use flame.where / masked_fill there).

Integer indices count from the end when negative, in the value and in the gradient: [-n, n) is
in bounds. Eagerly an index outside raises IndexValueError at the user's line; inside
@flame.compile (values unknown while tracing) the reference executor raises it when the step runs
and a CUDA kernel stops at a device-side assertion, as PyTorch on CUDA (frontend/index_ops.py).

Writes (`x[key] = v`, index_put) are functional (ARCHITECTURE.md "Pure IR"): the new tensor is built from where /
scatter and the Tensor is rebound to it (copy_), so a compiled step that writes into an argument
returns it as an aliased output. `x[mask] = v` is `where(mask, v, x)` (v a scalar, or one value per
True element in order), which also works while tracing; other keys scatter v at the flat positions
the key selects. Duplicate positions: the last write in row-major order wins, eagerly and compiled
(PyTorch's CPU result; PyTorch leaves it unspecified on CUDA), and every write, a losing duplicate
too, gets the gradient of its position (PyTorch's index_put). index_put(accumulate=True) adds."""

from __future__ import annotations

import math
import warnings

import numpy as np

from flame.errors import AutogradError, DTypeError, IndexingError, ShapeError, TraceError
from flame.frontend.context import current_trace, enable_grad, grad_enabled, user_location, user_stacklevel, write_hook
from flame.frontend.counted_writes import mark as mark_counted
from flame.frontend.counted_writes import mark_storage, note_result, read_storage_live
from flame.frontend.creation import arange
from flame.frontend.data_writes import count_write_through, mark_live, through_data
from flame.frontend.dispatch import apply, broadcast, fresh, history_only
from flame.frontend.hooks import hand_over_hooks
from flame.frontend.index_ops import check_indices, wrap_negative
from flame.frontend.leaf_writes import keep_old_values
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import full
from flame.frontend.views import (
    bump,
    check_not_strided_copy,
    check_one_of_several,
    check_overlap,
    check_writable,
    mark_strided_copy,
    overlap_status,
    overlapping,
    positions,
    same_data,
    stale,
    version,
    write,
)
from flame.ir.dtypes import boolean, i64, u8
from flame.ir.ops._shapes import broadcast_shapes


def _key(key) -> tuple:
    """The index as a tuple of per-dim parts. A list holding a sequence, a tensor, a slice, None or
    Ellipsis (and shorter than 32) is such a tuple, as torch (and NumPy once) reads it:
    x[[[1, 0], [0, 0]]] is x[[1, 0], [0, 0]]."""
    if isinstance(key, tuple):
        return key
    if isinstance(key, list) and len(key) < 32 and any(
            k is None or k is Ellipsis or isinstance(k, (list, tuple, range, slice, np.ndarray, Tensor)) for k in key):
        return tuple(key)
    return (key,)


def _as_index(k):
    """Lists and arrays become index tensors, and so do a range and a tuple inside the key, sequences
    as torch reads them (`x[range(n), y]`, `x[(0, 2), 1]`); NumPy integers become ints; a uint8 index is a
    mask, as torch's (deprecated there, with its warning)."""
    if isinstance(k, (range, tuple)):
        k = list(k)
    if isinstance(k, (list, np.ndarray)):
        k = Tensor(np.asarray(k) if not isinstance(k, list) or k else np.zeros(0, np.int64))
    if isinstance(k, Tensor) and k.dtype == u8:
        warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
                      "instead.", UserWarning, stacklevel=user_stacklevel())
        return k.to(boolean)
    if isinstance(k, np.integer):
        return int(k)
    if isinstance(k, Tensor) and not (k.dtype.is_int or k.dtype == boolean):
        raise IndexingError(f"tensors used as indices must be integer or bool tensors, got {k.dtype}"
                         f"\n  at {user_location()}")
    if isinstance(k, np.bool_):
        raise ShapeError(f"a NumPy bool is not a supported index, as in torch (use a Python bool or a bool tensor)"
                         f"\n  at {user_location()}")
    return k  # a Python bool: torch's 0-d bool mask, known while tracing (_bool_index)


def _eager_int(k):
    """A concrete 0-d integer tensor index as the int it holds (torch selects with it: a view); any
    other index as it is. While tracing the index stays a tensor (an input whose value may change)."""
    if isinstance(k, Tensor) and k.ndim == 0 and k.dtype.is_int and k._value is None:
        return int(k.item())
    return k


def _expand_ellipsis(key: tuple, rank: int) -> tuple:
    n_real = sum(_width(k) for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise ShapeError("an index can only have one ellipsis")
    if any(k is Ellipsis for k in key):  # `in`/.index() would call Tensor.__eq__ on tensor indices
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (rank - n_real) + key[i + 1:]
    return key + (slice(None),) * (rank - sum(_width(k) for k in key if k is not None))


def _width(k) -> int:
    """How many dimensions of the tensor an index consumes (a bool mask: its rank; a Python bool: none)."""
    if isinstance(k, bool):
        return 0
    return k.ndim if isinstance(k, Tensor) and k.dtype == boolean else 1


def _masks_to_indices(t, key: tuple) -> tuple:
    """A bool mask index is its nonzero() integer indices (one per mask dimension), eagerly."""
    out, dim = [], 0
    for k in key:
        if isinstance(k, bool):
            out.append(_bool_index(k, key))
            continue
        if isinstance(k, Tensor) and k.dtype == boolean:
            if k._value is not None or t._value is not None:
                raise TraceError(f"x[mask] with a boolean mask has as many elements as the mask has True values, "
                                 f"which is not known while tracing @flame.compile; use flame.where(mask, x, 0) "
                                 f"or x.masked_fill(~mask, 0) there\n  at {user_location()}")
            if k.ndim == 0:
                out.append(_bool_index(bool(k.item()), key))
                continue
            want = t.shape[dim: dim + k.ndim]
            if tuple(k.shape) != tuple(want):
                raise ShapeError(f"the shape of the mask {list(k.shape)} does not match the shape of the indexed "
                                 f"tensor {list(t.shape)} at dimension {dim}\n  at {user_location()}")
            out.extend(Tensor(a.astype(np.int64)) for a in np.nonzero(k.numpy()))
            dim += k.ndim
        else:
            out.append(k)
            dim += k is not None
    return tuple(out)


_EMPTY_NEW_AXIS = slice(0, 0)  # what a 0-d False mask stands for: a new dim of size 1, read empty


class _NewAxisIndex:
    """A new dim of size 1 read by an index tensor: a 0-d bool mask among index tensors."""

    __slots__ = ("index",)

    def __init__(self, index: Tensor):
        self.index = index


def _bool_index(keep: bool, key: tuple):
    """A 0-d bool mask (a Python bool, or a 0-d bool tensor's value) as torch reads it: its nonzero()
    is a new dim of size 1 (True) or 0 (False) that consumes no dim. Alone, a new axis (None) read whole
    or empty; among index tensors or other 0-d masks, an index tensor [0] or [] on a new axis, broadcast
    with the others (torch unsqueezes and indexes with that tensor in every case; alone, None is the same)."""
    masks = sum(isinstance(j, bool) or isinstance(j, Tensor) and j.dtype == boolean and j.ndim == 0 for j in key)
    if masks > 1 or any(isinstance(j, Tensor) and j.ndim for j in key):
        return _NewAxisIndex(Tensor(np.zeros(int(keep), np.int64)))
    return None if keep else _EMPTY_NEW_AXIS


def _insert_new_axes(t, key: tuple):
    """x[..., None, ...]: unsqueeze first, then index the new axis with a full slice."""
    out, d = [], 0
    for k in key:
        if k is None or k is _EMPTY_NEW_AXIS or isinstance(k, _NewAxisIndex):
            t = apply("unsqueeze", t, axes=[d])
            k = slice(None) if k is None else k.index if isinstance(k, _NewAxisIndex) else k
        out.append(k)
        d += 1
    return t, tuple(out)


def getitem(t, key):
    key = tuple(_as_index(k) for k in _key(key))
    if current_trace.get() is None:  # eagerly a 0-d integer tensor is its value: x[i] is a view, as torch's
        key = tuple(_eager_int(k) for k in key)
    key = _expand_ellipsis(key, t.ndim)
    if sum(_width(k) for k in key if k is not None) > t.ndim:
        raise IndexingError(f"too many indices for a tensor of shape {list(t.shape)}\n  at {user_location()}")
    key = _masks_to_indices(t, key)
    t, key = _insert_new_axes(t, key)
    starts, stops, steps, flips, drop, advanced, picks = [], [], [], [], [], [], []
    for axis, (k, n) in enumerate(zip(key, t.shape)):
        if isinstance(k, Tensor) and k.ndim == 0:  # torch: a 0-d integer tensor selects, as an int
            picks.append((axis, k))
            drop.append(axis)
            k = slice(None)
        if isinstance(k, Tensor):
            advanced.append((axis, k))
            k = slice(None)
        if isinstance(k, int):
            if not -n <= k < n:
                raise IndexingError(f"index {k} is out of bounds for dimension {axis} with size {n}"
                                    f"\n  at {user_location()}")
            k = k % n
            starts.append(k), stops.append(k + 1), steps.append(1)
            drop.append(axis)
            continue
        if not isinstance(k, slice):
            raise ShapeError(f"unsupported index {k!r}\n  at {user_location()}")
        a, z, s = k.indices(n)
        if s < 0:
            flips.append(axis)
            a, z, s = n - 1 - a, n - 1 - z, -s  # the same elements, read from the flipped axis
        starts.append(a), stops.append(max(a, z)), steps.append(s)
    out = t
    if flips:
        out = apply("flip", out, axes=flips)
    if (starts, stops, steps) != ([0] * t.ndim, list(t.shape), [1] * t.ndim):
        out = apply("slice", out, starts=starts, stops=stops, steps=steps)
    for axis, k in picks:
        check_indices("", k, out.shape[axis], axis, negative=True)
        out = apply("index_select", out, wrap_negative(k, out.shape[axis]).reshape(1), axis=axis)
    if drop:  # PyTorch selects with ints first: advanced indices act on the remaining axes
        out = apply("squeeze", out, axes=drop)
        advanced = [(axis - sum(d < axis for d in drop), k) for axis, k in advanced]
    if advanced:
        return _advanced(out, advanced)
    if flips:  # a copy read in reverse (torch refuses the step): a write into it would not reach t
        return mark_strided_copy(out, "a slice with a negative step")
    # a traced 0-d index tensor selects a copy where torch's select is a view: a write into it is refused
    return mark_strided_copy(out, "x[i] with a 0-d index tensor while tracing") if picks else out


def _advanced(x, advanced: list):
    """Integer index tensors on axes A of x: broadcast them, read the elements they name pairwise."""
    axes = [a for a, _ in advanced]
    idxs = [k for _, k in advanced]
    for a, k in advanced:
        check_indices("", k, x.shape[a], a, negative=True)
    try:
        batch = broadcast_shapes("index", [k._type() for k in idxs])
    except ShapeError as e:  # torch's IndexError
        raise IndexingError(f"shape mismatch: indexing tensors could not be broadcast together ({e})"
                            f"\n  at {user_location()}") from None
    if axes != list(range(axes[0], axes[0] + len(axes))):  # not adjacent: their result goes first
        x = x.permute(*axes, *[d for d in range(x.ndim) if d not in axes])
        axes = list(range(len(axes)))
    p = axes[0]
    sizes = [x.shape[a] for a in axes]
    if len(axes) == 1:
        flat = wrap_negative(idxs[0], sizes[0])
    else:  # one index into the merged axes: sum of (idx_k wrapped to [0, n_k)) * stride_k
        flat = None
        for k, n, stride in zip(idxs, sizes, _strides(sizes)):
            term = wrap_negative(k.to(i64), n) * stride
            flat = term if flat is None else flat + term
        x = x.reshape(*x.shape[:p], math.prod(sizes), *x.shape[p + len(axes):])
    flat = flat.broadcast_to(batch).reshape(-1)
    out = apply("index_select", x, flat, axis=p)
    return out.reshape(*out.shape[:p], *batch, *out.shape[p + 1:])


def _strides(sizes: list[int]) -> list[int]:
    out, s = [], 1
    for n in reversed(sizes):
        out.append(s)
        s *= n
    return out[::-1]


# ---- writes -------------------------------------------------------------------------------------------

def setitem(t, key, value) -> None:
    """x[key] = value, as a functional update that rebinds x (see the module docstring)."""
    fill = not isinstance(value, Tensor)  # one number: PyTorch writes it into an expanded view too
    keys = _key(key)
    key = keys if len(keys) != 1 or isinstance(key, tuple) else key
    if overlapping(t) and not any(isinstance(_as_index(k), Tensor) for k in keys):
        # only the elements the key names, as torch's x[key].copy_(v): the others share their memory
        sub = getitem(t, key)
        if fill:  # torch's copy_ of the number: refused where the named elements share memory, as any copy_
            check_writable(sub, "x[key] = value", fill=False)
            sub.fill_(value)
        else:  # torch's copy_to: its copy_ of a tensor onto its own memory writes nothing (Tensor.copy_ says
            own = _without_leading_ones(value).broadcast_to(sub.shape)  # what it checks), of another refuses it
            sub.copy_(own if same_data(sub, own) else value)
        return
    if not fill and overlap_status(t, value) != "no":
        _check_shared_value(t, key, keys, _without_leading_ones(value))
    if not fill:
        check_index_put_dtype("x[key] = value", t, keys, value)
    value = value if isinstance(value, Tensor) else _scalar_like(value, t)
    if value.dtype != t.dtype:
        value = value.to(t.dtype)
    value = _without_leading_ones(value)
    k = _as_index(key) if not isinstance(key, tuple) else None
    base = stand_in(t, value)
    if isinstance(k, Tensor) and k.dtype == boolean:
        new = masked_write(base, k, value)
    else:
        new = _scatter_write(base, key, value)
    assign(t, new, fill=fill)


def _without_leading_ones(value: Tensor) -> Tensor:
    """value without its leading dims of size 1, as torch drops them before broadcasting a value to x[key]
    (a view of its own when it drops any: torch checks that view, not value itself, against x's memory)."""
    lead = next((d for d, n in enumerate(value.shape) if n != 1), value.ndim)
    return value.reshape(value.shape[lead:]) if lead else value


def _check_shared_value(t, key, keys: tuple, value) -> None:
    """torch's refusal of x[key] = v where v shares x's memory: with index tensors the write is
    index_put_ (refused where v shares any of the written memory; a bool mask and one element is
    masked_fill_, which reads the value first); else it is x[key].copy_(v) with v broadcast to x[key]'s
    shape first (refused where v, not expanded, shares part of x[key]'s memory)."""
    index = [k for k in map(_as_index, keys) if isinstance(k, Tensor)]
    if index:
        if not (len(keys) == 1 and index[0].dtype == boolean and value.ndim == 0):
            check_overlap(t, (value,), "x[key] = value", full=True)
        return
    dst = getitem(t, key)
    if dst.numel() == value.numel():
        check_overlap(dst, (value,), "x[key] = value")


def check_index_put_dtype(what: str, t, keys: tuple, value, accumulate: bool = False) -> None:
    """torch's refusal of a value tensor of another dtype than t's in a write at index tensors (x[idx] = v,
    index_put_), but where torch's write is masked_fill_ (one element written at a single bool mask of one
    dim or more), which converts it. A 0-d integer tensor selects as an int does: no index tensor."""
    if not isinstance(value, Tensor) or value.dtype == t.dtype:
        return
    masks = [_is_mask(k) for k in keys if isinstance(k, (list, tuple, range, np.ndarray, Tensor)) and not _is_int0d(k)]
    if not masks or not accumulate and value.numel() == 1 and masks == [True]:
        return
    raise DTypeError(f"{what}: Index put requires the source and destination dtypes match, got {t.dtype} for the "
                     f"destination and {value.dtype} for the source (as in PyTorch)\n  at {user_location()}")


def _is_int0d(k) -> bool:
    return isinstance(k, Tensor) and k.ndim == 0 and k.dtype.is_int


def _is_mask(k) -> bool:
    """k (an index tensor, or a sequence or array) is a bool (or uint8) mask of one dim or more."""
    if isinstance(k, Tensor):
        return k.ndim > 0 and k.dtype in (boolean, u8)
    a = np.asarray(k)
    return a.ndim > 0 and a.dtype in (np.bool_, np.uint8)


def _scalar_like(value, t):
    if not isinstance(value, (int, float, bool, np.number, np.bool_)):
        return Tensor(value, t.dtype)
    return full((), value, t.dtype)


def _masked_add(t, mask, value):
    """t with value (a number, or a row broadcast over mask's trailing dims) added where mask is True."""
    if tuple(mask.shape) != tuple(t.shape[: mask.ndim]):
        raise ShapeError(f"the shape of the mask {list(mask.shape)} does not match the shape of the indexed tensor "
                         f"{list(t.shape)}\n  at {user_location()}")
    trailing = t.shape[mask.ndim:]
    broadcast("index_put", [value._type(), t._type().with_shape(trailing)])
    return apply("where", mask.reshape(*mask.shape, *([1] * len(trailing))), t + value, t)


def masked_write(t, mask, value):
    """where(mask, value, t): value broadcasts against t, or holds one row per True element of mask."""
    if tuple(mask.shape) != tuple(t.shape[: mask.ndim]):
        raise ShapeError(f"the shape of the mask {list(mask.shape)} does not match the shape of the indexed tensor "
                         f"{list(t.shape)}\n  at {user_location()}")
    trailing = t.shape[mask.ndim:]
    wide = mask.reshape(*mask.shape, *([1] * len(trailing)))
    if value.ndim == 0 or value.numel() == 1 and value.ndim <= len(trailing) + 1:
        return apply("where", wide, value.reshape(()), t)
    if value.ndim <= len(trailing):  # one row for every selected position
        broadcast("index_put", [value._type(), t._type().with_shape(trailing)])
        return apply("where", wide, value.broadcast_to(t.shape), t)
    # the k-th True position of the mask takes value[k]
    if mask._value is None and value._value is None:
        count = int(mask.numpy().sum())
        if value.shape[0] != count:
            raise ShapeError(f"x[mask] = v: v has {value.shape[0]} rows but the mask selects {count} elements"
                             f"\n  at {user_location()}")
    value = value.broadcast_to(value.shape[0], *trailing) if value.shape[1:] != trailing else value
    flat = mask.reshape(-1)
    pos = apply("where", flat, flat.to(i64).cumsum(0) - 1, 0)
    rows = apply("index_select", value, pos, axis=0).reshape(t.shape)
    return apply("where", wide, rows, t)


def _scatter_write(t, key, value):
    """Scatter value at the flat positions x[key] reads (the flat indices of the key, read from an
    arange); the last write to a position wins (the scatter op)."""
    positions = getitem(arange(t.numel()).reshape(t.shape), key)
    src = value.broadcast_to(positions.shape).reshape(-1)
    return apply("scatter", t.reshape(-1), positions.reshape(-1), src, axis=0).reshape(t.shape)


def index_put(t, indices, values, accumulate: bool = False):
    """torch.index_put: t with values written (accumulate=False; a repeated position keeps the last)
    or added (accumulate=True) at the elements the tuple of index tensors selects, as t[indices]."""
    if not isinstance(indices, (tuple, list)):
        raise ShapeError(f"index_put: indices must be a tuple of tensors, got {type(indices).__name__}"
                         f"\n  at {user_location()}")
    check_index_put_dtype("index_put", t, tuple(indices), values, accumulate)
    values = values.to(t.dtype) if isinstance(values, Tensor) else _scalar_like(values, t)
    key = tuple(indices)
    k = _as_index(key[0]) if len(key) == 1 else None
    mask = isinstance(k, Tensor) and k.dtype == boolean
    if not accumulate:
        return masked_write(t, k, values) if mask else _scatter_write(t, key, values)
    if mask and (values.numel() == 1 and values.ndim <= t.ndim - k.ndim + 1 or values.ndim <= t.ndim - k.ndim):
        # the same number (or row) added at each selected position: a select, which traces (no count of
        # the True values needed)
        return _masked_add(t, k, values.reshape(()) if values.numel() == 1 else values)
    positions = getitem(arange(t.numel()).reshape(t.shape), key)
    src = values.broadcast_to(positions.shape).reshape(-1)
    return apply("scatter_add", t.reshape(-1), positions.reshape(-1), src, axis=0).reshape(t.shape)


def assign(t, new, what: str = "an in-place op", fill: bool = False) -> None:
    """Make tensor t hold `new` (an in-place op: x[k] = v, masked_fill_, clamp_, copy_). While tracing
    t is rebound; eagerly t's buffer is overwritten and t takes new's gradient history (the history keeps
    t's old value in a stand-in tensor, so t.backward() differentiates through the write). A write into
    a view reaches its base (_write_view). fill: the write puts one number everywhere (fill_, zero_,
    x[k] = 2.0), which PyTorch allows into an expanded view."""
    check_not_strided_copy(t, what)
    if new._base is not None and stale(new):  # a view written since it was made: its value and history as
        new = fresh(new)  # its base holds them now
    hook = write_hook.get()
    if hook is not None:
        hook(t, new, what)
    if t._base is not None:
        _write_view(t, new, what, fill)
        return
    trace = current_trace.get()
    if grad_enabled.get() and _leaf(t, trace):
        raise AutogradError(f"a leaf Variable that requires grad is being used in an in-place operation (use `with "
                            f"flame.no_grad():` or write into a clone)\n  at {user_location()}")
    if trace is not None or t._value is not None:
        if trace is None:
            raise TraceError(f"{what} into a traced tensor outside its trace\n  at {user_location()}")
        if grad_enabled.get():  # the ops recorded before that saved t's value raise at backward, as torch's
            mark_counted(t, trace)
            mark_storage(t, trace)
        value = new if grad_enabled.get() else _keeping_history(trace, t, new, counted=True)
        if grad_enabled.get() and trace.requires_grad(t) and not trace.requires_grad(new):
            value = apply("where", full((), True, boolean), new, t)  # t keeps requiring grad (the eager rule below)
        if t._value is not None and grad_enabled.get():  # a traced tensor requires grad as its new value does
            t._requires_grad = trace.requires_grad(value)  # (t += y, y requiring grad; no_grad keeps the flag)
            if id(t) in trace.inputs_of:
                trace.written_args.add(id(t))
        trace.assign(t, trace.value_of(value))
        bump(t)
        return
    if not grad_enabled.get():
        _untracked(t, lambda: (write(t, new), bump(t)))
        return
    if (t.requires_grad or new.requires_grad) and (new._node is None or not new.requires_grad):
        # t takes a history of its own, as torch's copy_: a leaf's values through an op (t must not become a
        # leaf), or a constant that leaves t requiring grad (no gradient reaches its old history)
        new = apply("where", full((), True, boolean), new, stand_in(t) if t.requires_grad else new)
    node, needs = new._node, new.requires_grad
    if node is None:  # t stays a leaf: what nodes read of it is kept
        keep_old_values(t)
    write(t, new)
    t._version += 1
    t._node, t.requires_grad = node, needs


def writes_a_leaf(t) -> bool:
    """A write into t now is one torch refuses while recording gradients: t, or the tensor t is a view
    of, is a leaf that requires grad (its check comes before any other of the write's)."""
    trace = current_trace.get()
    return grad_enabled.get() and any(u is not None and _leaf(u, trace) for u in (t, t._base))


def _leaf(t, trace) -> bool:
    """t is a leaf that requires grad (torch refuses to write one in place while recording gradients):
    eagerly a tensor no op made; while tracing also an argument of the traced function or a captured
    tensor (a leaf of the trace) that requires grad."""
    return t.requires_grad and _made_by_no_op(t, trace)


def _made_by_no_op(t, trace) -> bool:
    """t is a leaf of the gradient history, whether it requires grad or not: eagerly a tensor no op
    recorded; while tracing an argument of the traced function or a captured tensor."""
    if t._value is not None:
        return trace is not None and id(t) in trace.inputs_of and id(t) not in trace.written_args
    return t._node is None


def _write_view(t, new, what: str, fill: bool) -> None:
    """t (a view) holds `new` from here on, and so does the part of its base t shows: eagerly through
    the shared storage, and in the base's value and gradient history as a scatter of `new` into the
    base's old value at t's positions (while tracing, and eagerly when a gradient is recorded)."""
    base, trace = t._base, current_trace.get()
    traced = trace is not None or t._value is not None or base._value is not None
    record = traced or grad_enabled.get() and (base.requires_grad or new.requires_grad)
    detached = any(opdef.view is None for opdef, _, _ in t._chain)  # through detach(), as torch allows
    # a recorded write into the detached tensor itself: it takes the write's history, as torch's (its base
    # takes the values only)
    owns = detached and grad_enabled.get() and new.requires_grad
    if grad_enabled.get() and (t.requires_grad or new.requires_grad):
        check_one_of_several(t, what)  # torch's first check: `x.split(2)[0].add_(1)`
    if grad_enabled.get() and t.requires_grad:  # torch's checks, before any other of the write's
        if detached and _leaf(t, trace):  # `x.detach().requires_grad_()`: a leaf of its own
            raise AutogradError(f"{what}: a leaf Variable that requires grad is being used in an in-place operation "
                                f"(use `with flame.no_grad():` or write into a clone)\n  at {user_location()}")
        if not detached and _made_by_no_op(base, trace):
            # a view that requires grad of a tensor no op made, which need not require grad itself:
            # `x.view(2, 3).requires_grad_()`
            raise AutogradError(f"{what}: a view of a leaf Variable that requires grad is being used in an in-place "
                                f"operation (write into it under `with flame.no_grad():`, or into a clone)"
                                f"\n  at {user_location()}")
    if owns and t._chain[-1][0].view is not None:
        raise AutogradError(f"{what}: a write that records a gradient into a view of a detach()ed tensor: write "
                            f"into the detached tensor itself, or into a clone of it\n  at {user_location()}")
    if not record or detached and not traced:
        check_writable(t, what, fill)
        # t (and every other view) is derived again from the base at its next use
        _untracked(base, lambda: (write(t, new), bump(base, not through_data(t))), live=through_data(t))
        if through_data(t):  # a write its own version counter counts
            count_write_through(t)
        if owns:
            t._node, t.requires_grad = (new if new._node is not None else new * 1)._node, True
            t._seen = version(base)
        return
    if grad_enabled.get() and _leaf(base, trace) and not detached:
        raise AutogradError(f"{what}: a view of a leaf Variable that requires grad is being used in an in-place "
                            f"operation (write into it under `with flame.no_grad():`, or into a clone)"
                            f"\n  at {user_location()}")
    # a write through detach() records no gradient unless the detached tensor takes new's history (owns)
    recorded = owns or not detached and grad_enabled.get() and (base.requires_grad or new.requires_grad)
    check_writable(t, what, fill and not recorded, fill)  # torch's backward refuses a recorded fill (of expand)
    old = stand_in(base, new)
    if all(opdef.view is None for opdef, _, _ in t._chain):  # through detach() or .data alone: all of the base
        merged = new
    else:
        merged = apply("scatter", old.reshape(-1), flat_positions(t), new.reshape(-1), axis=0).reshape(base.shape)
    if traced:
        untracked = detached or not grad_enabled.get()
        if untracked:
            if through_data(t):  # the backward's VJPs read the base as it is then (data_writes.py)
                trace.data_written[trace.value_of(old)] = (base, False)
                read_storage_live(base, trace)
                note_result(base, Tensor._traced(trace.value_of(old), trace))  # (as _untracked's, eagerly)
                count_write_through(t, trace)
            merged = _keeping_history(trace, old, merged, counted=not through_data(t))
            if t._value is not None and not through_data(t):
                # t's own value (a detach() of the base) counts from when the write into it began: the write's
                # ops (mul_'s, which saved t) come after, as torch's node, which saved a clone of t
                mark_counted(t, trace)
        if not untracked:  # what the ops recorded before saved of the base or of t raises at backward
            mark_counted(base, trace)
            mark_storage(base, trace)
            if t._value is not None:
                mark_counted(t, trace)
        if base._value is not None and not untracked:  # the base requires grad as its new value does
            base._requires_grad = trace.requires_grad(merged)  # (a view of it += y)
            if id(base) in trace.inputs_of:
                trace.written_args.add(id(base))
        trace.assign(base, trace.value_of(merged))
        bump(base)
        if not untracked or owns:  # t is new from here on; a write with no gradient: t keeps its history,
            if t._value is not None:  # as its base does, and is derived again from the base when next used
                t._value = trace.value_of(new)
                t.requires_grad = t.requires_grad or owns
                t._requires_grad = t._requires_grad or not detached and base._requires_grad
            t._seen = version(base)
        return
    write(t, new)
    base._node, base.requires_grad = merged._node, merged.requires_grad
    bump(base)
    fresh(t)  # t's history from here on: its view of the base's (never new's own: new may be a leaf)


def flat_positions(t) -> Tensor:
    """views.positions(t), flat: eagerly a constant; while tracing the view ops applied to an arange of
    the base's elements, so a graph whose sizes become dynamic writes at each size's positions (a
    constant would keep those of the size traced)."""
    if current_trace.get() is None:
        return Tensor(positions(t).reshape(-1))
    pos = arange(t._base.numel()).reshape(t._base.shape)
    for opdef, attrs, _ in t._chain:
        if opdef.view is not None:  # detach's link (no trait) keeps the elements
            pos = apply(opdef.name, pos, **attrs)
    return pos.reshape(-1)


def _untracked(t, write_it, live: bool = False) -> None:
    """write_it(): t's storage takes values no gradient is recorded for (a write under no_grad, or
    through detach() or .data). As in torch, t keeps its gradient history: it holds the new values,
    and its gradient flows on through the history it had, as if they had not changed (the op
    straight_through, of its old history and a copy of its new values). What was recorded from t
    before reads it as it was (t._past), its VJPs too, unless the write is through `.data` (`live`:
    they read t's buffer, as torch's, frontend/data_writes.py). A leaf, or a tensor with no gradient
    history, just takes the values."""
    if t._node is None or not t.requires_grad:
        if t._node is None:  # a leaf: what nodes read of it is kept (a tensor with a history is recomputed)
            keep_old_values(t)
        write_it()
        return
    old = history_only(Tensor._concrete(t._data, t.dtype))  # its value comes from its history, never this buffer
    old._node, old.requires_grad = t._node, True
    t._past = {**(t._past or {}), version(t): old}
    if live:
        mark_live(old, t)
        read_storage_live(t)
        # the storage's version counter is one: a counted write into it later (t.mul_(2)) changes what the
        # nodes recorded before this write saved of t, as torch's (mark_storage)
        note_result(t, old)
    else:  # a write torch counts (detach(), no_grad): a node that saved the old value raises at backward
        mark_counted(old)
        mark_storage(t)
    write_it()
    with enable_grad():
        t._node = apply("straight_through", old, Tensor._concrete(t._data.copy(), t.dtype))._node


def _keeping_history(trace, old, new, counted: bool):
    """While tracing, the value a write no gradient is recorded for leaves in `old` (a tensor with a
    gradient history; _untracked's eager rule): new's values, with old's gradient (none when old has
    none: a write through detach() may carry a gradient of its own, which is not old's). counted: a write
    torch's version counter counts (not one through .data), after which a backward running a node that
    saved old's value raises (frontend/counted_writes.py)."""
    token = grad_enabled.set(True)  # (enable_grad's block, without the manager object)
    try:
        if counted:  # (old may require no grad: a node that read it, as mul's other operand, saved it all the same)
            mark_counted(old, trace)
            mark_storage(old, trace)
        if not trace.requires_grad(old):
            return apply("stop_gradient", new)
        return apply("straight_through", old, new)
    finally:
        grad_enabled.reset(token)


def shares_counter(o, t) -> bool:
    """o is t, or a view or detach() of t or of what t is a view of (not one through .data): torch's
    version counter of the two is one."""
    if not isinstance(o, Tensor) or through_data(o) and not through_data(t):
        return False
    return (o._base if o._base is not None else o) is (t._base if t._base is not None else t)


def stand_in(t, *others):
    """What an in-place op on t computes from: t itself while tracing or when no gradient is recorded,
    else a new Tensor holding t's gradient history (and, for a leaf, a copy of its values: the write
    changes t's buffer, and t takes the new history), remembered as t at its current version."""
    if t._base is not None and stale(t):
        fresh(t)
    trace = current_trace.get()
    if trace is not None and grad_enabled.get() and not any(shares_counter(o, t) for o in others):
        # the write's own ops come after (counted_writes.mark); where an operand is t, a view or detach() of
        # it (y.mul_(y)), torch's node saved that operand as it is, and the write changes it: they count
        v = trace.value_of(t)
        trace.write_begun.setdefault(v, len(trace.graph.ops))
    if trace is not None or t._value is not None or not grad_enabled.get() \
            or not any(x.requires_grad for x in (t, *(o for o in others if isinstance(o, Tensor)))):
        return t
    old = history_only(Tensor._concrete(t._data, t.dtype)) if t._node is not None else \
        Tensor._concrete(t._data.copy(), t.dtype)
    old.requires_grad, old._node = t.requires_grad, t._node
    # ops recorded before the write name t at this version: backward() reads them as `old`
    t._past = {**(t._past or {}), t._version: old}
    mark_counted(old)  # a node recorded before the write that saved t raises at backward, as torch's
    mark_storage(t)
    if t._node is not None:
        hand_over_hooks(t, old)
    return old
