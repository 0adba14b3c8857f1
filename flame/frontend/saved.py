"""What a backward frees: torch frees the saved tensors of the nodes a backward runs, so a second
backward through one of them raises, while a node that saves none (a view, a cat, a sum, an add) can
be passed again. flame keeps no saved tensors of its own (the gradient graph reads forward values);
an op "saves" what its VJP reads, found by running that VJP once per op signature."""

from __future__ import annotations

from collections.abc import Iterable

from flame.ir.builder import Builder
from flame.ir.graph import Graph, Op, Value, is_backward
from flame.ir.registry import REGISTRY
from flame.passes.autodiff import autodiff


def reads(ops: Iterable[Op]) -> set[Value]:
    """The values the backward ops among `ops` (the ones autodiff appended) read, directly or through
    the forward values the pass added for them (residuals, constants)."""
    read: set[Value] = set()
    todo = [v for op in ops if is_backward(op) for v in op.inputs]
    while todo:
        v = todo.pop()
        if v not in read:
            read.add(v)
            if v.producer is not None and not is_backward(v.producer):
                todo.extend(v.producer.inputs)
    return read


_READS: dict[tuple, tuple[frozenset, bool]] = {}
_READS_KEPT = 4096  # answers kept (each size of a dynamic dim is a signature of its own)


def _vjp_reads(op: Op) -> tuple[frozenset, bool]:
    """(the positions of the inputs op's VJP reads, whether it reads the result), from its VJP run once
    on an op of the same name, attributes and input types (a Python number's constant is an input, as
    torch saves a wrapped number)."""
    key = (op.name, repr(sorted(op.attrs.items())), tuple(x.type for x in op.inputs))
    if key not in _READS:
        g = Graph("saves")
        ins = [g.add_input(x.type) for x in op.inputs]
        out = Builder(g).emit(op.name, *ins, **op.attrs)
        wrt = [x for x in ins if x.dtype.is_float]
        got = set()
        if out.dtype.is_float and wrt and REGISTRY[op.name].vjp is not None:
            autodiff(g, out, wrt, g.add_input(out.type))
            got = reads(g.ops)
        if len(_READS) >= _READS_KEPT:
            _READS.clear()
        _READS[key] = (frozenset(i for i, x in enumerate(ins) if x in got), out in got)
    return _READS[key]


def saves(op: Op, read: set[Value]) -> bool:
    """Whether a backward that read `read` ran op's VJP and read what it saves. A user Function's op
    (its VJP is the user's backward, not run here) saves whenever the backward read one of its values."""
    if REGISTRY[op.name].call_result:
        return op.out in read or any(x in read for x in op.inputs)
    positions, result = _vjp_reads(op)
    return (result and op.out in read) or any(op.inputs[i] in read for i in positions)
