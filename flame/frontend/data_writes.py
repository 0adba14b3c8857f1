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
follows the graph's view ops).

A `.data` tensor (or a view of it) has a version counter of its own, as torch's: a write into the tensor
torch's counter counts (under no_grad, through detach(), or recording a gradient: y.mul_(y.data)) is none
for a node that saved it (`y * y.data`: mul's node saves only y.data), and that node reads the storage as
the backward finds it. Eagerly such a tensor is a leaf of the rebuilt graph, its buffer as it is then
(counted_writes ignores the base's counted writes for it), which the VJPs read (live_reads); where its
base's storage was written since an op read it, the op computes from its view of the base's history then
(autograd._data_then), as torch's forward did; while tracing, counted_writes.mark adds the
value a counted write replaced to Trace.data_written too (flagged counted), and traced_live_reads hands
the tensor's value now only to what read a `.data` link taken of it (Trace.data_links) or a view of one.
Each `.data` is a tensor of its own, whose counter (its DataLink) counts the writes through it or a view of
it: a node that saved it raises torch's error at backward (written_through eagerly; count_write_through
adds the link's values to Trace.counted while tracing); a write through another `.data` does not count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from flame._identity import ByIdentity
from flame.errors import AutogradError
from flame.frontend.saved import vjp_reads
from flame.frontend.tensor import Tensor
from flame.frontend.torch_saves import Declared
from flame.ir import registry
from flame.ir.graph import Graph, Value
from flame.ir.ops.elementwise import STOP_GRADIENT


class DataLink(Mapping):
    """The attributes of the stop_gradient link one `.data` tensor is made with (a view of its base's
    storage; the link's op applies no attribute). It marks a write through `.data`, and is that tensor's
    version counter, which its views share, as torch's: `writes`, the versions of the base's storage the
    writes through them made (eagerly); `values`, while tracing, the link's values (each time it is
    taken again from its base's value: dispatch.fresh)."""

    __slots__ = ("writes", "values")

    def __init__(self):
        self.writes, self.values = [], []

    def __getitem__(self, key):
        raise KeyError(key)

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


def note_data_link(attrs, out: Tensor, trace) -> None:
    """out, traced, made by a view op, by detach() or by `.data` (attrs: a DataLink): the trace remembers
    `.data`'s."""
    if isinstance(attrs, DataLink):
        trace.data_links.add(out._value)
        attrs.values.append(out._value)


def data_link(t) -> DataLink | None:
    """The DataLink of the `.data` tensor t is (or is a view of); None for a tensor not reached through one."""
    links = [attrs for _, attrs, _ in t._chain if isinstance(attrs, DataLink)] if isinstance(t, Tensor) else ()
    return links[-1] if links else None

_LIVE = ByIdentity()  # stand-in -> (the buffer holding its values now, its dtype)


def through_data(t) -> bool:
    """t is a tensor reached through `.data` (it, or a view of a `.data` tensor)."""
    return data_link(t) is not None


def written_through(t: Tensor, version: int | None) -> bool:
    """t, reached through `.data`, was written since its base's storage was at `version` through its
    `.data` tensor or a view of that (a write its own version counter counts)."""
    return version is not None and any(w > version for w in data_link(t).writes)


def uncounted_since(t: Tensor, version: int | None) -> bool:
    """No write t's version counter counts changed t since `version`: for a tensor reached through `.data`,
    none through its `.data` tensor or a view of that (written_through); for another, its version is the
    same (a leaf's `.data` is a tensor of its own, whose writes leave it)."""
    return not written_through(t, version) if through_data(t) else t._version == version


def count_write_through(t: Tensor, trace=None) -> None:
    """A write through t, reached through `.data`: its `.data` tensor's own version counter counts it.
    Eagerly the base's version it made is noted (written_through); while tracing the link's value joins
    Trace.counted, with the number of ops recorded before the write began (counted_writes.refused)."""
    link = data_link(t)
    if trace is None:
        link.writes.append(t._base._vc[0])
    elif link.values:
        begun = trace.write_begun.pop(t._value, len(trace.graph.ops))
        for v in link.values:
            trace.counted.setdefault(v, begun)


def mark_live(old: Tensor, now: Tensor) -> None:
    """old, the stand-in of now's history from before a write through `.data`: the values a VJP reads
    of it are those now's buffer holds when the backward runs."""
    _LIVE[old] = (now._data, now.dtype)


def _live(t) -> tuple | None:
    return _LIVE.get(t) if isinstance(t, Tensor) else None


def shares_storage(name: str) -> bool:
    """The op makes a view of its first input as torch's (its result shares the input's storage)."""
    if name == STOP_GRADIENT.name:  # what detach() records while tracing
        return True
    view = registry.get(name).view
    return view is not None and view.strided is not None


def now_value(x, g: Graph, leaves: list, consts: dict, now: dict) -> Value | None:
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
    if t._base is None or not inputs or not isinstance(inputs[0], Tensor) or not shares_storage(node.name):
        return
    src = node.inputs[0]
    if node.olds and 0 in node.olds and uncounted_since(src, node.versions[0]):  # a leaf written through .data
        if id(src) not in vals:  # (a leaf that takes no gradient, which no other op reads)
            vals[id(src)] = b.graph.add_input(src._type(), "const")
            leaves.append(src)
        source = vals[id(src)]
    else:
        source = now_value(inputs[0], b.graph, leaves, consts, now)
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
    return {k: now_value(x, g, leaves, consts, now) for k, x in written if k in positions or k == -1 and result}


def traced_live_reads(g: Graph, written: dict[Value, tuple[Value, bool]], b=None, declared: dict | None = None,
                      links=frozenset(), copies=frozenset()) -> tuple[dict | None, dict | None]:
    """autodiff's (`unpacked`, `composites`) for a traced backward: each op that read (or made) a value a
    write through `.data` replaced (`written`: that value -> (the tensor's value now, False)) reads the
    current value instead; a view of a replaced value (a view op's result, or detach()'s, which shares its
    input's storage) is taken again by b (a Builder of g) from the value now, and the ops that read it read
    that. A value a write torch's version counter counts replaced (-> (its value now, True)) is read as it
    was, or refused (counted_writes.refused), by the ops that read it, but a `.data` tensor taken of it or
    of a view of it before the write (`links`: Trace.data_links) has a counter of its own: the ops that read
    that (or a view of it) read the storage now. `declared` (Trace.torch_saves): the composites whose torch
    node saved such a value take their gradient from torch's formula (torch_backwards). A view op's result
    in `copies` (Trace.view_copies) is a copy, which a write does not reach."""
    shared = {v: now for v, (now, counted) in written.items() if counted} if links else {}
    written = {v: now for v, (now, counted) in written.items() if not counted}
    if not written and not shared:
        return None, None
    sub: dict = {}
    for op in list(g.ops):
        for k, x in enumerate(op.inputs):
            if x in written:
                sub.setdefault(op, {})[k] = written[x]
        if op.out in written:
            sub.setdefault(op, {})[-1] = written[op.out]
        if b is None or not op.inputs or op.out in written or not shares_storage(op.name) or op.out in copies:
            continue
        if op.inputs[0] in written:
            written[op.out] = b.emit(op.name, written[op.inputs[0]], *op.inputs[1:], **op.attrs)
        elif op.inputs[0] in shared:  # a view of the storage a counted write changed (its own ops read it as it was)
            now = b.emit(op.name, shared[op.inputs[0]], *op.inputs[1:], **op.attrs)
            (written if op.out in links else shared)[op.out] = now
    got = {op: composite_vjp(op, d.formula, dict(d.formula.args), written)
           for op, d in (declared or {}).items() if d.formula is not None}
    return sub, {op: vjp for op, vjp in got.items() if vjp is not None} or None


def composite_vjp(op, formula, args: dict[str, Value], now: dict[Value, Value]) -> tuple | None:
    """autodiff's `composites` entry of op, the op that made a composite's result (args: its tensor
    arguments' values, as it read them), where a write through .data replaced a value torch's node saved,
    or another argument or its result, which the composite's own VJPs may read where torch's node saved
    nothing of it (ldexp's input) (`now`: a replaced value -> the value its storage holds now): its
    gradients are torch's formula (torch_saves.Formula) on the saved values as they are now. None where
    no such value was replaced, or torch's node saved nothing (kl_div's with log_target, which is several
    nodes in torch): the composite's own ops differentiate it, as in a graph with no such write; None too
    where a saved argument is not among args."""
    if any(k != "result" and k not in args for k in formula.saved):
        return None
    saved = {k: op.out if k == "result" else args[k] for k in formula.saved}
    if not saved or not any(v in now for v in (*saved.values(), *args.values(), op.out)):
        return None
    reads = {k: now.get(v, v) for k, v in saved.items()}
    names = tuple(args)

    def vjp(b, g: Value) -> list:
        grads = formula.fn(b, g, reads, args, formula.given)
        if grads is None:
            raise AutogradError(
                f"backward: {formula.name or op.name} read a tensor written through .data after it (an argument or its "
                f"result): torch's backward computes {formula.name or op.name}'s gradient from the new values, with "
                f"a formula flame does not have. Run the backward before the write, or write into a clone"
                f"\n  at {op.loc}")
        return [grads.get(k) for k in names]

    return tuple(args[k] for k in names), vjp


def _values(g: Graph) -> list[Value]:
    return [*g.inputs, *(op.out for op in g.ops)]


def written_positions(g: Graph, written: dict[Value, tuple[Value, bool]], declared: dict | None = None,
                      links=frozenset(), copies=frozenset()) -> tuple:
    """`written` (Trace.written_now: each value paired with the tensor's value at the end of the body, and
    whether a counted write replaced it), the formulas of `declared` (Trace.torch_saves) and `links`
    (Trace.data_links) and `copies` (Trace.view_copies) as positions in g (its inputs, then its ops'
    results), which a copy of g keeps (compiled_outputs): (value pairs with the flag, (op's index, its
    Formula with positions), link positions, copy positions). A counted write matters only to a `.data`
    tensor (traced_live_reads): with no links, none is kept."""
    at = {v: k for k, v in enumerate(_values(g))}
    pairs = tuple((at[a], at[b], counted) for a, (b, counted) in written.items()
                  if a in at and b in at and (links or not counted))
    if not pairs:
        return ()
    index = {op: i for i, op in enumerate(g.ops)}
    formulas = tuple((index[op], replace(d.formula, args=tuple((k, at[v]) for k, v in d.formula.args)))
                     for op, d in (declared or {}).items()
                     if d.formula is not None and op in index and all(v in at for _, v in d.formula.args))
    return pairs, formulas, tuple(at[v] for v in links if v in at), tuple(at[v] for v in copies if v in at)


def at_positions(g: Graph, positions: tuple) -> tuple[dict[Value, tuple[Value, bool]], dict, set, set]:
    """written_positions' answer as g's values (g: a copy of the graph it was taken from): (the written
    values, each paired with its value at the end and the flag; op -> a Declared with its formula; the
    `.data` links; the view ops' copies)."""
    if not positions:
        return {}, {}, set(), set()
    pairs, formulas, links, copies = positions
    vals = _values(g)
    written = {vals[a]: (vals[b], counted) for a, b, counted in pairs if max(a, b) < len(vals)}
    declared = {g.ops[i]: Declared("", (), False, replace(f, args=tuple((k, vals[v]) for k, v in f.args)))
                for i, f in formulas}
    return written, declared, {vals[k] for k in links if k < len(vals)}, {vals[k] for k in copies if k < len(vals)}
