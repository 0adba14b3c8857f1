"""apply(): the single entry point every frontend op goes through. Inside a trace it records an IR op;
outside it runs the op eagerly as a one-op graph through the current executor (ARCHITECTURE.md "Eager is compiled"),
compiled once per (op, attributes, input types) by flame.compiler.compile_graph."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from flame.compiler import compile_graph
from flame.errors import AutogradError, FlameError, TraceError
from flame.frontend import autocast
from flame.frontend.autocast import _state as _autocast
from flame.frontend.context import (
    _pinned,
    checkpoint_args,
    checkpoint_saves,
    current_trace,
    grad_enabled,
    in_checkpoint,
    op_recorder,
    user_location,
)
from flame.frontend.data_writes import note_data_link, through_data
from flame.frontend.hooks import hand_over_hooks, hand_over_traced_hooks
from flame.frontend.saved import hooks_installed, pack_saves, refuse_in_trace
from flame.frontend.tensor import Tensor
from flame.frontend.views import contiguous_array, link, stale, strided_array, traced_view, version
from flame.ir import registry
from flame.ir.builder import Builder, _with_loc, normalized_keyed
from flame.ir.dtypes import DType
from flame.ir.graph import CheckpointLoc, Graph
from flame.ir.ops._shapes import broadcast_shapes
from flame.ir.registry import REGISTRY as _OPS
from flame.ir.types import TensorType
from flame.runtime.device import executor


@dataclass(eq=False)
class Node:
    """How an eager tensor was made, for loss.backward(): op, attributes, inputs and the inputs'
    versions at that time (an in-place change of an input before backward is an error). `freed`:
    a backward() without retain_graph=True went through it (a second one raises, as in PyTorch).
    `packed`: what saved-tensor hooks packed of the tensors its backward reads (frontend/saved.py).
    `olds`: {input position: a stand-in of the input's values at recording}, for a leaf whose buffer
    was written since with no gradient recorded (frontend/leaf_writes.py). `spent`: a backward()
    without retain_graph=True ran through it (a later write into a leaf it read keeps no old values for
    it: its gradient has been taken). `torch_saves`: what torch's node saved where the op is one of a
    composite torch records as one node (frontend/torch_saves.py); None: what the op's trait says.
    `region`: the arguments of the checkpoint region it was recorded in, which torch's checkpoint saves."""

    name: str
    attrs: dict
    inputs: tuple
    versions: tuple
    loc: str | None
    freed: bool = False
    packed: dict | None = None
    olds: dict | None = None
    spent: bool = False
    torch_saves: Any = None
    region: Any = None  # recorded inside flame.utils.checkpoint: the region's arguments (counted_writes.RegionArgs)

    def grad_fn_parts(self) -> tuple[str | None, tuple, Any, list | None]:
        """What Tensor.grad_fn shows of the node: (torch's name, None: made from the op's; the inputs
        next_functions lists; the object its grad_fn is kept on; the tensors that share it, None: the
        one tensor the node made)."""
        return None, self.inputs, self, None


_FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward(). Specify retain_graph=True if you need to backward through the graph a second time"
)


def freed_graph_error(op: str, loc: str | None) -> AutogradError:
    """The error of a second backward() through a graph a first one freed."""
    return AutogradError(
        f"backward(): {_FREED} (the graph's {op}{f' at {loc}' if loc else ''} was freed by "
        f"an earlier backward())\n  at {user_location()}"
    )


# The tensors whose versions some eager graph recorded (a Node's inputs), weakly, and how many times
# a tensor joined them: only their in-place updates can make backward() raise, so a compiled step's
# replay bumps the versions of these alone (frontend/replay.py), not of every parameter and moment
_WATCHED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> tensor (Tensor's == is elementwise)
_JOINED = [0]


def record_versions(inputs: tuple) -> tuple:
    """The versions of a Node's inputs (0 for a non-tensor), each tensor noted as watched."""
    versions = []
    for x in inputs:
        if isinstance(x, Tensor):
            if _WATCHED.get(id(x)) is not x:
                _WATCHED[id(x)] = x
                _JOINED[0] += 1
            versions.append(x._version)
        else:
            versions.append(0)
    return tuple(versions)


def note_readers(node: Node) -> None:
    """Note node, weakly, as a reader of the buffer of each leaf it reads (the leaf's, shared with its
    views and .data tensors): a write into it with no gradient recorded keeps the values the node read
    (frontend/leaf_writes.py)."""
    for x in node.inputs:
        if isinstance(x, Tensor) and x._node is None:
            owner = x._base if x._base is not None else x
            if owner._readers is None:
                owner._readers = weakref.WeakSet()
            owner._readers.add(node)


def share_readers(alias: Tensor, leaf: Tensor) -> None:
    """alias (leaf's .data: its buffer, not its version counter) shares leaf's readers (note_readers)."""
    if leaf._readers is None:
        leaf._readers = weakref.WeakSet()
    alias._readers = leaf._readers


def watched(tensors) -> tuple[int, list]:
    """(the watch count now, those of tensors whose versions an eager graph recorded)."""
    return _JOINED[0], [t for t in tensors if _WATCHED.get(id(t)) is t]


def watch_count() -> int:
    return _JOINED[0]


def _scalar_dtype(inputs: tuple, scalar: Any) -> DType:
    tensors = [x for x in inputs if isinstance(x, Tensor)]
    like = next((t for t in tensors if t.dtype.kind != "bool"), tensors[0] if tensors else None)
    if like is None:
        raise FlameError("an op needs at least one tensor input")
    return like.dtype


def _loc(name: str = "") -> str | None:
    """The user's line, marked when the op (`name`) is recorded inside flame.utils.checkpoint (and
    marked saved when the region's policy keeps the op's results)."""
    loc, region = user_location(), in_checkpoint.get()
    if region is None:
        return loc
    saves = checkpoint_saves.get()
    return CheckpointLoc(loc or "", region, bool(saves and saves(name)))


def _one_op_graph(name: str, attrs: dict, types: tuple[TensorType, ...]) -> Graph:
    g = Graph(name)
    ins = [g.add_input(t) for t in types]
    g.outputs = [Builder(g, user_location()).emit(name, *ins, **attrs)]
    return g


def broadcast(op: str, types: list) -> tuple:
    """The shape `types` broadcast to, for the frontend's own checks before an op is applied; a shape
    that does not broadcast is op's ShapeError naming the user's line (as apply's are)."""
    try:
        return broadcast_shapes(op, types)
    except FlameError as e:
        raise _with_loc(e, user_location()) from None


def apply(name: str, *inputs: Any, **attrs: Any):
    """Run or record op `name` on Tensors / Python numbers. Returns a Tensor. Inside flame.autocast
    the floating-point inputs are cast first, as the op's `autocast` trait says. A view op (one with
    the `View.strided` trait) makes an eager view sharing its input's storage (frontend/views.py)."""
    opdef = _OPS.get(name) or registry.get(name)
    if _autocast.get().enabled:
        inputs = autocast.cast_inputs(opdef.autocast, inputs, opdef.autocast_cpu)
    attrs_key = ()  # (infer's key of the attributes: normalized_keyed's)
    if attrs or opdef.attrs:  # (an op without attributes, given none: nothing to normalize)
        try:
            attrs, attrs_key = normalized_keyed(opdef, attrs)
        except FlameError as e:
            raise _with_loc(e, user_location()) from None
        attrs = dict(attrs)
    for x in inputs:
        if isinstance(x, Tensor) and x._base is not None:  # a view: derived again if written since
            inputs = _current(inputs)
            break
    trace = current_trace.get()
    if trace is not None:
        vals, grad = [], False
        for x in inputs:
            if isinstance(x, Tensor):
                # (a tensor of this trace that is no view: its value, as value_of gives it)
                vals.append(x._value if x._trace is trace and x._base is None else trace.value_of(x))
                if x._requires_grad:
                    grad = True
            else:
                vals.append(x)
        builder = trace.builder
        pinned = _pinned.get()  # (user_location's answer inside pinned_location, without the call)
        loc = pinned[0] if pinned is not None else user_location()
        builder.loc = loc if in_checkpoint.get() is None else _loc(name)
        t = Tensor._traced(builder.emit_normalized(opdef, tuple(vals), attrs, attrs_key), trace)
        grad = grad and opdef.vjp is not None and t._dtype.kind == "float"
        if grad and hooks_installed() and grad_enabled.get():
            raise refuse_in_trace(name, loc)
        if grad_enabled.get():
            t._requires_grad = grad  # as eagerly: an op's result requires grad when an input does
        else:  # it does not require grad (Trace.requires_grad), and no gradient flows through it
            if grad:
                t = Tensor._traced(trace.builder.emit("stop_gradient", t._value), trace)
            trace.no_grad.add(t._value)
        view = opdef.view
        if view is not None and view.strided is not None and isinstance(inputs[0], Tensor):
            if traced_view(inputs[0], opdef, t.shape):
                link(t, inputs[0], opdef, attrs)
            else:  # a copy, as torch's reshape of a transpose
                trace.view_copies.add(t._value)
        recorder = op_recorder.get()
        if recorder is not None:
            recorder(name, inputs, attrs, t)
        return t
    strided = opdef.view is not None and opdef.view.strided is not None and isinstance(inputs[0], Tensor)
    for x in inputs:
        if isinstance(x, Tensor) and x._value is not None:
            raise TraceError(
                f"{name}: a tensor traced inside @flame.compile was used after its trace ended\n  at {user_location()}"
            )
    ex = executor()
    t = _eager_view(opdef, inputs[0], attrs) if strided else None
    if t is None:
        t = _run_eagerly(ex, name, inputs, attrs)
    if grad_enabled.get() and t.dtype.is_float and opdef.vjp is not None:
        if any(isinstance(x, Tensor) and x.requires_grad for x in inputs):
            t.requires_grad = True
            t._node = Node(name, attrs, tuple(inputs), record_versions(inputs), _loc(name),
                           region=checkpoint_args.get())
            note_readers(t._node)
            if hooks_installed():
                t._node.packed = pack_saves(name, attrs, tuple(inputs), t,
                                            lambda x: TensorType((), _scalar_dtype(inputs, x)))
    recorder = op_recorder.get()
    if recorder is not None:
        recorder(name, inputs, attrs, t)
    return t


def tell_recorder(name: str, inputs: tuple, out: Tensor) -> None:
    """Tell op_recorder of a result made without apply as op `name` would make it (detach's alias of the
    same buffer is stop_gradient's), so that what follows ops sees it too."""
    recorder = op_recorder.get()
    if recorder is not None:
        recorder(name, inputs, {}, out)


def _run_eagerly(ex, name: str, inputs: tuple, attrs: dict) -> Tensor:
    """The op computed now, as a one-op graph compiled once per (op, attributes, input types)."""
    types, arrays = [], []
    for x in inputs:
        if isinstance(x, Tensor):
            if ex.name == "cuda" and isinstance(x._data, np.ndarray):
                raise FlameError(
                    f"{name}: a tensor on the cpu (made by .cpu()) met the cuda executor: "
                    f"move it back with .cuda() first\n  at {user_location()}"
                )
            types.append(TensorType(x.shape, x.dtype))
            arrays.append(contiguous_array(x))
        else:
            dt = _scalar_dtype(inputs, x)
            types.append(TensorType((), dt))
            arrays.append(ex.asarray(np.asarray(x, dtype=dt.np_dtype)))
    types = tuple(types)
    c = compile_graph(
        lambda: _one_op_graph(name, attrs, types), key=(name, tuple(attrs.items()), types), optimize=False
    )
    (out,) = c.run(arrays)
    return Tensor._concrete(out, c.graph.outputs[0].dtype)


def _eager_view(opdef, x: Tensor, attrs: dict) -> Tensor | None:
    """The view op as PyTorch's view: a tensor sharing x's storage, made with no kernel; None where
    the strides allow no view (a reshape that must copy)."""
    try:
        shape = opdef.infer([x._type()], **attrs).shape
    except FlameError as e:
        raise _with_loc(e, user_location()) from None
    arr = strided_array(x, opdef, attrs, shape)
    if arr is None:
        return None
    t = Tensor._concrete(arr, x.dtype)
    link(t, x, opdef, attrs)
    return t


def _current(inputs: tuple) -> tuple:
    """The inputs, each view written since it was derived (through its base or another view of it)
    derived again from its base first."""
    for x in inputs:
        if isinstance(x, Tensor) and x._base is not None and stale(x):
            return tuple(fresh(y) if isinstance(y, Tensor) and stale(y) else y for y in inputs)
    return inputs


_overwritten: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> stand-in (history_only)


def history_only(old: Tensor) -> Tensor:
    """Mark old, a stand-in sharing the buffer of a tensor an in-place write is about to change: its
    values come from its history alone (a create_graph backward computes them again, autograd.known_tensors)."""
    _overwritten[id(old)] = old
    return old


def overwritten(t) -> bool:
    """Whether t's buffer no longer holds its values (history_only)."""
    return _overwritten.get(id(t)) is t


def fresh(x: Tensor) -> Tensor:
    """View x as its base holds it now. While tracing x takes the value the view ops give from the
    base's current value. Eagerly x's storage is already current; with gradients recorded, x takes the
    base's new gradient history (what was recorded from x before keeps the old one, in x._past)."""
    trace = current_trace.get()
    if trace is None and not grad_enabled.get():
        return x
    if trace is None and not (x._base.requires_grad or x.requires_grad):  # no history to follow
        x._seen = version(x._base)
        return x
    y = x._base
    for opdef, attrs, _ in x._chain:
        y = apply(opdef.name, y, **attrs)
        if trace is not None:
            note_data_link(attrs, y, trace)
    if trace is not None and x._value is None:  # an eager view read inside a trace: its value there
        return y
    if x._value is not None:
        hand_over_traced_hooks(x)
        x._value = y._value
    else:
        # x as it was: its history; without one, its values, which the write overwrote in the storage (a
        # backward that needs them raises, autograd._inputs)
        old = x if through_data(x) else None  # (`.data`'s reads the storage at backward: data_writes.py)
        if x._node is not None:
            old = history_only(Tensor._concrete(x._data, x.dtype))
            old.requires_grad, old._node = x.requires_grad, x._node
            hand_over_hooks(x, old)
        x._past = {**(x._past or {}), x._seen: old}
        x._node, x.requires_grad = y._node, y.requires_grad
    x._seen = version(x._base)
    return x
