"""Value, Op and Graph: flame's SSA IR. Ops are kept in topological order; ops never mutate inputs
(ARCHITECTURE.md "Pure IR") — in-place updates are expressed as aliases from outputs to inputs."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from flame.ir.types import TensorType

ROLES = ("data", "param", "state", "scalar", "const")


class Value:
    """One SSA value: a TensorType and the op that produced it (None for graph inputs)."""

    __slots__ = ("type", "producer", "__weakref__")

    def __init__(self, type: TensorType, producer: Op | None = None):
        self.type = type
        self.producer = producer

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype

    def __repr__(self) -> str:
        what = self.producer.name if self.producer else "input"
        return f"<Value {self.type} from {what}>"


_new_value = object.__new__


class CheckpointLoc(str):
    """The `loc` of an op recorded inside `flame.utils.checkpoint(fn, ...)`: the backward recomputes
    its result instead of keeping it, unless it leaves the region (passes/remat.py). `region` tells
    the calls apart. Prints as a trailing `checkpoint N` on the op's line, regions numbered in order
    of appearance, so the mark is part of the IR text (and of every cache key made from it). `saved`:
    the region's policy keeps this result for the backward (a matmul's under "save_matmuls", a value
    tagged with a name the policy saves); it prints as `checkpoint N saved`."""

    def __new__(cls, text: str = "", region: int = 0, saved: bool = False):
        loc = super().__new__(cls, text)
        loc.region = region
        loc.saved = saved
        return loc


class BackwardLoc(str):
    """The `loc` autodiff stamps on the ops it appends: the forward op's text, marked as backward.
    Passes copy an op's `loc` object as it is, so the mark survives simplification and fusion and
    later stages (the memory report's "saved for backward") can tell the two phases apart. An op
    merged by CSE keeps the first op's loc: a value computed once in the forward stays forward."""

    __slots__ = ()


class RecomputeLoc(BackwardLoc):
    """The loc of an op the remat pass added: it recomputes a forward value inside the backward."""

    __slots__ = ()


def is_backward(op: Op) -> bool:
    """True for ops that autodiff appended (the backward part of a joint graph), recomputations included."""
    return isinstance(op.loc, BackwardLoc)


def is_recompute(op: Op) -> bool:
    """True for the ops the remat pass added to recompute a forward value inside the backward."""
    return isinstance(op.loc, RecomputeLoc)


class Op:
    """One operation: registry name, input values, frozen attributes, one result value.
    `loc` is the user's source line that created it ("train.py:14  logits = x @ w"), or None."""

    __slots__ = ("name", "inputs", "attrs", "out", "loc")

    def __init__(self, name: str, inputs: tuple[Value, ...], attrs: dict[str, Any],
                 out_type: TensorType, loc: str | None = None):
        self.name = name
        self.inputs = inputs if type(inputs) is tuple else tuple(inputs)
        self.attrs = dict(attrs) if attrs else {}
        out = self.out = _new_value(Value)  # (Value(out_type, self), written out: one per op built)
        out.type, out.producer = out_type, self
        self.loc = loc

    def __repr__(self) -> str:
        return f"<Op {self.name} -> {self.out.type}>"


def discard(ops: Iterable[Op], keep: Collection[Op] = ()) -> None:
    """Break the reference cycle between each op of `ops` (except those in `keep`) and its result, for
    ops that nothing will read again (the graph a pass replaced, a copy a rewrite threw away): the
    result's `producer` is deleted, so reference counting frees them as soon as their graph goes,
    instead of Python's cyclic collector scanning them (every op of a discarded graph is such a cycle).
    Reading `producer` of such a value afterwards raises AttributeError."""
    for op in ops:
        if op not in keep:
            del op.out.producer


class Kind(str, Enum):
    """What a fusion group is (FusionGroup.kind); codegen has one lowering per kind. A str, so a
    kind compares equal to its name and prints as it ("matmul", "rows")."""

    ELEMENTWISE = "elementwise"  # maps over one iteration domain (views and broadcasts inside)
    SCALAR = "scalar"  # 0-d work while the fusion pass runs; recorded as ELEMENTWISE
    ROWS = "rows"  # reductions over the innermost dims with their prologue and epilogue
    REDUCTION = "reduction"  # a column reduction in its own kernel
    MATMUL = "matmul"  # a library call (cuBLASLt) with its epilogue
    ATTENTION = "attention"  # a library call (cuDNN fused attention, forward or backward)
    COLLECTIVE = "collective"  # a library call (NCCL all-reduce, broadcast, all-gather, reduce-scatter)
    CONV = "conv"  # a library call (cuDNN convolution: forward, data or weight gradient)
    HOST = "host"  # a copy between device and pinned host memory (an offloaded activation)
    OPAQUE = "opaque"  # one op with its own kernel (gather, scatter, pad, concat, argmax)

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


@dataclass(frozen=True, eq=False)
class FusionGroup:
    """Ops that run as one kernel (or one library call), recorded by the fusion pass. kind:
    elementwise, rows, matmul, reduction or opaque; `reason`: why the kernel boundary around the group
    exists; `outputs`: the values the group must write (read by other groups or returned); `epilogue`:
    what a matmul group folds into the library call (none, bias, relu, bias_relu); `update`: an
    optimizer's update that the fusion pass scheduled for the side stream (Target.side_stream: it
    writes only parameters and state in place, and values the step returns, that nothing else reads)."""

    ops: tuple[Op, ...]
    kind: Kind
    reason: str
    outputs: tuple[Value, ...] = ()
    epilogue: str = "none"
    update: bool = False


def segments(ops: list[Op]) -> list[list[Op]]:
    """Connected parts of the group's data-flow graph (one per horizontally fused kernel)."""
    parent = {op: op for op in ops}
    prod = {op.out: op for op in ops}

    def find(x):
        while parent[x] is not x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for op in ops:
        for v in op.inputs:
            if v in prod:
                parent[find(op)] = find(prod[v])
    parts: dict[Op, list[Op]] = {}
    for op in ops:
        parts.setdefault(find(op), []).append(op)
    return list(parts.values())


class SubGraph:
    """A graph held as an op's attribute (kind "graph"): attention's score modification and its
    gradient. Immutable by convention; equal and hashed by its printed text, so ops carrying one
    compare, hash (CSE, cache keys) and print like any other attribute. In IR text it is the graph's
    text on one line, lines separated by `;` (printer.format_attr, parser.parse_attr_value)."""

    __slots__ = ("graph", "text")

    def __init__(self, graph: Graph):
        self.graph = graph
        self.text = str(graph)  # print_graph, bound onto Graph by flame/ir/__init__.py

    def __eq__(self, other) -> bool:
        return isinstance(other, SubGraph) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"<SubGraph {self.graph.name}: {len(self.graph.ops)} ops>"


@dataclass(eq=False)
class Graph:
    """A function in SSA form. `aliases` maps an output index to the input index whose buffer that
    output replaces after the call (an in-place update, e.g. a parameter after an optimizer step).
    str(g) is its text (printer.print_graph, bound onto Graph by flame/ir/__init__.py)."""

    name: str = "main"
    inputs: list[Value] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    aliases: dict[int, int] = field(default_factory=dict)
    groups: list[FusionGroup] | None = None  # set by the fusion pass; ops of a group are contiguous

    def add_input(self, type: TensorType, role: str = "data") -> Value:
        if role not in ROLES:
            raise ValueError(f"unknown input role {role!r}; expected one of {ROLES}")
        v = Value(type)
        self.inputs.append(v)
        self.roles.append(role)
        return v

    def users(self) -> dict[Value, list[Op]]:
        """Map each value to the ops that read it, in program order."""
        out: dict[Value, list[Op]] = {v: [] for v in self.inputs}
        for op in self.ops:
            out.setdefault(op.out, [])
            for v in op.inputs:
                out.setdefault(v, []).append(op)
        return out

    def updated(self) -> dict[Value, Value]:
        """Each output that updates an input in place (aliases), with that input."""
        return {self.outputs[o]: self.inputs[i] for o, i in self.aliases.items()}

    def numbering(self) -> dict[Value, int]:
        """Deterministic value numbers: inputs first, then op results in order."""
        ids: dict[Value, int] = {}
        for v in self.inputs:
            ids[v] = len(ids)
        for op in self.ops:
            ids[op.out] = len(ids)
        return ids

    def copy(self) -> Graph:
        """A structural copy with fresh Values (passes may then edit it freely)."""
        g = Graph(self.name)
        m: dict[Value, Value] = {}
        for v, r in zip(self.inputs, self.roles):
            m[v] = g.add_input(v.type, r)
        ops, renamed = g.ops, m.__getitem__
        for op in self.ops:
            new = Op(op.name, tuple(map(renamed, op.inputs)), op.attrs, op.out.type, op.loc)
            ops.append(new)
            m[op.out] = new.out
        g.outputs = [m[v] for v in self.outputs]
        g.aliases = dict(self.aliases)
        if self.groups is not None:
            ops = {op.out: m[op.out].producer for op in self.ops}
            g.groups = [FusionGroup(tuple(ops[o.out] for o in k.ops), k.kind, k.reason,
                                    tuple(m[v] for v in k.outputs), k.epilogue, k.update) for k in self.groups]
        return g
