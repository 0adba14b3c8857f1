"""What a backward does with a tensor whose old value a node saved, written in place since through a
write torch's version counter counts: with a gradient recorded (`y.mul_(2)`, `y[1:] = v`, `y.copy_(v)`),
through `detach()` (which shares the counter) or under no_grad. torch's node checks the version of each
tensor it saved when its backward runs, and raises there: exp's and sigmoid's nodes save their result,
mul's saves the inputs whose gradient the other one needs. The in-place op's own node saves what it reads
before its write (torch clones it), so it never raises. (A write through `.data` is not counted:
frontend/data_writes.py.) A node recorded inside flame.utils.checkpoint saved nothing torch checks:
torch's checkpoint packs what the region's nodes save through its saved-tensor hooks and recomputes it
at backward, so a write into the region's result (or a view of it) is no error there. What it saves is the
region's tensor arguments (RegionArgs): a counted write into one raises when the backward recomputes the
region (a node of it that saved something runs), or, for use_reentrant=True, whenever it runs through it.

Eagerly such a write leaves the tensor's old history in a stand-in (indexing.stand_in, indexing._untracked),
which the nodes recorded before the write read in flame's recomputing backward, and which the write's own
node reads itself. The stand-in is marked here (`mark`); autograd._rebuild asks `refuse` of each node it
runs, which raises torch's error where that node, recorded before the write, has a VJP that reads a marked
stand-in: as an input, or as its result; or an input that is a view of a tensor written since. An in-place
op written into a view (`y[0].exp_()`) leaves its result in its base's storage, which torch's node saved as
the view, sharing the base's counter: the result is noted against the base (`note_result`), and a later
counted write into the base or any view of it marks it too (`mark_storage`, eagerly and while tracing); a
write through `.data` has its node read it as the storage then holds it (`read_storage_live`).

While tracing, the write rebinds the tensor to a new value, and the ops recorded before it read the old
one, which `mark` adds to the trace's `counted` values with the number of ops recorded before the write
began (indexing.stand_in notes it: the ops after compute the write). A backward in the trace
(Trace.backward, flame.autograd.grad, flame.grad) asks `refused` of the ops it runs and raises torch's
error at the first one recorded before a write that saved its value (or a view of it); a compiled forward
whose backward runs outside keeps, per result, the op a backward from it would refuse
(Trace.refused_by_outputs), and raises when that backward runs (compiled_outputs.Recompute)."""

from __future__ import annotations

import weakref
from typing import NamedTuple

from flame._identity import ByIdentity
from flame.errors import AutogradError
from flame.frontend.data_writes import mark_live, shares_storage, through_data, written_through
from flame.frontend.saved import saves_nothing, torch_saved
from flame.frontend.tensor import Tensor
from flame.frontend.views import moved_since
from flame.ir.graph import CheckpointLoc, Op, Value

_COUNTED = ByIdentity()  # the marked stand-ins
_RESULTS = ByIdentity()  # a base tensor -> the results of the in-place ops written into views of it since


class RegionArgs(NamedTuple):
    """What torch's checkpoint saves of a region: its tensor arguments (eagerly tensors, with their
    versions then; while tracing their values) and whether it is the reentrant variant, whose node
    checks them whenever its backward runs (the other checks them when it recomputes the region)."""

    tensors: tuple
    versions: tuple
    reentrant: bool


def mark(old: Tensor, trace=None) -> None:
    """old, the stand-in of a tensor's history from before a counted write; while tracing (trace), the
    tensor itself before the write, whose value the ops recorded until the write began read
    (Trace.counted; Trace.write_begun: the write's own ops come after)."""
    if trace is not None:
        v = trace.value_of(old)
        trace.counted.setdefault(v, trace.write_begun.pop(v, len(trace.graph.ops)))
        trace.data_written.setdefault(v, (old, True))  # `.data` tensors of v read old's storage at backward
    else:
        _COUNTED[old] = True


def note_result(t: Tensor, new: Tensor) -> None:
    """new, the result of an in-place op into view t (`t.exp_()`), which torch's node of the op holds as its
    output: t, whose version counter is its base's, so that any later counted write into the base or a view
    of it changes what that node saved (mark_storage). flame's view is derived again from its base, so the
    node's result is new alone."""
    root = t._base if t._base is not None else t
    if new._value is not None:  # while tracing: the trace keeps it, and it goes with the trace (it is a
        kept = new._trace.view_results  # node of that trace alone)
        kept[root] = (*kept.get(root, ()), (new, t))
        return
    # eagerly held weakly: a result nothing holds any more is in no node a backward can reach, so a long-lived
    # tensor written through views step after step keeps no earlier step's results
    _RESULTS[root] = (*((ref, view) for ref, view in _RESULTS.get(root, ()) if ref() is not None),
                      (weakref.ref(new), t))


def _results(root, trace=None) -> list[tuple[Tensor, Tensor]]:
    """The (result, view) pairs note_result kept for root: eagerly those whose result is alive, and while
    tracing (trace) those of the trace."""
    eager = [(new, view) for ref, view in _RESULTS.get(root, ()) if (new := ref()) is not None]
    return eager + list(trace.view_results.get(root, ())) if trace is not None else eager


def mark_storage(t, trace=None) -> None:
    """A counted write into t's storage (t, its base or a view of it, eagerly or while tracing): the results
    of the in-place ops written into views of it before (note_result) are marked, as torch's version
    counter of the storage moves on under the nodes that saved them."""
    root = t._base if t._base is not None else t
    results = _results(root, trace)
    if _RESULTS.get(root):
        _RESULTS[root] = ()
    if trace is not None and trace.view_results.get(root):
        trace.view_results[root] = ()
    for new, _ in results:
        mark(new, trace)


def read_storage_live(t, trace=None) -> None:
    """A write through `.data` into t's storage: the results of the in-place ops written into views of it
    before (note_result) are read by their nodes' VJPs as the view holds them at backward, as torch's
    node reads its saved output's storage (data_writes.py): eagerly marked live, while tracing each
    result's value is replaced by its view's value then (Trace.data_written)."""
    root = t._base if t._base is not None else t
    for new, view in _results(root, trace):
        if trace is None:
            mark_live(new, view)
        else:
            trace.data_written.setdefault(trace.value_of(new), (view, False))


def saved_modified_error(name: str, loc) -> AutogradError:
    """torch's error at backward: a tensor the node of op `name`, recorded at loc, saved for its backward
    (an input its VJP reads, or its result) was written in place after, by a write that bumped its
    version."""
    return AutogradError(f"one of the variables needed for gradient computation has been modified by an inplace "
                         f"operation: a tensor {name} saved for its backward was modified in place after it "
                         f"was used by {name}\n  at {loc}")


def node_name(node) -> str:
    """The op an error about node names: the composite torch records as one node, where node is one of its
    ops (torch_saves.inside), else node's op."""
    declared = node.torch_saves
    return declared.name if declared is not None and declared.name else node.name


def _counted(t) -> bool:
    return isinstance(t, Tensor) and t in _COUNTED


def as_of(x, version: int):
    """Input x of a node, as it was when the node was recorded: x, or the stand-in the first in-place
    write into x at or after that version left (so `z = y[0]; y[1] = z` differentiates through y's old
    history); None where that write kept nothing of x (dispatch.fresh). A version counter is shared
    with views, so a write elsewhere may have moved it on."""
    if isinstance(x, Tensor) and version is not None and x._version != version and x._past is not None:
        later = [v for v in x._past if v >= version]
        return x._past[min(later)] if later else x
    return x


def _written_since(x, orig, version) -> bool:
    """A node's input (x, as the backward reads it; orig, the tensor the node was recorded with, at
    `version`) was changed since by a counted write: x is the stand-in that write left (the write's own
    node reads the stand-in itself), or orig is a view whose base a counted write changed since. One
    reached through `.data` has a version counter of its own, as torch's, which counts only the writes
    through its `.data` tensor or a view of that (its node reads the storage as it is at backward,
    data_writes.py)."""
    if through_data(orig):
        return written_through(orig, version)
    if _counted(x) and x is not orig:
        return True
    base = getattr(orig, "_base", None)
    past = base._past if base is not None else None
    return bool(past) and version is not None and any(v >= version and _counted(s) for v, s in past.items())


def _changed(x: Tensor, version) -> bool:
    """Tensor x, at `version` when a node saved it, was changed since by a write its version counts: a
    tensor with no history (a leaf, or one made with gradients off) whose version moved, or one a counted
    write left a stand-in of."""
    if through_data(x):  # (its own version counter: _written_since)
        return written_through(x, version)
    if x._node is None and version is not None and moved_since(x, version):
        return True
    return _written_since(as_of(x, version), x, version)


def _saves_written(op: Op, needs: tuple, written: list[int], result: bool) -> bool:
    """Whether op's node, the gradients of its inputs at `needs` asked for, saved for its backward an
    input at a position in `written` or, where `result`, its result: a value a counted write changed."""
    if not written and not result:
        return False
    positions, reads_result = torch_saved(op, needs)
    return any(k in positions for k in written) or result and reads_result


def _saves_any(op: Op, needs: tuple, declared, tensors: list) -> bool:
    """Whether op's node (declared: what a composite's node saved instead) saved anything for its backward:
    its result, or an input at a position in `tensors` (a Python number is saved as one)."""
    if declared is not None:
        return bool(declared.result or declared.inputs)
    positions, reads_result = torch_saved(op, needs)
    return reads_result or any(k in positions for k in tensors)


def _number(v: Value) -> bool:
    """A traced value that is a Python number's constant (a 0-d value made of no input), which torch's node
    keeps as a number, not as a saved tensor."""
    return v.producer is not None and not v.producer.inputs and v.type.shape == ()


def _recomputed(loc) -> bool:
    """An op recorded at loc is inside a checkpoint region, whose saved tensors torch's checkpoint packs
    and recomputes at backward: it checks no version of them."""
    return isinstance(loc, CheckpointLoc)


def refuse(op, node, t: Tensor, inputs: list) -> None:
    """Raise torch's error where op (the rebuilt op of tensor t's node, reading `inputs`) saved for its
    backward a value a counted write changed since: an input its VJP reads, or t, where it reads its
    result (the gradients of the inputs that require grad asked for, as torch's node saves). Where the op
    is one of a composite torch records as one node (node.torch_saves), what that node saved instead."""
    if saves_nothing():  # a forward-mode transform's passes: torch's forward AD saves nothing to check
        return
    declared = node.torch_saves
    needs = tuple(isinstance(x, Tensor) and x.requires_grad for x in inputs)
    if _recomputed(node.loc):
        region = node.region
        if region is not None and (region.reentrant or _saves_any(
                op, needs, declared, [k for k, x in enumerate(inputs) if isinstance(x, Tensor)])) \
                and any(_changed(x, v) for x, v in zip(region.tensors, region.versions)):
            raise saved_modified_error(node_name(node), node.loc)
        return
    if declared is not None:
        if declared.result and _counted(t) or any(_changed(x, v) for x, v in declared.inputs):
            raise saved_modified_error(declared.name, node.loc)
        return
    written = [k for k, (x, orig, v) in enumerate(zip(inputs, node.inputs, node.versions))
               if _written_since(x, orig, v)]
    if _saves_written(op, needs, written, _counted(t)):
        raise saved_modified_error(node.name, node.loc)


def refused(ops: list[Op], used: set, counted: dict[Value, int], requires_grad: set[Value],
            declared: dict, regions: dict, data_links: set = frozenset()) -> tuple | None:
    """Of the traced ops in `used` (a backward runs them; `ops`: every op of the graph, in the order
    recorded), the first whose node saved (torch_saved) a value a counted write replaced since
    (`counted`: Trace.counted, each with the number of ops recorded before the write), or a view of one, as
    an input or as its result, the gradients of its inputs that require grad (those in `requires_grad`)
    asked for, as the eager backward's first refused node (autograd._rebuild): (its name, its location), or None if none
    does. `declared`: Trace.torch_saves, what torch's node saved for the ops of a composite it records as
    one node (torch_saves.py): the composite's name and what it saved in place of the op's. `regions`:
    Trace.checkpoint_args, the RegionArgs of each checkpoint region, by its number. A view, or detach()'s
    result, taken before the write shares the written value's counter; not one in `data_links` (`.data`'s:
    Trace.data_links; a view op's copy: Trace.view_copies)."""
    if not counted or saves_nothing():  # (saves_nothing: as refuse's)
        return None
    before = dict(counted)  # value -> the ops before this index saw it as it was
    for i, op in enumerate(ops):
        if op.inputs and op.inputs[0] in before and i < before[op.inputs[0]] and shares_storage(op.name) \
                and op.out not in data_links:  # a view (or detach()'s alias) shares its base's storage and version
            before.setdefault(op.out, before[op.inputs[0]])
        if op not in used:
            continue
        mine = declared.get(op)
        if _recomputed(op.loc):
            region = regions.get(op.loc.region)
            if region is not None and any(i < before.get(x, -1) for x in region.tensors) and (
                    region.reentrant or _saves_any(op, tuple(x in requires_grad for x in op.inputs), mine,
                                               [k for k, x in enumerate(op.inputs) if not _number(x)])):
                return (mine.name if mine is not None and mine.name else op.name), op.loc
            continue
        result = i < before.get(op.out, -1)
        if mine is not None:
            if mine.result and result or any(i < before.get(x, -1) for x in mine.inputs):
                return mine.name, op.loc
            continue
        written = [k for k, x in enumerate(op.inputs) if i < before.get(x, -1)]
        if _saves_written(op, tuple(x in requires_grad for x in op.inputs), written, result):
            return op.name, op.loc
    return None
