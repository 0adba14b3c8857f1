"""Graph -> Plan. This module owns the plan builder: `to_plan(g)` builds the steps and then places
the buffers (flame.plan.memory).

build_plan(graph) walks the fusion groups (or, on an unfused graph, the ops) once: a KernelLaunch per
kernel codegen renders for a group or op (rendered here; `_lower` is the one place that calls
codegen, and for a GPU target each kernel's NVRTC compile starts in the background as it is
rendered, codegen.nvrtc.compile_ahead), a library-call step for an op with the `library` trait (LIBRARY_CALLS;
matmul: a MatmulCall, with its epilogue when the fusion pass marked one and the target's library fuses
it: bias, activation, the pre-activation as aux result, an operand's bias gradient), an Alias for
relabelling view ops (reshape/squeeze/unsqueeze) and order-keeping permutes (every flame buffer is
contiguous, so those are views and need no kernel), and a Copy where an output must not share memory
with an input or another output. A matmul operand produced by a transpose of the last two axes that
runs as its own kernel is read untransposed with ta/tb set (`fold_transposes`), and that kernel is
skipped when every user folds it. Likewise an attention operand made by views is read through
strides from the views' root buffer, and an attention result written into the buffer of the
permuted value its consumers read (flame.plan.views.fold_attention_views): those views run no step.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import warnings
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np

from flame.errors import DeterminismError
from flame.ir import symbolic
from flame.ir.dtypes import DType
from flame.ir.graph import FusionGroup, Graph, Kind, Op, Value
from flame.ir.indexmap import swaps_last_two
from flame.ir.ops.attention import BACKWARD, FORWARD, extras_of, mask_of
from flame.ir.ops.collective import REDUCE_SCATTER
from flame.ir.ops.host import OFFLOAD
from flame.ir.printer import format_op, op_key, op_tails
from flame.ir.registry import epilogue_role, gemm_bias, get, reads_transposed
from flame.plan.memory import plan_memory
from flame.plan.steps import (
    Alias,
    AttentionCall,
    Buffer,
    CollectiveCall,
    ConvCall,
    Copy,
    HostCopy,
    KernelLaunch,
    MatmulCall,
    Plan,
    Step,
    Wait,
    byte_offset,
    root,
)
from flame.plan.views import STRIDED_INPUTS, fold_attention_views, view_start
from flame.target import DEFAULT_TARGET, Target

ROLE_OF_INPUT = {"data": "input", "param": "param", "state": "state", "scalar": "scalar", "const": "const"}
_U8 = DType("u8", np.dtype(np.uint8), "unsigned char", "unsigned char", "int")  # scratch bytes


def to_plan(g: Graph, lowering: Callable | None = None, target: Target | None = None) -> Plan:
    """Graph -> runnable Plan: build the steps (build_plan, with `lowering(op)` in place of codegen's
    lowering of single ops if given, for `target`), then place every buffer (plan_memory: in-place
    updates, best-fit arena). Executors compile what this returns."""
    return plan_memory(build_plan(g, lowering, target))


@dataclasses.dataclass
class KernelMemo:
    """The kernels of each lowering of a plan made while recording (flame.ir.symbolic.recording), in
    the builder's order, with the guards their rendering recorded: a plan of the same graph at
    another size reuses each whose guards hold there and renders the others again (`rerendered`:
    "kernel: why"). `size`: None while recording, the size being built when reusing."""

    entries: list = dataclasses.field(default_factory=list)  # (Guards, kernels) per lowering
    size: int | None = None
    at: int = 0
    rerendered: list = dataclasses.field(default_factory=list)


_MEMO: contextvars.ContextVar[KernelMemo | None] = contextvars.ContextVar("flame_kernel_memo", default=None)


@contextmanager
def kernel_memo(memo: KernelMemo):
    """Within: _lower records its kernels into memo (memo.size None) or reuses them (see KernelMemo)."""
    token = _MEMO.set(memo)
    try:
        yield memo
    finally:
        _MEMO.reset(token)


def _lower(item: Op | FusionGroup, lowering: Callable | None,
           renders: Renders | None = None) -> tuple[tuple[Value, ...], list]:
    """The kernels codegen renders for one op or one fusion group, and the values they read in
    argument order: the one place the builder calls codegen (a single op is a group of one).
    `lowering(op)` replaces codegen for single ops when given. `renders`: the kernels rendered so far
    for this plan, by canonical group (a group alike to one rendered before takes its kernels)."""
    from flame.codegen import kernel_inputs, single

    if isinstance(item, Op):
        if lowering is not None:
            return item.inputs, lowering(item)
        item = single(item)
    memo = _MEMO.get()
    if memo is None:
        inputs = tuple(kernel_inputs(item))
        if renders is None or symbolic.current() is not None:
            return inputs, _render(item)
        return inputs, renders.render(item, inputs)
    if memo.size is None:  # recording: this lowering's decisions on the size are its own guards
        with symbolic.recording() as guards:
            kernels = _render(item)
        memo.entries.append((guards, kernels))
        return tuple(kernel_inputs(item)), kernels
    guards, kernels = memo.entries[memo.at]
    memo.at += 1
    why = guards.failed(memo.size)
    if not why:
        return tuple(kernel_inputs(item)), [at_size(k, memo.size) for k in kernels]
    kernels = _render(item)
    memo.rerendered.extend(f"{k.name}: {why}" for k in kernels)
    return tuple(kernel_inputs(item)), kernels


@dataclasses.dataclass
class Renders:
    """The kernels rendered while building one plan, by canonical group (`canonical_group`): a group
    alike to one rendered before (the same ops on the same types, wired the same way, the same kind,
    boundary reason, epilogue and outputs: a repeated block of a model) takes the kernels rendered for
    the first one, which codegen would render again to the same sources. `reused`: per canonical
    group rendered more than once, the first group's kernel names and how many groups reused them.
    A group's canonical key is made only once a second group of its outline (`_outline`: what the
    key tells at a glance) comes: the first of each outline waits in `alone` with its kernels (a
    multi-tensor update of thousands of ops is the only one of its outline, and its key is never made)."""

    kernels: dict = dataclasses.field(default_factory=dict)  # canonical group -> kernels
    reused: dict = dataclasses.field(default_factory=dict)  # canonical group -> (kernel names, reuses)
    early: set = dataclasses.field(default_factory=set)  # rendered ahead of their turn, not yet asked for
    alone: dict = dataclasses.field(default_factory=dict)  # outline -> (group, inputs, kernels, early)
    keyed: set = dataclasses.field(default_factory=set)  # outlines whose groups' keys are made

    def _key(self, item: FusionGroup, inputs: tuple[Value, ...]) -> tuple[tuple | None, tuple]:
        """(item's canonical key, or None where no group of its outline came before; its outline).
        The key of the group waiting alone with that outline is made now too, and kept as it would
        have been at its render."""
        outline = _outline(item, inputs)
        first = self.alone.pop(outline, None)
        if first is None and outline not in self.keyed:
            return None, outline
        if first is not None:
            self.keyed.add(outline)
            group, ins, kernels, early = first
            key = canonical_group(group, ins)
            self.kernels[key] = kernels
            if early:
                self.early.add(key)
        return canonical_group(item, inputs), outline

    def render(self, item: FusionGroup, inputs: tuple[Value, ...]) -> list:
        first = self.alone.get(_outline(item, inputs))
        if first is not None and first[0] is item and first[3]:  # its own turn (render_early rendered it)
            self.alone[_outline(item, inputs)] = (*first[:3], False)
            return first[2]
        key, outline = self._key(item, inputs)
        if key is None:
            kernels = _render(item)
            self.alone[outline] = (item, inputs, kernels, False)
            return kernels
        kernels = self.kernels.get(key)
        if kernels is None:
            kernels = self.kernels[key] = _render(item)
        elif key in self.early:  # its own turn (render_early rendered it): not a reuse
            self.early.discard(key)
        else:
            names, n = self.reused.get(key, (tuple(k.name for k in kernels), 0))
            self.reused[key] = (names, n + 1)
        return kernels

    def render_early(self, item: FusionGroup, inputs: tuple[Value, ...]) -> list:
        """item's kernels rendered before its turn in the step (render gives them back at its turn)."""
        key, outline = self._key(item, inputs)
        if key is None:
            kernels = _render(item)
            self.alone[outline] = (item, inputs, kernels, True)
            return kernels
        if key not in self.kernels:
            self.kernels[key] = _render(item)
            self.early.add(key)
        return self.kernels[key]


def _outline(group: FusionGroup, inputs: tuple[Value, ...]) -> tuple:
    """What a group's canonical key (canonical_group) tells at a glance: groups of two outlines never
    have one key."""
    ops = group.ops
    return (group.kind, group.reason, group.epilogue, group.update, len(ops), ops and ops[0].name,
            ops and ops[-1].name, len(inputs), len(group.outputs))


def canonical_group(group: FusionGroup, inputs: tuple[Value, ...]) -> tuple:
    """What codegen's rendering of `group` depends on, with values numbered from the kernel's inputs
    (so the same work in another block of the model, on other values, gives the same key): its ops as
    IR text, its inputs' types, which values it writes, its kind, reason, epilogue and update mark,
    and the settings codegen reads (codegen.kernel.codegen_settings)."""
    from flame.codegen.kernel import codegen_settings

    local = {v: i for i, v in enumerate(inputs)}
    lines = []
    for op in group.ops:
        for v in (*op.inputs, op.out):
            if v not in local:
                local[v] = len(local)
        lines.append(op_key(op, local))
    return (str(group.kind), group.reason, group.epilogue, group.update, codegen_settings(),
            tuple(str(v.type) for v in inputs), tuple(local.get(v, -1) for v in group.outputs), tuple(lines))


def _render(item: FusionGroup) -> list:
    """codegen's kernels for item; rendered with the size's value where they cannot take it as a
    parameter (flame.ir.symbolic.NotSymbolic: noted in the rendering's per_size)."""
    from flame.codegen import lower

    ctx = symbolic.current()
    try:
        return lower(item)
    except symbolic.NotSymbolic as e:  # this kernel bakes the size in: rendered (and compiled) per size
        if ctx is None:
            raise
        with symbolic.rendering(None):
            kernels = lower(item)
        ctx.per_size.extend(f"{k.name}: {e}" for k in kernels)
        return kernels


def at_size(x, s: int):
    """x (a kernel, a plan step or buffer, a tuple of them, a number) with every function of the
    size (flame.ir.symbolic: SymInt, SizeExpr, SymFloat) evaluated at size s."""
    if isinstance(x, int | float) and not isinstance(x, bool):
        return symbolic.value_at(x, s)
    if isinstance(x, tuple):
        return tuple(at_size(v, s) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        changed = {f.name: at_size(getattr(x, f.name), s) for f in dataclasses.fields(x)
                   if isinstance(getattr(x, f.name), int | float | tuple) and f.name != "ops"}
        return dataclasses.replace(x, **{k: v for k, v in changed.items() if v is not getattr(x, k)})
    return x


class _Builder:
    """Accumulates buffers and steps while walking the graph once."""

    def __init__(self, g: Graph, lowering: Callable | None, target: Target):
        self.g, self.lowering, self.target = g, lowering, target
        self.ids = g.numbering()
        self.next_id = len(self.ids)
        self.buffers: dict[int, Buffer] = {}
        self.steps: list[Step] = []
        self.buffer_of: dict[Value, int] = {}
        self.temp_roots: set[int] = set()
        self.renders = Renders()  # kernels rendered so far, by canonical group (a repeated block's reuse them)
        users = g.users()
        self.strided = fold_attention_views(g, target.attention_layout_unsupported, users)  # views attention reads
        # transposes that every matmul user reads with ta/tb instead; not one an attention call writes
        # its result through (its input then has no buffer: the call fills the transpose's own)
        self.folded = {v for v in fold_transposes(g, users) if v.producer not in self.strided.skipped}

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def add(self, bid: int, v: Value | None, role: str, *, shape=None, dtype=None, nbytes=None, **kw) -> int:
        dtype = dtype or v.type.dtype
        shape = tuple(shape if shape is not None else v.type.shape)
        nbytes = nbytes if nbytes is not None else math.prod(shape) * dtype.itemsize
        self.buffers[bid] = Buffer(bid, nbytes, dtype, shape, role, **kw)
        if v is not None:
            self.buffer_of[v] = bid
        return bid

    def temporary(self, v: Value) -> int:
        """A fresh arena buffer for value v."""
        bid = self.add(self.ids[v], v, "temporary")
        self.temp_roots.add(bid)
        return bid

    def launches(self, kernels: list, ins: tuple[int, ...], outs: tuple[int, ...], ops: tuple[Op, ...],
                 grp: FusionGroup | None = None, reason: str = "", side: bool = False,
                 in_place_safe: bool = True) -> None:
        """One KernelLaunch per kernel (args: ins, outs, then one scratch buffer sized for the
        largest workspace any part needs, e.g. a split reduction's partials). A fused kernel (`grp`)
        carries the group's boundary reason and says whether it is in-place safe; a one-op kernel
        always is (each thread reads its elements before it writes them) and carries `reason`, the
        fusion pass's reason when it formed a group of that one op ("" on an unfused graph)."""
        sid = self.scratch(max((k.scratch for k in kernels), default=0))
        extra = () if sid is None else (sid,)
        if self.target.deterministic and not all(k.deterministic for k in kernels):
            _nondeterministic(self.target.deterministic, ops)
        for i, k in enumerate(kernels):
            if self.target.arch:  # planned for a GPU: its compile starts now, beside the planning
                from flame.codegen.nvrtc import compile_ahead

                compile_ahead(k.source, self.target.arch, k.name)
            self.steps.append(KernelLaunch(k.name, k.source, k.grid, k.block, k.smem, ins + outs + extra,
                                           k.n_inputs, ops, (i, len(kernels)), len(outs),
                                           grp.reason if grp else reason,
                                           k.in_place_safe if grp else in_place_safe,
                                           k.sizes, side))

    def scratch(self, nbytes: int) -> int | None:
        """A fresh scratch buffer of nbytes in the arena (a kernel's or a library call's workspace,
        live only during its step), or None for 0 bytes."""
        if not nbytes:
            return None
        sid = self.add(self.new_id(), None, "scratch", shape=(nbytes,), dtype=_U8, nbytes=nbytes)
        self.temp_roots.add(sid)
        return sid

    def op(self, op: Op, reason: str = "") -> None:
        """The steps of one op lowered on its own; `reason`: why the fusion pass left it alone."""
        if op.out in self.folded or op in self.strided.skipped:
            return  # no kernel: every user reads op's input transposed (matmul) or strided (attention)
        bid = self.ids[op.out]
        start = view_start(op)
        if start is not None:
            src = self.buffer_of[op.inputs[0]]
            self.add(bid, op.out, "view", base=src, view_at=start * op.out.type.dtype.itemsize)
            self.steps.append(Alias(src, bid, op, start))
            return
        library = get(op.name).library
        if library == "attention" and self.target.attention_kernel(op):
            flash_steps(self, op, self.temporary(op.out))
            return
        if library:
            bid = self.temporary(self.strided.stored_in(op))
            self.steps.append(LIBRARY_CALLS[library](self, op, bid))
            return
        self.temporary(op.out)
        try:
            inputs, kernels = _lower(op, self.lowering, self.renders)
        except NotImplementedError as e:
            raise NotImplementedError(f"no kernel for {format_op(op, self.ids)}: {e}") from None
        self.launches(kernels, tuple(self.buffer_of[v] for v in inputs), (bid,), (op,), reason=reason)


def fold_transposes(g: Graph, users: dict | None = None) -> set[Value]:
    """Results of permutes that swap the last two axes, are read only by matmuls (and are not graph
    outputs) and run as their own kernel: each matmul reads the permute's input with ta/tb set, so
    no kernel runs. A permute fused into a larger kernel stays: that kernel runs anyway, and its
    input may live only inside it (no buffer to read). users: g.users(), where the caller has it."""
    users, outs = g.users() if users is None else users, set(g.outputs)
    alone = None if g.groups is None else {grp.ops[0] for grp in g.groups if len(grp.ops) == 1}
    return {op.out for op in g.ops if swaps_last_two(op) and op.out not in outs and users[op.out]
            and all(map(reads_transposed, users[op.out])) and (alone is None or op in alone)}


def matmul_call(bld: _Builder, op: Op, out: int, epilogue: str = "none", bias: int | None = None,
                aux: int | None = None, bgrad: int | None = None) -> MatmulCall:
    """The cuBLASLt call of matmul `op` writing buffer `out`. An operand in bld.folded is replaced by
    the permute's input with ta / tb set. epilogue: "none" or one of flame.target.MATMUL_EPILOGUES,
    with the buffers of its bias [n], aux (the pre-activation) and bgrad (the operand's sum over k).
    A GEMM with a bias of its own (matmul_bias) always runs the bias epilogue, with that bias."""
    operands, flags = [], {}
    for v, flag in zip(op.inputs, ("ta", "tb")):
        flags[flag] = v in bld.folded
        operands.append(bld.buffer_of[v.producer.inputs[0] if flags[flag] else v])
    own = gemm_bias(op)
    if own is not None:
        epilogue, bias = "bias" if epilogue == "none" else epilogue, bld.buffer_of[own]
    scales = {} if own is not None else {k: bld.buffer_of[v] for k, v in zip(("a_scale", "b_scale"), op.inputs[2:])}
    return MatmulCall.of(op, operands[0], operands[1], out, epilogue=epilogue, bias=bias, aux=aux, bgrad=bgrad,
                         **scales,
                         workspace=bld.scratch(bld.target.matmul_workspace(op, epilogue, flags["ta"], flags["tb"])),
                         **flags)


def attention_call(bld: _Builder, op: Op, out: int, stats_op: Op | None = None) -> AttentionCall:
    """The fused-attention call of a scaled_dot_product_attention(_stats, _backward) op writing
    buffer `out` and, for a forward with `stats_op` (its softmax statistics, joined by the fusion
    pass), their buffer too; with the workspace the target's library asks for as scratch in the arena.
    Operands made by views are read from their root's buffer through strides, and results written
    into the buffer their views make, where flame.plan.views folded them (the layouts)."""
    folded, ins, layouts = bld.strided, [], []
    for v, name in zip(op.inputs, STRIDED_INPUTS[op.name] + ("stats",) * (op.name == BACKWARD)):
        root, lay = folded.at.get(v, (v, None))
        ins.append(bld.buffer_of[root])
        if lay is not None:
            layouts.append((name, lay.start, lay.strides))
    ins += [bld.buffer_of[v] for v in op.inputs[len(ins):]]  # q, k, v[, out, grad_out, stats][, mask]
    if op.out in folded.at:
        layouts.append(("o", folded.at[op.out][1].start, folded.at[op.out][1].strides))
    if op in folded.grads:
        layouts += [(n, p.start, p.strides) for n, p in zip(("dq", "dk", "dv"), folded.grads[op][1])]
    m = mask_of(op)
    mask = None if m is None else bld.buffer_of[m]
    ws = bld.scratch(bld.target.attention_workspace(op, stats_op is not None, tuple(layouts)))
    extras = tuple(bld.buffer_of[v] for v in extras_of(op))
    if op.name == BACKWARD:
        return AttentionCall(*ins[:3], out, op, o=ins[3], grad_out=ins[4], stats=ins[5], mask=mask, workspace=ws,
                             layouts=tuple(layouts), extras=extras)
    stats = None if stats_op is None else bld.temporary(stats_op.out)
    return AttentionCall(*ins[:3], out, op, stats=stats, mask=mask, workspace=ws, stats_op=stats_op,
                         layouts=tuple(layouts), extras=extras)


FLASH_REASON = "generated flash-attention kernel (FLAME_ATTENTION chose it)"


def flash_steps(bld: _Builder, op: Op, out: int, stats_op: Op | None = None) -> None:
    """The generated flash-attention launches of a forward (writing buffer `out` and, with `stats_op`,
    the statistics' buffer; else the statistics go to scratch) or of a backward (its three kernels
    sharing one scratch buffer) or of a stats op standing alone (the forward's output to scratch), where
    the Target says the op runs so (Target.attention_kernel)."""
    from flame.codegen import flash_attention

    ins = tuple(bld.buffer_of[v] for v in op.inputs)
    if op.name == BACKWARD:
        kernels, outs, ops = flash_attention.lower_backward(op), (out,), (op,)
    else:
        kernels = flash_attention.lower_forward(op, with_stats=stats_op is not None, arch=bld.target.arch)
        outs = (out,) if stats_op is None else (out, bld.temporary(stats_op.out))
        ops = (op,) if stats_op is None else (op, stats_op)
    bld.launches(kernels, ins, outs, ops, reason=FLASH_REASON, in_place_safe=False)


def collective_call(bld: _Builder, op: Op, out: int) -> CollectiveCall:
    """The communicator call of a collective op writing buffer `out`. A reduce_scatter of several
    inputs packs them into a scratch buffer of the packed size (its result is one rank's part);
    the other collectives pack into `out` itself. `overlap` when the target runs collectives on a
    communication stream (the Wait is placed by `overlap_streams`)."""
    ins = tuple(bld.buffer_of[v] for v in op.inputs)
    ws = None
    if op.name == REDUCE_SCATTER.name and len(op.inputs) > 1:
        ws = bld.scratch(sum(v.type.numel for v in op.inputs) * op.out.dtype.itemsize)
    return CollectiveCall(ins, out, op, workspace=ws, overlap=bld.target.comm_stream)


def conv_call(bld: _Builder, op: Op, out: int) -> ConvCall:
    """The convolution call of a conv / conv_grad_input / conv_grad_weight op writing buffer `out`,
    with the workspace the target's library asks for as scratch in the arena."""
    a, b = (bld.buffer_of[v] for v in op.inputs)
    return ConvCall.of(op, a, b, out, bld.scratch(bld.target.conv_workspace(op)))


def host_copy(bld: _Builder, op: Op, out: int) -> HostCopy:
    """The copy of an offload (into `out`, made a host buffer: pinned host memory, outside the arena)
    or a reload (into the device buffer `out`); overlapped (`overlap_streams` places the Wait)."""
    to_host = get(op.name) is OFFLOAD
    if to_host:
        old = bld.buffers[out]
        bld.buffers[out] = Buffer(old.id, old.nbytes, old.dtype, old.shape, "host")
        bld.temp_roots.discard(out)
    return HostCopy(bld.buffer_of[op.inputs[0]], out, op, to_host)


# an op's `library` trait -> the library-call step that computes it, built as f(builder, op, out
# buffer); every other op becomes the kernels codegen renders for it.
LIBRARY_CALLS: dict[str, Callable[[_Builder, Op, int], Step]] = {
    "matmul": matmul_call, "attention": attention_call, "collective": collective_call, "conv": conv_call,
    "host": host_copy}


def overlap_streams(buffers: dict[int, Buffer], steps: list[Step], updates: dict[int, int]) -> list[Step]:
    """After each overlapped step (a CollectiveCall on the communication stream, an update's
    KernelLaunch on the side stream), a Wait right before the first later step that touches the
    bytes the step writes (its results, workspace, scratch) or writes the bytes it reads, or at the
    end of the plan: the steps in between run while it does. The wait reads the step's inputs, so
    the memory planner keeps them until then; but not the inputs an update overwrites in place (see
    Wait; `updates`: the buffer of an output that updates an input in place -> the input's buffer).
    An update with no other work before its wait (the last ones of a step, an eager optimizer's)
    runs on the plan's stream instead: a second stream would only add its two events. An offload's
    HostCopy waits after the next step that computes (it overlaps that step, and its source's bytes
    are free after the wait)."""
    out = list(steps)
    at = 0
    while at < len(out):
        call = out[at]
        side = isinstance(call, KernelLaunch) and call.side
        host = isinstance(call, HostCopy) and call.overlap
        if not (side or host or isinstance(call, CollectiveCall) and call.overlap):
            at += 1
            continue
        written = {root(buffers, b) for b in call.writes}
        read = {root(buffers, b) for b in call.reads}
        later = next((j for j in range(at + 1, len(out))
                      if any(root(buffers, b) in written for b in out[j].touches)
                      or any(root(buffers, b) in read for b in out[j].writes)), len(out))
        if host and call.to_host:  # overlap the next step that computes
            later = min(later, next((j + 1 for j in range(at + 1, len(out)) if out[j].ops
                                     and not isinstance(out[j], HostCopy)), len(out)))
        if host:
            out.insert(later, Wait((call.src,), call.out, call.op, (), "host"))
        elif side and not any(s.ops and not (isinstance(s, KernelLaunch) and s.side) for s in out[at + 1:later]):
            out[at] = dataclasses.replace(call, side=False)
        elif side:
            own = {updates[b] for b in call.writes if b in updates}
            keep = tuple(b for b in call.reads if b not in own)
            out.insert(later, Wait(keep, call.out, call.ops[0], call.writes[1:], "side"))
        else:
            out.insert(later, Wait(call.inputs, call.out, call.op, () if call.workspace is None else (call.workspace,)))
        at += 1
    return out


def _bind_outputs(bld: _Builder) -> list[int]:
    """Outputs are allocated fresh per call. An output whose bytes belong to an input, or overlap
    an earlier output's, gets its own buffer and a Copy; outputs in disjoint parts of one temporary
    (the gradients attention's backward packs into one buffer) share it."""
    g, outs, claimed = bld.g, [], {}
    for i, v in enumerate(g.outputs):
        bid = bld.buffer_of[v]
        r = root(bld.buffers, bid)
        at = byte_offset(bld.buffers, bid)
        span = (at, at + bld.buffers[bid].nbytes)
        if r in claimed and all(span[1] <= a or b <= span[0] for a, b in claimed[r]):
            claimed[r].append(span)
            outs.append(bid)
            continue
        if r in bld.temp_roots and r not in claimed and bld.buffers[r].role == "temporary":
            claimed[r] = [span]
            bld.temp_roots.discard(r)
            old = bld.buffers[r]
            bld.buffers[r] = Buffer(old.id, old.nbytes, old.dtype, old.shape, "output", index=i)
            outs.append(bid)
            continue
        dst = bld.add(bld.new_id(), None, "output", shape=v.type.shape, dtype=v.type.dtype, index=i)
        bld.steps.append(Copy(bid, dst))
        outs.append(dst)
    return outs


def _nondeterministic(mode: str, ops: tuple[Op, ...]) -> None:
    """A kernel of `ops` adds floating-point values with atomics while Target.deterministic is set:
    a DeterminismError ("error") or a warning ("warn") naming the op and the user's line, as torch says
    of an op with no deterministic CUDA implementation (runtime/determinism.py)."""
    op = next((o for o in ops if get(o.name).category != "elementwise"), ops[0])
    text = (f"{op.name} does not have a deterministic implementation on the GPU (its kernel adds floating-point "
            f"values with atomics, in an order that changes from run to run), but "
            f"flame.use_deterministic_algorithms(True) is set; pass warn_only=True to only warn, or turn the "
            f"setting off for this step\n  at {op.loc or '(no source line)'}")
    if mode == "warn":
        warnings.warn(text, UserWarning, stacklevel=2)
        return
    raise DeterminismError(text)


def build_plan(g: Graph, lowering: Callable | None = None, target: Target | None = None) -> Plan:
    """The Plan of a verified graph, before memory planning (temporaries have no arena offsets yet:
    flame.plan.memory.plan_memory places them; to_plan does both). `lowering(op) -> list[Kernel]`
    defaults to codegen's lowering of the op's group of one; kernels are rendered here, and for a
    target with an architecture (a GPU's) compiled ahead in the background (codegen.nvrtc.compile_ahead).
    `target` (compile_graph hands over the one the passes planned for; by default the reference
    executor's: every matmul epilogue, no library workspaces) says what the backend's library calls do."""
    target = DEFAULT_TARGET if target is None else target
    with op_tails():  # (the ops' texts: each group's key, then its kernel's header)
        return _build(g, lowering, target)


def _build(g: Graph, lowering: Callable | None, target: Target) -> Plan:
    bld = _Builder(g, lowering, target)
    for i, (v, role) in enumerate(zip(g.inputs, g.roles)):
        bld.add(bld.ids[v], v, ROLE_OF_INPUT[role], index=i)
    inputs = [bld.buffer_of[v] for v in g.inputs]
    if g.groups is None:
        for op in g.ops:
            bld.op(op)
    else:
        if target.arch:
            _compile_largest_first(bld, g.groups)
        for grp in g.groups:
            _group_steps(bld, grp)
    outputs = _bind_outputs(bld)
    updates = {bld.buffer_of[o]: bld.buffer_of[i] for o, i in g.updated().items() if o in bld.buffer_of}
    steps = overlap_streams(bld.buffers, bld.steps, updates)
    return Plan(g.name, bld.buffers, steps, inputs, outputs, 0, g, bld.buffer_of,
                reused=tuple(bld.renders.reused.values()))


EARLY_GROUPS = 2  # fused groups rendered, and their compiles started, before the step's first


def _compile_largest_first(bld: _Builder, groups: list[FusionGroup]) -> None:
    """For a GPU target: render the EARLY_GROUPS fused groups of the most ops first and start their
    NVRTC compiles, then the step's groups in their order. The largest is usually the optimizer's
    multi-tensor update, the step's last group and its slowest compile (a 126k-character kernel, 0.4 s of
    NVRTC for gpt_train): in step order its compile would start as planning ends, and the executor
    would wait for it. Not while sizes are symbolic or a kernel memo records the renderings' order."""
    from flame.codegen import kernel_inputs
    from flame.codegen.nvrtc import compile_ahead

    if _MEMO.get() is not None or symbolic.current() is not None:
        return
    fused = [grp for grp in groups if grp.kind in (Kind.ELEMENTWISE, Kind.ROWS, Kind.REDUCTION)
             and len(grp.ops) > 1 and not _views_only(grp)]
    for grp in sorted(fused, key=lambda grp: -len(grp.ops))[:EARLY_GROUPS]:
        try:
            kernels = bld.renders.render_early(grp, tuple(kernel_inputs(grp)))
        except NotImplementedError:  # its turn lowers it op by op
            continue
        for k in kernels:
            compile_ahead(k.source, bld.target.arch, k.name)


def _group_steps(bld: _Builder, grp: FusionGroup) -> None:
    """The steps of one fusion group: a cuBLASLt call (with its epilogue when the runtime supports
    it), one fused KernelLaunch (args: external inputs, then every value the group writes), or the
    op-by-op steps of a group of one op."""
    if grp.kind == "matmul":
        rest, why = _matmul_group(bld, grp)
        if not rest:
            return
        grp = FusionGroup(rest, Kind.ELEMENTWISE, why, grp.outputs)
    if all(op in bld.strided.skipped for op in grp.ops):
        return  # views an attention call reads or writes through strides
    why = [bld.strided.refused[v] for v in grp.outputs if v in bld.strided.refused]
    if why:  # views the attention call cannot read through strides: their copy runs, and says why
        grp = dataclasses.replace(grp, reason=why[0])
    if len(grp.ops) == 1 or _views_only(grp):
        for op in grp.ops:
            bld.op(op, grp.reason)
        return
    if grp.kind == Kind.ATTENTION:  # a forward and its softmax statistics: one call writes both
        fwd, stats = sorted(grp.ops, key=lambda op: op.name != FORWARD)
        if bld.target.attention_kernel(fwd):
            flash_steps(bld, fwd, bld.temporary(fwd.out), stats)
            return
        bld.steps.append(attention_call(bld, fwd, bld.temporary(bld.strided.stored_in(fwd)), stats))
        return
    try:
        inputs, kernels = _lower(grp, bld.lowering, bld.renders)
    except NotImplementedError as e:  # not expected from the pass's groups; stay correct op by op
        for op in grp.ops:
            bld.op(op, f"op by op: codegen could not lower the fused group ({e})")
        return
    ins = tuple(bld.buffer_of[v] for v in inputs)
    outs = tuple(bld.temporary(v) for v in grp.outputs)
    side = bld.target.side_stream and len(kernels) == 1 and grp.update  # an update the fusion pass scheduled
    bld.launches(kernels, ins, outs, grp.ops, grp, side=side)


def _views_only(grp: FusionGroup) -> bool:
    """A group that only takes views of one value (a slice and reshapes of it): no kernel runs."""
    ops = grp.ops
    return (all(view_start(op) is not None for op in ops)
            and all(op.inputs[0] is prev.out for prev, op in zip(ops, ops[1:])))


def _matmul_group(bld: _Builder, grp: FusionGroup) -> tuple[tuple[Op, ...], str]:
    """Emit the matmul of a matmul group, folding its epilogue into the call when the target's
    library runs it; returns the epilogue ops left to lower, and why they were. The group's ops: the
    matmul, then either its elementwise epilogue (add of the bias, activation: out is the last one's
    value, aux the activation's input) or the reduction a bgrad epilogue computes (bgrad: its value)."""
    mm, rest = grp.ops[0], grp.ops[1:]
    if not rest or grp.epilogue == "none" or grp.epilogue not in bld.target.matmul_epilogues:
        bld.op(mm)  # matmul_bias alone too: its call runs its own bias epilogue (matmul_call)
        return rest, "matmul epilogue not supported by the runtime"
    if grp.epilogue.startswith("bgrad"):
        a_folded, b_folded = (v in bld.folded for v in mm.inputs)
        if not (a_folded if grp.epilogue == "bgrad_a" else not b_folded):
            # cuBLASLt sums only an operand stored [k, ...]: a read through its transpose's input (ta), b as
            # stored; the fusion pass chose the epilogue expecting that, but a transpose the plan writes (fused
            # into a kernel: a tokens x hidden gradient with tokens == hidden) is read as stored [m, k]
            bld.op(mm)
            return rest, f"{grp.epilogue}: the summed operand is not stored [k, ...] here (its transpose is written)"
        (red,) = rest
        bid = bld.temporary(mm.out)
        bld.steps.append(matmul_call(bld, mm, bid, grp.epilogue, bgrad=bld.temporary(red.out)))
        return (), ""
    aux = bld.temporary(rest[-1].inputs[0]) if grp.epilogue.endswith("_aux") else None
    bid = bld.temporary(rest[-1].out)
    add = next((op for op in rest if epilogue_role(op) == "bias"), None)
    bias = None
    if add is not None:
        v = add.inputs[1] if add.inputs[0] is mm.out else add.inputs[0]
        bias = bld.buffer_of[v]
    bld.steps.append(matmul_call(bld, mm, bid, grp.epilogue, bias, aux=aux))
    return (), ""
