"""How the reference executor evaluates one kernel's ops: as independent segments, alike segments
together. A kernel's ops fall into segments, the connected parts of its dataflow (a multi-tensor
optimizer update: one per parameter, each the same dozen elementwise ops). Segments that compute
alike (the same ops, attributes, dtypes and wiring; only their tensors' shapes differ) run each op
once for all of them: per-element values concatenated flat, per-segment scalars side by side in a
vector (repeated per element where an op mixes the two), values that are the same in every segment
(constants) once. NumPy's elementwise loops compute every element alike whatever the array
around it, so the results equal the segments' one by one, bit for bit (tests/runtime/
test_reference_segments.py checks it); the tiny GPT's AdamW update on the CPU took ~680 NumPy calls
per step, one per op and parameter, and now takes a few dozen. Every segment's results are written
after every segment has read its inputs, as the kernel does (an output may take an input's bytes)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from flame.ir.evaluate import compute_op
from flame.ir.graph import Op, Value
from flame.ir.registry import REGISTRY, is_relabel
from flame.plan.steps import KernelLaunch, Plan

CONST, SEG, ELEM = 0, 1, 2  # a value the same in every segment, a scalar per segment, a tensor per segment
BATCH_MAX = 1 << 15  # elements per tensor of a batched segment: past it an op's own cost outweighs its
# call's, and concatenating and splitting the segments' tensors would cost more than it saves


def kernel_function(s: KernelLaunch, plan: Plan) -> Callable[[dict], None]:
    """The kernel as a function of a run's buffers (buffer id -> array): its ops computed from the
    buffers it reads, its outputs written (only those: a fused kernel writes args[n_inputs:...])."""
    if s.part[0] != s.part[1] - 1:
        return lambda bufs: None  # an earlier part of a multi-kernel op: the op completes at its last part
    if s.n_outputs == 1:
        written = {s.ops[-1].out: s.out}
    else:
        outs = set(s.outputs)
        written = {op.out: plan.buffer_of[op.out] for op in s.ops if plan.buffer_of.get(op.out) in outs}
    groups: dict[tuple, list[_Segment]] = {}
    singles: list[_Segment] = []
    for ops in _segments(s.ops):
        seg = _Segment(ops, plan.buffer_of, written)
        (groups.setdefault(seg.signature, []) if seg.signature is not None else singles).append(seg)
    runs = [(_batched if len(g) > 1 else _one_by_one, g) for g in groups.values()]
    runs += [(_one_by_one, [x]) for x in singles]

    def run(bufs: dict) -> None:
        writes: list = []
        for fn, segs in runs:
            fn(segs, bufs, writes)
        for dst, value in writes:
            np.copyto(bufs[dst], value)

    return run


def _segments(ops: tuple[Op, ...]) -> list[list[Op]]:
    """The connected parts of the ops' dataflow (through values computed inside), each in op order."""
    parent = list(range(len(ops)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    made = {op.out: i for i, op in enumerate(ops)}
    for i, op in enumerate(ops):
        for v in op.inputs:
            if v in made:
                parent[root(i)] = root(made[v])
    parts: dict[int, list[Op]] = {}
    for i, op in enumerate(ops):
        parts.setdefault(root(i), []).append(op)
    return list(parts.values())


class _Segment:
    """One segment: its ops, the values it reads from buffers (in first-use order), what it writes
    (local value index -> buffer), and its signature (None: it runs one op at a time): the ops'
    names, attributes, dtypes and wiring with each value's kind. Every value of a batched segment is a
    scalar or has the segment's one element count n (more than 1, at most BATCH_MAX)."""

    def __init__(self, ops: list[Op], buffer_of: dict, written: dict):
        self.ops = ops
        local = {op.out: j for j, op in enumerate(ops)}
        self.reads: list[int] = []  # buffer ids
        read_at: dict[Value, int] = {}
        self.wiring: list[tuple] = []  # per op: ((True, local op index) | (False, read index), ...)
        for op in ops:
            refs = []
            for v in op.inputs:
                if v in local and local[v] < local[op.out]:
                    refs.append((True, local[v]))
                else:
                    if v not in read_at:
                        read_at[v] = len(self.reads)
                        self.reads.append(buffer_of[v])
                    refs.append((False, read_at[v]))
            self.wiring.append(tuple(refs))
        # the segment's own outputs, in op order as `written` lists them (a look-up per op of the segment,
        # not a scan of every value a horizontal kernel writes)
        self.writes = [(j, written[op.out]) for j, op in enumerate(ops) if op.out in written]
        self.fixed = [_constant(op) if not op.inputs and not REGISTRY[op.name].random else None for op in ops]
        self.read_values = list(read_at)
        self.n = 0
        self.signature = self._signature()

    def _kind(self, shape: tuple) -> int | None:
        if shape == ():
            return SEG
        n = math.prod(shape)
        if n <= 1 or n > BATCH_MAX or (self.n and n != self.n):
            return None
        self.n = n
        return ELEM

    def _signature(self) -> tuple | None:
        read_kinds = [self._kind(v.type.shape) for v in self.read_values]
        if None in read_kinds:
            return None
        kinds: list[int] = []
        sig = [tuple((v.dtype.name, k) for v, k in zip(self.read_values, read_kinds))]
        for op, refs in zip(self.ops, self.wiring):
            opdef = REGISTRY[op.name]
            relabel = opdef.view is not None and opdef.view.relabel  # (is_relabel, is_fill of the OpDef at hand)
            if opdef.random or opdef.positional or opdef.category not in ("elementwise", "movement") or \
                    (opdef.category == "movement" and not relabel) or (opdef.constant and op.out.shape):
                return None
            ins = [kinds[j] if inner else read_kinds[j] for inner, j in refs]
            kind = self._kind(op.out.shape)
            if kind is None or (kind == SEG and ELEM in ins):
                return None
            if kind == SEG and all(k == CONST for k in ins):
                kind = CONST  # full, or arithmetic on constants: the same in every segment
            kinds.append(kind)
            attrs = () if relabel or not op.attrs else tuple(sorted((k, repr(v)) for k, v in op.attrs.items()))
            sig.append((op.name, attrs, op.out.dtype.name, kind, refs))  # a batched relabelling view moves nothing: any
            # target shape runs alike (a bias's gradient arrives as [1, 1, n] whatever its n)
        self.kinds = kinds
        sig.append(tuple(j for j, _ in self.writes))
        return tuple(sig)


def _one_by_one(segs: list[_Segment], bufs: dict, writes: list) -> None:
    for seg in segs:
        env: list = []
        for op, refs, fixed in zip(seg.ops, seg.wiring, seg.fixed):
            if fixed is None:
                env.append(compute_op(op, [env[j] if inner else bufs[seg.reads[j]] for inner, j in refs]))
            else:
                env.append(fixed())
        writes += [(b, env[j]) for j, b in seg.writes]


def _constant(op: Op) -> Callable[[], np.ndarray]:
    """An op without inputs that draws nothing (full, arange): its value, computed at its first run
    and kept read-only (it is the same at every run; ~40 per step of the tiny GPT)."""
    kept: list = []

    def value() -> np.ndarray:
        if not kept:
            with np.errstate(all="ignore"):
                out = compute_op(op, [])
            out.flags.writeable = False
            kept.append(out)
        return kept[0]

    return value


def _batched(segs: list[_Segment], bufs: dict, writes: list) -> None:
    """Alike segments' ops once each: ELEM values flat ([sum of n]), SEG values as [len(segs)]."""
    first = segs[0]
    sizes = np.array([seg.n for seg in segs])
    ends = np.cumsum(sizes)
    total, count = int(ends[-1]), len(segs)
    reads = []
    for j, v in enumerate(first.read_values):
        arrays = [bufs[seg.reads[j]] for seg in segs]
        reads.append((ELEM, np.concatenate([a.reshape(-1) for a in arrays])) if v.type.shape else
                     (SEG, np.stack(arrays)))
    env: list = []
    for op, refs, kind in zip(first.ops, first.wiring, first.kinds):
        ins = [env[j] if inner else reads[j] for inner, j in refs]
        if is_relabel(op):
            env.append((kind, ins[0][1]))  # the same values in the same order
            continue
        args = [np.repeat(a, sizes) if k == SEG and kind == ELEM else a for k, a in ins]
        shape = {CONST: op.out.shape, SEG: (count,), ELEM: (total,)}[kind]
        env.append((kind, compute_op(op, args, shape)))
    for i, seg in enumerate(segs):
        start = int(ends[i]) - seg.n
        for j, b in seg.writes:
            kind, value = env[j]
            writes.append((b, value[start: start + seg.n].reshape(bufs[b].shape) if kind == ELEM else
                           value[i] if kind == SEG else value))
