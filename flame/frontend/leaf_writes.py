"""What an eager backward reads of a leaf whose buffer was written after an op used it. An eager
backward computes the forward again from the leaves (autograd._rebuild), so a write into a leaf's
buffer made with no gradient recorded (under no_grad, through detach(), or through .data, which shares
the buffer with a version counter of its own, as torch's) would change the values the backward sees.
torch's backward uses what its nodes saved at forward time: an intermediate value as it was computed
then; a saved leaf is the leaf itself (a write that bumped its version makes the backward raise; one
through .data is read as it is now).

So a write into a leaf's buffer that live nodes have read (dispatch.note_readers: a weak set of the
nodes per buffer, shared by the leaf, its views and its .data tensors) copies the old values once and
hands each such node a stand-in for that input: a tensor of the old values whose gradient flows to the
leaf (straight_through of the leaf and the copy). The backward recomputes through the stand-in, and
where the node's VJP reads the input itself it reads the leaf, or raises where the write bumped the
leaf's version (autograd._rebuild). Nothing is copied where no live node read the buffer, nor for a
node a backward without retain_graph has run (Node.spent): an eager loop's update after its backward,
its graph still bound, copies nothing."""

from __future__ import annotations

from flame.frontend.dispatch import Node
from flame.frontend.tensor import Tensor
from flame.ir.ops.elementwise import STRAIGHT_THROUGH


def keep_old_values(t: Tensor) -> None:
    """Before a write into t's buffer (t a leaf, or a .data tensor of one, never a view) that records
    no gradient: the nodes that read the buffer's tensors take stand-ins of their values now."""
    readers = t._readers
    if not readers:
        return
    copies: dict[int, Tensor] = {}
    for node in list(readers):
        if node.freed or node.spent:  # a backward took its gradient (through a freed one, another raises)
            continue
        olds = node.olds if node.olds is not None else {}
        for i, x in enumerate(node.inputs):
            if i in olds or not isinstance(x, Tensor) or x._node is not None or x._value is not None:
                continue
            owner = x._base if x._base is not None else x
            if owner._readers is not readers:
                continue
            if id(x) not in copies:
                copies[id(x)] = stand_in(x)
            olds[i] = copies[id(x)]
        node.olds = olds or None
    readers.clear()  # (each holds its stand-ins: a later write leaves them as they are)


def stand_in(x: Tensor, values=None) -> Tensor:
    """x's values now (or `values`, an array of x's shape: a copy taken earlier), with x's gradient where x
    requires one: straight_through(x, a copy of x). Its node reads x for the gradient alone, so x's version
    is not recorded (None): later writes leave it as it is."""
    old = Tensor._concrete(x._data.copy() if values is None else values, x.dtype)
    if not x.requires_grad:  # no gradient to pass (x may take a history later: never this node's)
        return old
    s = Tensor._concrete(old._data, x.dtype)
    s.requires_grad = True
    s._node = Node(STRAIGHT_THROUGH.name, {}, (x, old), (None, 0), None)
    return s
