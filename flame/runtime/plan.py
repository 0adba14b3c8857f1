"""A Plan is data (DESIGN.md §4): typed buffers and an ordered list of steps. Both executors run the
same Plan: runtime.cuda with CuPy, runtime.reference with NumPy (the arena as one byte buffer).

build_plan(graph) makes one step list per graph op: a KernelLaunch per kernel that
`flame.codegen.lower` returns (rendered only: nothing is compiled here), a LibraryCall for
matmul, an Alias for a relabelling view op (reshape/squeeze/unsqueeze: every flame buffer is contiguous, so
those need no kernel), and a Copy where an output must not share memory with an input or another
output. Then the memory planner (flame.passes.plan_memory: best fit over live ranges, in-place
updates of aliased inputs) assigns arena offsets. A matmul operand produced by a transpose of the last
two axes is read untransposed with ta/tb set (`fold_transposes`), and the transpose kernel is skipped
when every user folds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from flame.errors import FlameError
from flame.ir.dtypes import DType
from flame.ir.graph import FusionGroup, Graph, Kind, Op, Value
from flame.ir.printer import format_attr, format_op
from flame.ir.registry import get

ALIGN = 256  # arena offsets are multiples of this (cudaMalloc's alignment: vector loads stay aligned)
ROLE_OF_INPUT = {"data": "input", "param": "param", "state": "state", "scalar": "scalar", "const": "const"}


@dataclass(frozen=True)
class Buffer:
    """One typed buffer. role: input/param/state/scalar/const (bound to call argument `index`),
    output (allocated per call, returned as output `index`), temporary (arena bytes
    [offset, offset + nbytes)), scratch (a kernel's workspace, in the arena too) or view (the
    bytes of buffer `base`, seen with this shape)."""

    id: int
    nbytes: int
    dtype: DType
    shape: tuple[int, ...]
    role: str
    offset: int | None = None
    base: int | None = None
    index: int | None = None

    def describe(self) -> str:
        t = f"{self.dtype.name}[{','.join(str(s) for s in self.shape)}]"
        if self.role == "temporary" or self.role == "scratch":
            where = f"@{self.offset}+{self.nbytes}"
        elif self.role == "view":
            where = f"= b{self.base}"
        else:
            where = "" if self.index is None else str(self.index)
        return f"b{self.id}: {t} {self.role} {where}".rstrip()


@dataclass(frozen=True)
class KernelLaunch:
    """Launch generated kernel `name` with args = (inputs..., output[, scratch]). `ops` are the IR
    ops the kernel implements; an op lowered to several kernels has one launch per part
    (`part` = (i, n)), and only the last part completes the op."""

    name: str
    source: str
    grid: int
    block: int
    smem: int
    args: tuple[int, ...]
    n_inputs: int
    ops: tuple[Op, ...]
    part: tuple[int, int] = (0, 1)
    n_outputs: int = 1  # a fused kernel writes args[n_inputs : n_inputs + n_outputs]
    reason: str = ""  # why the fusion pass ended the kernel here
    in_place_safe: bool = True  # an output may take the bytes of a same-shaped input (see Kernel)

    @property
    def out(self) -> int:
        return self.args[self.n_inputs]


@dataclass(frozen=True)
class LibraryCall:
    """A call into a library: `matmul` through cuBLASLt. args = (a, b, out); info holds the layout:
    batch shapes of a, b and out, m, n, k, and whether a / b are stored transposed."""

    name: str
    args: tuple[int, ...]
    op: Op
    info: dict = field(default_factory=dict)

    @property
    def out(self) -> int:
        return self.args[-1]


@dataclass(frozen=True)
class Copy:
    """Copy the bytes of buffer src into buffer dst (same size)."""

    src: int
    dst: int


@dataclass(frozen=True)
class Alias:
    """dst is a view of src's bytes with another shape: no work at run time beyond the view."""

    src: int
    dst: int
    op: Op


Step = KernelLaunch | LibraryCall | Copy | Alias


@dataclass
class Plan:
    """Buffers (by id), steps in order, the buffer of each graph input and output, and the arena
    size. `graph` and `buffer_of` (Value -> buffer id) let the reference executor run the IR ops."""

    name: str
    buffers: dict[int, Buffer]
    steps: list[Step]
    inputs: list[int]
    outputs: list[int]
    arena_size: int
    graph: Graph
    buffer_of: dict[Value, int]

    def kernels(self) -> list[KernelLaunch]:
        return [s for s in self.steps if isinstance(s, KernelLaunch)]

    def root(self, bid: int) -> Buffer:
        """The buffer that owns bid's bytes (follows views)."""
        b = self.buffers[bid]
        while b.base is not None:
            b = self.buffers[b.base]
        return b

    def __str__(self) -> str:
        return format_plan(self)


# ---------------------------------------------------------------------------------------------
# building


def _lowering() -> Callable:
    from flame.codegen import lower, single

    return lambda op: lower(single(op))


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class _Builder:
    """Accumulates buffers and steps while walking the graph once."""

    def __init__(self, g: Graph, lower: Callable):
        self.g, self.lower = g, lower
        self.ids = g.numbering()
        self.next_id = len(self.ids)
        self.buffers: dict[int, Buffer] = {}
        self.steps: list[Step] = []
        self.buffer_of: dict[Value, int] = {}
        self.temp_roots: set[int] = set()
        self.folded = fold_transposes(g)  # transposes that every matmul user reads with ta/tb instead

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

    def root(self, bid: int) -> int:
        while self.buffers[bid].base is not None:
            bid = self.buffers[bid].base
        return bid

    def op(self, op: Op) -> None:
        bid = self.ids[op.out]
        if op.out in self.folded:
            return  # no kernel, no buffer: every user is a matmul that reads op's input transposed
        if _is_view(op):
            src = self.buffer_of[op.inputs[0]]
            self.add(bid, op.out, "view", base=src)
            self.steps.append(Alias(src, bid, op))
            return
        self.add(bid, op.out, "temporary")
        self.temp_roots.add(bid)
        if op.name == "matmul":
            self.steps.append(matmul_call(self, op, bid))
            return
        ins = tuple(self.buffer_of[v] for v in op.inputs)
        try:
            kernels = self.lower(op)
        except NotImplementedError as e:
            raise NotImplementedError(f"no kernel for {format_op(op, self.ids)}: {e}") from None
        scratch = max((k.scratch for k in kernels), default=0)
        extra = ()
        if scratch:
            sid = self.new_id()
            self.add(sid, None, "scratch", shape=(scratch,), dtype=_u8(), nbytes=scratch)
            self.temp_roots.add(sid)
            extra = (sid,)
        for i, k in enumerate(kernels):
            self.steps.append(KernelLaunch(k.name, k.source, k.grid, k.block, k.smem, ins + (bid,) + extra,
                                           k.n_inputs, (op,), (i, len(kernels))))


def _u8() -> DType:
    import numpy as np

    return DType("u8", np.dtype(np.uint8), "unsigned char", "unsigned char", "int")


def _is_view(op: Op) -> bool:
    """reshape/squeeze/unsqueeze of a contiguous buffer, and permutes that keep every axis of size
    > 1 in order, only relabel the shape: the output can be a view of the input's bytes."""
    view = get(op.name).view
    if view is not None and view.relabel:
        return True
    if op.name == "permute":
        shape = op.inputs[0].type.shape
        kept = [p for p in op.attrs["perm"] if shape[p] != 1]
        return kept == sorted(kept)
    return False


def matmul_info(op: Op) -> dict:
    """Layout of a matmul op in the IR: row-major operands, no transposes (a fusion pass may fold a
    preceding transpose into ta/tb later)."""
    a, b = op.inputs[0].type.shape, op.inputs[1].type.shape
    out = op.out.type.shape
    return {"m": a[-2], "n": b[-1], "k": a[-1], "batch_a": a[:-2], "batch_b": b[:-2], "batch": out[:-2],
            "ta": False, "tb": False}


def _swaps_last_two(op: Op | None) -> bool:
    if op is None or op.name != "permute" or op.out.type.rank < 2:
        return False
    perm = list(op.attrs["perm"])
    want = list(range(len(perm)))
    want[-2], want[-1] = want[-1], want[-2]
    return perm == want


def fold_transposes(g: Graph) -> set[Value]:
    """Results of permutes that swap the last two axes and are read only by matmuls (and are not
    graph outputs): each matmul reads the permute's input with ta/tb set, so no kernel runs."""
    users, outs = g.users(), set(g.outputs)
    return {op.out for op in g.ops if _swaps_last_two(op) and op.out not in outs and users[op.out]
            and all(u.name == "matmul" for u in users[op.out])}


def matmul_call(bld: _Builder, op: Op, out: int, epilogue: str = "none", bias: int | None = None) -> LibraryCall:
    """The cuBLASLt call of matmul `op` writing buffer `out`: args (a, b[, bias], out). An operand in
    bld.folded is replaced by the permute's input with ta / tb set. epilogue: "none", "bias",
    "relu" or "bias_relu" (relu(a @ b + bias), bias of shape [n]); info["epilogue"] records it."""
    info = matmul_info(op)
    args = []
    for v, flag in zip(op.inputs, ("ta", "tb")):
        if v in bld.folded:
            info[flag], v = True, v.producer.inputs[0]
        args.append(bld.buffer_of[v])
    if epilogue != "none":
        info["epilogue"] = epilogue
    args += [bias] if bias is not None else []
    return LibraryCall("matmul", tuple(args) + (out,), op, info)


def _bind_outputs(bld: _Builder) -> list[int]:
    """Outputs are allocated fresh per call. An output whose bytes belong to an input, or to an
    earlier output, gets its own buffer and a Copy."""
    g, outs, claimed = bld.g, [], set()
    for i, v in enumerate(g.outputs):
        bid = bld.buffer_of[v]
        root = bld.root(bid)
        if root in bld.temp_roots and root not in claimed and bld.buffers[root].role == "temporary":
            claimed.add(root)
            bld.temp_roots.discard(root)
            old = bld.buffers[root]
            bld.buffers[root] = Buffer(old.id, old.nbytes, old.dtype, old.shape, "output", index=i)
            outs.append(bid)
            continue
        dst = bld.add(bld.new_id(), None, "output", shape=v.type.shape, dtype=v.type.dtype, index=i)
        bld.steps.append(Copy(bid, dst))
        outs.append(dst)
    return outs


def step_reads(s: Step) -> tuple[int, ...]:
    """The buffers a step reads (views not resolved)."""
    if isinstance(s, KernelLaunch):
        return s.args[: s.n_inputs]
    if isinstance(s, LibraryCall):
        return s.args[:-1]
    return (s.src,) if isinstance(s, Copy) else ()


def step_writes(s: Step) -> tuple[int, ...]:
    """The buffers a step writes: a kernel's outputs and scratch, a call's result, a copy's dst."""
    if isinstance(s, KernelLaunch):
        return s.args[s.n_inputs:]
    if isinstance(s, LibraryCall):
        return (s.args[-1],)
    return (s.dst,) if isinstance(s, Copy) else ()


def elementwise_step(s: Step) -> bool:
    """A one-part kernel made only of elementwise ops: element i of each output depends on element
    i of each input of the output's shape, so such an input's bytes may be overwritten by the output
    in the same launch (every thread reads its elements before it writes them)."""
    from flame.ir.registry import REGISTRY

    return (isinstance(s, KernelLaunch) and s.part == (0, 1)
            and all(REGISTRY[o.name].category == "elementwise" for o in s.ops))


def _read_pointwise(s: Step, dead_args: set[int], buffer_of: dict | None) -> bool:
    """Every op of kernel s that depends on a value read from dead_args is elementwise (other ops,
    e.g. a fused transpose of a gradient, may read other buffers freely). Without buffer_of: every op."""
    from flame.ir.registry import REGISTRY

    if not isinstance(s, KernelLaunch) or s.part != (0, 1):
        return False
    if buffer_of is None:
        return elementwise_step(s)
    inside, tainted = {o.out for o in s.ops}, set()
    for op in s.ops:
        if any(v in tainted if v in inside else buffer_of.get(v) in dead_args for v in op.inputs):
            if REGISTRY[op.name].category != "elementwise":
                return False
            tainted.add(op.out)
    return True


def shares_in_place(buffers: dict[int, Buffer], steps: list[Step], ranges: dict, dead: int, born: int,
                    buffer_of: dict | None = None) -> bool:
    """Root buffers `dead` (last touched at step i) and `born` (first touched at step i) may occupy
    the same bytes: step i is one kernel that reads dead (through a buffer of born's shape) only with
    elementwise ops (all its ops, without buffer_of) and writes born."""
    (_, last), (first, _) = ranges.get(dead, (0, -1)), ranges.get(born, (-1, -1))
    if last != first or first < 0 or buffers[dead].nbytes != buffers[born].nbytes:
        return False
    s = steps[first]

    def root(bid):
        while buffers[bid].base is not None:
            bid = buffers[bid].base
        return bid

    outs = [a for a in step_writes(s) if root(a) == born]
    ins = [a for a in step_reads(s) if root(a) == dead]
    return (bool(outs and ins) and all(buffers[a].shape == buffers[o].shape for a in ins for o in outs)
            and _read_pointwise(s, set(ins), buffer_of))


def live_ranges(buffers: dict[int, Buffer], steps: list[Step]) -> dict[int, tuple[int, int]]:
    """For each root buffer: (first step that touches it, last step that touches it). A view
    counts as its root."""

    def root(bid):
        while buffers[bid].base is not None:
            bid = buffers[bid].base
        return bid

    ranges: dict[int, tuple[int, int]] = {}
    for i, s in enumerate(steps):
        touched = s.args if isinstance(s, (KernelLaunch, LibraryCall)) else (s.src, s.dst)
        for bid in touched:
            r = root(bid)
            lo, _ = ranges.get(r, (i, i))
            ranges[r] = (lo, i)
    return ranges


def build_plan(g: Graph, lower: Callable | None = None) -> Plan:
    """The Plan of a verified graph, before memory planning (temporaries have no arena offsets yet:
    flame.passes.plan_memory places them; flame.passes.pipeline.to_plan does both). `lower(op) ->
    list[Kernel]` defaults to codegen's lower of the op's group of one; kernels are rendered, never compiled, here."""
    bld = _Builder(g, lower or _lowering())
    for i, (v, role) in enumerate(zip(g.inputs, g.roles)):
        bld.add(bld.ids[v], v, ROLE_OF_INPUT[role], index=i)
    inputs = [bld.buffer_of[v] for v in g.inputs]
    if g.groups is None:
        for op in g.ops:
            bld.op(op)
    else:
        for grp in g.groups:
            _group_steps(bld, grp)
    outputs = _bind_outputs(bld)
    return Plan(g.name, bld.buffers, bld.steps, inputs, outputs, 0, g, bld.buffer_of)


def _group_steps(bld: _Builder, grp: FusionGroup) -> None:
    """The steps of one fusion group: a cuBLASLt call (with its epilogue when the runtime supports
    it), one fused KernelLaunch (args: external inputs, then every value the group writes), or the
    op-by-op steps of a group of one op."""
    if grp.kind == "matmul":
        rest = _matmul_group(bld, grp)
        if not rest:
            return
        grp = FusionGroup(rest, Kind.ELEMENTWISE, "matmul epilogue not supported by the runtime", grp.outputs)
    if len(grp.ops) == 1:
        bld.op(grp.ops[0])
        return
    from flame.codegen import kernel_inputs, lower

    ins = tuple(bld.buffer_of[v] for v in kernel_inputs(grp))
    outs = tuple(bld.add(bld.ids[v], v, "temporary") for v in grp.outputs)
    bld.temp_roots.update(outs)
    try:
        kernels = lower(grp)
    except NotImplementedError:  # not expected from the pass's groups; stay correct op by op
        for op in grp.ops:
            bld.op(op)
        return
    extra = ()
    scratch = max((k.scratch for k in kernels), default=0)
    if scratch:  # e.g. the per-thread partials of column reductions a row kernel carries
        sid = bld.new_id()
        bld.add(sid, None, "scratch", shape=(scratch,), dtype=_u8(), nbytes=scratch)
        bld.temp_roots.add(sid)
        extra = (sid,)
    for i, k in enumerate(kernels):
        bld.steps.append(KernelLaunch(k.name, k.source, k.grid, k.block, k.smem, ins + outs + extra, k.n_inputs,
                                      grp.ops, (i, len(kernels)), len(outs), grp.reason, k.in_place_safe))


def _matmul_group(bld: _Builder, grp: FusionGroup) -> tuple[Op, ...]:
    """Emit the matmul of a matmul group, folding its epilogue into the call when the backend runs
    it (flame.runtime.matmul.capabilities); returns the epilogue ops left to lower."""
    from flame.runtime import matmul

    mm, rest = grp.ops[0], grp.ops[1:]
    if grp.epilogue == "none" or grp.epilogue not in matmul.capabilities().matmul_epilogues:
        bld.op(mm)
        return rest
    last = rest[-1].out
    bid = bld.add(bld.ids[last], last, "temporary")
    bld.temp_roots.add(bid)
    add = next((op for op in rest if op.name == "add"), None)
    bias = None
    if add is not None:
        v = add.inputs[1] if add.inputs[0] is mm.out else add.inputs[0]
        bias = bld.buffer_of[v]
    bld.steps.append(matmul_call(bld, mm, bid, grp.epilogue, bias))
    return ()


def check_plan(plan: Plan) -> None:
    """Raise FlameError if two arena buffers that are live at the same time share bytes (an
    elementwise step's output may take the exact bytes of an input that dies there: shares_in_place)."""
    ranges = live_ranges(plan.buffers, plan.steps)
    temps = [b for b in plan.buffers.values() if b.offset is not None and b.nbytes]
    bufs, steps = plan.buffers, plan.steps
    for i, a in enumerate(temps):
        for b in temps[i + 1:]:
            (fa, la), (fb, lb) = ranges.get(a.id, (0, -1)), ranges.get(b.id, (0, -1))
            same = a.offset == b.offset and a.nbytes == b.nbytes
            if same and (shares_in_place(bufs, steps, ranges, a.id, b.id, plan.buffer_of)
                         or shares_in_place(bufs, steps, ranges, b.id, a.id, plan.buffer_of)):
                continue
            if fa <= lb and fb <= la and a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes:
                raise FlameError(f"plan {plan.name}: b{a.id} and b{b.id} are live together and overlap "
                                 f"in the arena")
        if a.offset + a.nbytes > plan.arena_size:
            raise FlameError(f"plan {plan.name}: b{a.id} ends past the arena ({plan.arena_size} bytes)")


# ---------------------------------------------------------------------------------------------
# printing


def _op_comment(ops: tuple[Op, ...], ids: dict[Value, int]) -> str:
    return "; ".join(format_op(o, ids) for o in ops)


def format_step(s: Step, ids: dict[Value, int]) -> str:
    """One line per step, IR-like: `b5 = launch add_f32 <<<4, 256, 0>>> (b0, b1)  # %5 = add ...`."""
    if isinstance(s, KernelLaunch):
        part = f" [{s.part[0] + 1}/{s.part[1]}]" if s.part[1] > 1 else ""
        ins = ", ".join(f"b{a}" for a in s.args[: s.n_inputs])
        scratch = f" scratch=b{s.args[-1]}" if len(s.args) > s.n_inputs + s.n_outputs else ""
        outs = ", ".join(f"b{a}" for a in s.args[s.n_inputs: s.n_inputs + s.n_outputs])
        return (f"{outs} = launch {s.name}{part} <<<{s.grid}, {s.block}, {s.smem}>>> ({ins}){scratch}"
                f"  # {_op_comment(s.ops, ids)}")
    if isinstance(s, LibraryCall):
        info = ", ".join(f"{k}={format_attr(list(v) if isinstance(v, tuple) else v)}" for k, v in s.info.items())
        ins = ", ".join(f"b{a}" for a in s.args[:-1])
        return f"b{s.out} = call {s.name} ({ins}) {{{info}}}  # {format_op(s.op, ids)}"
    if isinstance(s, Alias):
        return f"b{s.dst} = alias b{s.src}  # {format_op(s.op, ids)}"
    return f"b{s.dst} = copy b{s.src}"


def format_plan(plan: Plan) -> str:
    """The whole plan: header with the arena size, buffers with roles and offsets, steps, returns."""
    ids = plan.graph.numbering()
    lines = [f"plan {plan.name} (arena {plan.arena_size} bytes) {{"]
    lines += ["  " + plan.buffers[k].describe() for k in sorted(plan.buffers)]
    lines += ["  ---"]
    lines += ["  " + format_step(s, ids) for s in plan.steps]
    lines.append("  return" + (" " + ", ".join(f"b{o}" for o in plan.outputs) if plan.outputs else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"
