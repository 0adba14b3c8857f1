"""What a backward reads of a tensor written through `.data`. torch's `.data` shares the tensor's storage
but not its version counter, so a write through it (`y.data.mul_(3)`, `h.data[1] = 0`, `h.data.copy_(v)`)
records no gradient and is invisible to the checks on saved tensors: every node that saved the tensor (its
producer, where the VJP reads the result, as exp's and tanh's do; its consumers, where the VJP reads that
input, as mul's does) reads the storage as it is when the backward runs. The gradient itself still flows
through the history the tensor had.

flame's backward computes the forward again (autograd._rebuild), and the write leaves the tensor's old
history in a stand-in (indexing._untracked), so without more the VJPs would read the values from before
the write. Here a write through `.data` is told apart from one through `detach()` or under no_grad (which
torch counts, and which keep reading the old values): `.data` links its view with the `DATA_LINK`
attributes. Eagerly the stand-in is remembered with the buffer that holds its values now (`mark_live`),
and the rebuilt graph hands those VJPs that buffer as a constant input (`live_reads`); while tracing the
trace remembers the written value (Trace.data_written) and its backward hands them the tensor's current
value (`traced_live_reads`)."""

from __future__ import annotations

import types

from flame._identity import ByIdentity
from flame.frontend.saved import vjp_reads
from flame.frontend.tensor import Tensor
from flame.ir.graph import Graph, Value

# the attributes of the stop_gradient link a `.data` tensor is made with (a view of its base's storage):
# its identity marks a write through `.data` (the link's op applies no attribute)
DATA_LINK = types.MappingProxyType({})

_LIVE = ByIdentity()  # stand-in -> (the buffer holding its values now, its dtype)


def through_data(t: Tensor) -> bool:
    """t was reached through `.data` (it, or a view of a `.data` tensor)."""
    return any(attrs is DATA_LINK for _, attrs, _ in t._chain)


def mark_live(old: Tensor, now: Tensor) -> None:
    """old, the stand-in of now's history from before a write through `.data`: the values a VJP reads
    of it are those now's buffer holds when the backward runs."""
    _LIVE[old] = (now._data, now.dtype)


def _live(t) -> tuple | None:
    return _LIVE.get(t) if isinstance(t, Tensor) else None


def live_reads(op, t: Tensor, inputs: list, g: Graph, leaves: list, consts: dict) -> dict:
    """For op (the rebuilt graph's op of tensor t's node, reading `inputs`): {position (-1: its result):
    a constant input holding the current buffer} for each input or result a write through `.data`
    changed that op's VJP reads. `consts`: buffer id -> its input, shared across one rebuild."""
    written = [(k, live) for k, x in [*enumerate(inputs), (-1, t)] if (live := _live(x)) is not None]
    if not written:  # (vjp_reads runs the VJP: a custom Function's backward is the user's code)
        return {}
    positions, result = vjp_reads(op)
    sub = {}
    for k, live in written:
        if k not in positions and not (k == -1 and result):
            continue
        data, dtype = live
        if id(data) not in consts:
            now = Tensor._concrete(data, dtype)
            consts[id(data)] = (now, g.add_input(now._type(), "const"))
            leaves.append(now)
        sub[k] = consts[id(data)][1]
    return sub


def traced_live_reads(g: Graph, written: dict[Value, Value]) -> dict | None:
    """autodiff's `unpacked` for a traced backward: each op that read (or made) a value a write through
    `.data` replaced (`written`: that value -> the tensor's value now) reads the current value instead."""
    if not written:
        return None
    sub: dict = {}
    for op in g.ops:
        for k, x in enumerate(op.inputs):
            if x in written:
                sub.setdefault(op, {})[k] = written[x]
        if op.out in written:
            sub.setdefault(op, {})[-1] = written[op.out]
    return sub


def _values(g: Graph) -> list[Value]:
    return [*g.inputs, *(op.out for op in g.ops)]


def written_positions(g: Graph, written: dict[Value, Value]) -> tuple[tuple[int, int], ...]:
    """`written` (Trace.data_written, each value paired with the tensor's value at the end of the body) as
    positions in g (its inputs, then its ops' results), which a copy of g keeps (compiled_outputs)."""
    at = {v: k for k, v in enumerate(_values(g))}
    return tuple((at[a], at[b]) for a, b in written.items() if a in at and b in at)


def at_positions(g: Graph, pairs: tuple) -> dict[Value, Value]:
    """written_positions' pairs as g's values (g: a copy of the graph they were taken from)."""
    vals = _values(g)
    return {vals[a]: vals[b] for a, b in pairs if max(a, b) < len(vals)}
