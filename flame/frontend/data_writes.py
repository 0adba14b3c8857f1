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
value (`traced_live_reads`). A view taken before the write shares the storage too, so what a VJP reads of it
is the view op applied to the written tensor as it is now (`follow_writes` eagerly; traced_live_reads
follows the graph's view ops)."""

from __future__ import annotations

import types

from flame._identity import ByIdentity
from flame.frontend.saved import vjp_reads
from flame.frontend.tensor import Tensor
from flame.ir import registry
from flame.ir.graph import Graph, Value
from flame.ir.ops.elementwise import STOP_GRADIENT

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


def _shares_storage(name: str) -> bool:
    """The op makes a view of its first input as torch's (its result shares the input's storage)."""
    if name == STOP_GRADIENT.name:  # what detach() records while tracing
        return True
    view = registry.get(name).view
    return view is not None and view.strided is not None


def _now(x, g: Graph, leaves: list, consts: dict, now: dict) -> Value | None:
    """The value tensor x's storage holds now, where a write through .data changed it since x was read
    (None: no such write): a view's (`now`, follow_writes), or a stand-in's buffer as a constant input."""
    if not isinstance(x, Tensor):
        return None
    if id(x) in now:
        return now[id(x)]
    live = _live(x)
    if live is None:
        return None
    data, dtype = live
    if id(data) not in consts:
        t = Tensor._concrete(data, dtype)
        consts[id(data)] = (t, g.add_input(t._type(), "const"))
        leaves.append(t)
    return consts[id(data)][1]


def follow_writes(node, t: Tensor, inputs: list, b, vals: dict, leaves: list, consts: dict, now: dict) -> None:
    """Where t is a view whose source's storage a write through .data changed since t's node ran (a leaf
    the node keeps a stand-in for, its version unchanged: node.olds; or a tensor with a value in `now`):
    now[id(t)] = t's view op applied to the source as it is now, what a VJP that reads t reads, as torch's
    saved view shares the storage. b: the rebuilt graph's Builder; vals: its tensors' values."""
    if t._base is None or not inputs or not isinstance(inputs[0], Tensor) or not _shares_storage(node.name):
        return
    src = node.inputs[0]
    if node.olds and 0 in node.olds and src._version == node.versions[0]:  # a leaf written through .data
        if id(src) not in vals:  # (a leaf that takes no gradient, which no other op reads)
            vals[id(src)] = b.graph.add_input(src._type(), "const")
            leaves.append(src)
        source = vals[id(src)]
    else:
        source = _now(inputs[0], b.graph, leaves, consts, now)
    if source is not None:
        rest = [vals[id(x)] if isinstance(x, Tensor) else x for x in inputs[1:]]
        now[id(t)] = b.emit(node.name, source, *rest, **node.attrs)


def live_reads(op, t: Tensor, inputs: list, g: Graph, leaves: list, consts: dict, now: dict) -> dict:
    """For op (the rebuilt graph's op of tensor t's node, reading `inputs`): {position (-1: its result):
    the value as its storage holds it now} for each input or result a write through .data changed that
    op's VJP reads. `consts`: buffer id -> its input; `now`: follow_writes'; both shared across one
    rebuild."""
    written = [(k, x) for k, x in [*enumerate(inputs), (-1, t)]
               if isinstance(x, Tensor) and (id(x) in now or _live(x) is not None)]
    if not written:  # (vjp_reads runs the VJP: a custom Function's backward is the user's code)
        return {}
    positions, result = vjp_reads(op)
    return {k: _now(x, g, leaves, consts, now) for k, x in written if k in positions or k == -1 and result}


def traced_live_reads(g: Graph, written: dict[Value, Value], b=None) -> dict | None:
    """autodiff's `unpacked` for a traced backward: each op that read (or made) a value a write through
    `.data` replaced (`written`: that value -> the tensor's value now) reads the current value instead;
    a view of a replaced value (a view op's result, or detach()'s, which shares its input's storage) is
    taken again by b (a Builder of g) from the value now, and the ops that read it read that."""
    if not written:
        return None
    written = dict(written)
    sub: dict = {}
    for op in list(g.ops):
        for k, x in enumerate(op.inputs):
            if x in written:
                sub.setdefault(op, {})[k] = written[x]
        if op.out in written:
            sub.setdefault(op, {})[-1] = written[op.out]
        if b is not None and op.inputs and op.inputs[0] in written and op.out not in written \
                and _shares_storage(op.name):
            written[op.out] = b.emit(op.name, written[op.inputs[0]], *op.inputs[1:], **op.attrs)
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
