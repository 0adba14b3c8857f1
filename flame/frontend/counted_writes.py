"""What a backward does with a tensor whose old value a node saved, written in place since through a
write torch's version counter counts and no gradient is recorded for: through `detach()` (which shares
the counter) or under no_grad. torch's node checks the version of each tensor it saved when its backward
runs, and raises there: exp's and sigmoid's nodes save their result, mul's saves the inputs whose
gradient the other one needs. (A write through `.data` is not counted: frontend/data_writes.py.)

Eagerly such a write leaves the tensor's old history in a stand-in (indexing._untracked), which the
nodes recorded before the write read in flame's recomputing backward. The stand-in is marked here
(`mark`); autograd._rebuild asks `refuse` of each node it runs, which raises torch's error where that
node's VJP reads a marked stand-in: as an input, or as its result.

While tracing, the write rebinds the tensor to a new value, and the ops recorded before it read the old
one, which `mark` adds to the trace's `counted` values. A backward in the trace (Trace.backward,
flame.autograd.grad, flame.grad) asks `refused` of the ops it runs and raises torch's error at the
first one that saved a counted value; a compiled forward whose backward runs outside keeps, per result,
the op a backward from it would refuse (Trace.refused_by_outputs), and raises when that backward runs
(compiled_outputs.Recompute)."""

from __future__ import annotations

from collections.abc import Iterable

from flame._identity import ByIdentity
from flame.errors import AutogradError
from flame.frontend.saved import saved_reads
from flame.frontend.tensor import Tensor
from flame.ir.graph import Op, Value

_COUNTED = ByIdentity()  # the marked stand-ins


def mark(old: Tensor, trace=None) -> None:
    """old, the stand-in of a tensor's history from before a counted write with no gradient recorded;
    while tracing (trace), the tensor itself before the write, whose value the ops recorded until then
    read (Trace.counted)."""
    if trace is not None:
        trace.counted.add(trace.value_of(old))
    else:
        _COUNTED[old] = True


def saved_modified_error(name: str, loc) -> AutogradError:
    """torch's error at backward: a tensor the node of op `name`, recorded at loc, saved for its backward
    (an input its VJP reads, or its result) was written in place after, by a write that bumped its
    version."""
    return AutogradError(f"one of the variables needed for gradient computation has been modified by an inplace "
                         f"operation: a tensor {name} saved for its backward was modified in place after it "
                         f"was used by {name}\n  at {loc}")


def _counted(t) -> bool:
    return isinstance(t, Tensor) and t in _COUNTED


def _saves_written(op: Op, needs: tuple, written: list[int], result: bool) -> bool:
    """Whether op's node, the gradients of its inputs at `needs` asked for, saved for its backward an
    input at a position in `written` or, where `result`, its result: a value a counted write changed."""
    if not written and not result:
        return False
    positions, reads_result = saved_reads(op, needs)
    return any(k in positions for k in written) or result and reads_result


def refuse(op, node, t: Tensor, inputs: list) -> None:
    """Raise torch's error where op (the rebuilt op of tensor t's node, reading `inputs`) saved for its
    backward a value a counted write changed since: an input its VJP reads, or t, where it reads its
    result (the gradients of the inputs that require grad asked for, as torch's node saves)."""
    needs = tuple(isinstance(x, Tensor) and x.requires_grad for x in inputs)
    if _saves_written(op, needs, [k for k, x in enumerate(inputs) if _counted(x)], _counted(t)):
        raise saved_modified_error(node.name, node.loc)


def refused(ops: Iterable[Op], counted: set[Value], requires_grad: set[Value]) -> Op | None:
    """Of `ops` (the traced ops a backward runs, in the order recorded), the first whose VJP reads a value
    a counted write replaced since (`counted`: Trace.counted), as an input or as its result, the
    gradients of its inputs that require grad (those in `requires_grad`) asked for, as the eager
    backward's first refused node (autograd._rebuild); None if none does."""
    if not counted:
        return None
    for op in ops:
        written = [k for k, x in enumerate(op.inputs) if x in counted]
        if _saves_written(op, tuple(x in requires_grad for x in op.inputs), written, op.out in counted):
            return op
    return None
