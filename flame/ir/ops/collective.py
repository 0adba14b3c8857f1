"""Collectives: all_reduce, broadcast, all_gather, reduce_scatter (ARCHITECTURE.md "Collectives are ops").
Each is ONE op with
the `library` trait "collective": fusion leaves it a group of its own, the plan builder makes it a
CollectiveCall, and each executor runs it through the process group's communicator (NCCL on CUDA, a
TCP-store exchange or the identity on the NumPy reference).

`world_size` is an attribute: all_gather and reduce_scatter change shapes by it, and a plan built for
one world size refuses to run in another. Shapes:
- one input: PyTorch's tensor semantics. all_reduce and broadcast keep the shape; all_gather
  concatenates the ranks' tensors along axis 0 ([d0, ...] -> [N*d0, ...], torch's
  all_gather_into_tensor); reduce_scatter reduces and gives rank r the r-th of N slices along axis 0
  ([N*d0, ...] -> [d0, ...], torch's reduce_scatter_tensor);
- several inputs (a bucket): they are packed flat, in order, into one buffer and the collective runs
  once on it (torch's *_coalesced): all_reduce -> [total]; all_gather -> [N*total] (rank r's inputs at
  [r*total, (r+1)*total)); reduce_scatter -> [total/N] (rank r's part of the packed sum).

The NumPy reference of ONE op knows no other ranks: it computes the world-size-1 result (the identity)
and refuses a larger world; in a plan, the executor's communicator does the exchange.

Every rank must issue the same collectives in the same order, or the ranks wait for each other
forever. So no pass drops, merges, folds or reorders collectives among themselves (`is_collective`):
dead-code elimination keeps one whose result is unused (a ZeRO rank that owns a whole bucket still
takes part in its all-gather), CSE never merges two, and the fusion pass issues them in program order."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError, FlameError, ShapeError
from flame.ir.registry import REGISTRY, Attr, OpDef, register
from flame.ir.types import TensorType

REDUCE_OPS = ("sum", "avg", "max", "min", "product")
_N = {"world_size": Attr("int", 1)}
_REDUCE = {"op": Attr("str", "sum", REDUCE_OPS), **_N}


def _check(name: str, types, op: str | None, world_size: int) -> None:
    if not types:
        raise ShapeError(f"{name}: needs at least one input")
    if world_size < 1:
        raise ShapeError(f"{name}: world_size must be >= 1, got {world_size}")
    dt = types[0].dtype
    shown = ", ".join(str(t) for t in types)
    if any(t.dtype != dt for t in types):
        raise DTypeError(f"{name} ({shown}): the inputs' dtypes differ")
    if dt.kind == "bool" or (op == "avg" and dt.kind != "float"):
        raise DTypeError(f"{name} {{op={op}}} ({shown}): dtype {dt} is not supported"
                         f"{' (avg needs a float dtype)' if op == 'avg' else ''}")


def _total(types) -> int:
    return sum(t.numel for t in types)


def _all_reduce_infer(types, op, world_size):
    _check("all_reduce", types, op, world_size)
    return types[0] if len(types) == 1 else TensorType((_total(types),), types[0].dtype)


def _broadcast_infer(types, root, world_size):
    _check("broadcast", types, None, world_size)
    if not 0 <= root < world_size:
        raise ShapeError(f"broadcast: root {root} is not a rank of a world of {world_size}")
    return types[0] if len(types) == 1 else TensorType((_total(types),), types[0].dtype)


def _all_gather_infer(types, world_size):
    _check("all_gather", types, None, world_size)
    (t, *rest) = types
    if not rest:
        if t.rank == 0:
            raise ShapeError(f"all_gather {t}: a 0-d tensor has no axis 0 to gather along")
        return TensorType((world_size * t.shape[0],) + t.shape[1:], t.dtype)
    return TensorType((world_size * _total(types),), t.dtype)


def _reduce_scatter_infer(types, op, world_size):
    _check("reduce_scatter", types, op, world_size)
    (t, *rest) = types
    if not rest:
        if t.rank == 0 or t.shape[0] % world_size:
            raise ShapeError(f"reduce_scatter {t}: axis 0 must split into {world_size} equal parts")
        return TensorType((t.shape[0] // world_size,) + t.shape[1:], t.dtype)
    total = _total(types)
    if total % world_size:
        raise ShapeError(f"reduce_scatter of {len(types)} inputs ({total} elements): the packed size must "
                         f"split into {world_size} equal parts")
    return TensorType((total // world_size,), t.dtype)


def _packed(arrays) -> np.ndarray:
    return arrays[0].copy() if len(arrays) == 1 else np.concatenate([a.ravel() for a in arrays])


def _one_rank(name: str, world_size: int) -> None:
    if world_size != 1:
        raise FlameError(f"{name} over {world_size} ranks: one op's NumPy reference has no other ranks; "
                         f"collectives run in a plan, through the process group's communicator")


def _all_reduce_ref(*xs, op, world_size):
    _one_rank("all_reduce", world_size)
    return _packed(xs)


def _broadcast_ref(*xs, root, world_size):
    _one_rank("broadcast", world_size)
    return _packed(xs)


def _all_gather_ref(*xs, world_size):
    _one_rank("all_gather", world_size)
    return _packed(xs)


def _reduce_scatter_ref(*xs, op, world_size):
    _one_rank("reduce_scatter", world_size)
    return _packed(xs)


# ---- VJPs: the transpose of each collective is another collective ----------------------------------


def unpack(b, packed, inputs):
    """The per-input parts of a packed (flat) result, reshaped to the inputs' shapes; the result
    itself when there is one input (its shape is then the input's)."""
    if len(inputs) == 1:
        return (packed if packed.shape == inputs[0].shape else b.reshape(packed, shape=inputs[0].shape),)
    parts, start = [], 0
    for x in inputs:
        n = x.type.numel
        part = b.slice(packed, starts=[start], stops=[start + n], steps=[1])
        parts.append(b.reshape(part, shape=x.shape))
        start += n
    return tuple(parts)


def _all_reduce_vjp(b, g, *rest, op, world_size):
    """y = sum (or mean) over ranks of x: every rank's x gets the sum (mean) of the ranks' cotangents."""
    xs = rest[:-1]
    if op not in ("sum", "avg"):
        raise FlameError(f"all_reduce {{op={op}}} has no gradient (only sum and avg do)")
    return unpack(b, b.emit("all_reduce", g, op=op, world_size=world_size), xs)


def _all_gather_vjp(b, g, *rest, world_size):
    """Rank r's x appears in every rank's result at slot r: its gradient is the sum over ranks of that slot."""
    xs = rest[:-1]
    return unpack(b, b.emit("reduce_scatter", g, op="sum", world_size=world_size), xs)


def _reduce_scatter_vjp(b, g, *rest, op, world_size):
    """Slot r of every rank's x feeds rank r's result: its gradient is rank r's cotangent (/N for avg)."""
    xs = rest[:-1]
    if op not in ("sum", "avg"):
        raise FlameError(f"reduce_scatter {{op={op}}} has no gradient (only sum and avg do)")
    full = b.emit("all_gather", g, world_size=world_size)
    if op == "avg" and world_size != 1:
        full = b.mul(full, 1.0 / world_size)
    if len(xs) == 1:
        return (full,)
    return unpack(b, full, xs)


_BROADCAST_WHY = ("broadcast copies the root's tensor to every rank (parameter synchronisation); it is "
                  "not differentiated")
register(OpDef("all_reduce", "library", -1, _all_reduce_infer, _all_reduce_ref, dict(_REDUCE), _all_reduce_vjp,
               library="collective", doc="sum/avg/max/min/product of each element over the ranks"))
register(OpDef("broadcast", "library", -1, _broadcast_infer, _broadcast_ref, {"root": Attr("int", 0), **_N},
               nondiff=_BROADCAST_WHY, library="collective", doc="the root rank's tensor on every rank"))
ALL_GATHER = register(OpDef("all_gather", "library", -1, _all_gather_infer, _all_gather_ref, dict(_N),
                            _all_gather_vjp, library="collective",
                            doc="the ranks' tensors concatenated along axis 0 (or packed flat)"))
REDUCE_SCATTER = register(OpDef("reduce_scatter", "library", -1, _reduce_scatter_infer, _reduce_scatter_ref,
                                dict(_REDUCE), _reduce_scatter_vjp, library="collective",
                                doc="rank r's slice of the reduction over the ranks"))


def is_collective(op) -> bool:
    """A collective: every rank must issue the same ones in the same order, so passes never drop,
    merge, evaluate or reorder them among themselves (DCE, CSE, constant folding, fusion)."""
    return REGISTRY[op.name].library == "collective"
