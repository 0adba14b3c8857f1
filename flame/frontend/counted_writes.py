"""What a backward does with a tensor whose old value a node saved, written in place since through a
write torch's version counter counts and no gradient is recorded for: through `detach()` (which shares
the counter) or under no_grad. torch's node checks the version of each tensor it saved when its backward
runs, and raises there: exp's and sigmoid's nodes save their result, mul's saves the inputs whose
gradient the other one needs. (A write through `.data` is not counted: frontend/data_writes.py.)

Such a write leaves the tensor's old history in a stand-in (indexing._untracked), which the nodes
recorded before the write read in flame's recomputing backward. The stand-in is marked here (`mark`);
autograd._rebuild asks `refuse` of each node it runs, which raises torch's error where that node's VJP
reads a marked stand-in: as an input, or as its result."""

from __future__ import annotations

from flame._identity import ByIdentity
from flame.frontend.saved import saved_reads
from flame.frontend.tensor import Tensor

_COUNTED = ByIdentity()  # the marked stand-ins


def mark(old: Tensor) -> None:
    """old, the stand-in of a tensor's history from before a counted write with no gradient recorded."""
    _COUNTED[old] = True


def _counted(t) -> bool:
    return isinstance(t, Tensor) and t in _COUNTED


def refuse(op, node, t: Tensor, inputs: list, error) -> None:
    """Raise error(node) where op (the rebuilt op of tensor t's node, reading `inputs`) saved for its
    backward a value a counted write changed since: an input its VJP reads, or t, where it reads its
    result (the gradients of the inputs that require grad asked for, as torch's node saves)."""
    written = [k for k, x in enumerate(inputs) if _counted(x)]
    result = _counted(t)
    if not written and not result:
        return
    positions, reads_result = saved_reads(op, tuple(isinstance(x, Tensor) and x.requires_grad for x in inputs))
    if any(k in positions for k in written) or result and reads_result:
        raise error(node)
