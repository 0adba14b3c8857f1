"""The Plan as data (ARCHITECTURE.md "Plans are data", "Library steps"):
typed buffers, typed steps that say what they read and write,
and how both print. This module owns the data only; flame.plan.build makes a Plan from a graph,
flame.plan.memory places its buffers, and the executors in flame.runtime run it (they import this
module and nothing else from flame.plan).

A step is a frozen dataclass deriving from `Step`. Its buffer-id fields are declared with
`buffer_field()`, so renaming a buffer (the memory planner's in-place updates) needs no per-type
code; `reads` / `writes` name the buffers it reads and writes, so liveness needs none either. A
call into a vendor library derives from `LibraryCall`. Adding a step type (an `AttentionCall`, a
`ConvCall`, a `CollectiveCall`) is: one class here, one handler in each executor's table
(`runtime/cuda_steps.py` STEP_HANDLERS, `runtime/reference.py` STEP_HANDLERS) and one lowering entry
(`plan/build.py` LIBRARY_CALLS).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import ClassVar

from flame.ir.dtypes import DType
from flame.ir.graph import Graph, Op, Value
from flame.ir.indexmap import contiguous_strides
from flame.ir.ops.attention import FORWARD
from flame.ir.printer import format_attr, format_op

ALIGN = 256  # arena offsets are multiples of this (cudaMalloc's alignment: vector loads stay aligned)


def aligned(n: int) -> int:
    """n rounded up to a multiple of ALIGN."""
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class Buffer:
    """One typed buffer. role: input/param/state/scalar/const (bound to call argument `index`),
    output (allocated per call, returned as output `index`), temporary (arena bytes
    [offset, offset + nbytes)), scratch (a kernel's workspace, in the arena too) or view (the
    bytes of buffer `base`, seen with this shape) or host (pinned host memory holding an offloaded
    activation between the forward and the backward: plan.steps.HostCopy; not on the device)."""

    id: int
    nbytes: int
    dtype: DType
    shape: tuple[int, ...]
    role: str
    offset: int | None = None
    base: int | None = None
    index: int | None = None
    view_at: int = 0  # a view's first byte inside its base's bytes

    @property
    def typename(self) -> str:
        return f"{self.dtype.name}[{','.join(str(s) for s in self.shape)}]"

    def describe(self) -> str:
        if self.role == "temporary" or self.role == "scratch":
            where = f"@{self.offset}+{self.nbytes}"
        elif self.role == "view":
            where = f"= b{self.base}" + (f" + {self.view_at} B" if self.view_at else "")
        else:
            where = "" if self.index is None else str(self.index)
        return f"b{self.id}: {self.typename} {self.role} {where}".rstrip()


def with_fields(x, changes: dict):
    """A copy of plan data x (a frozen dataclass without __post_init__: a buffer or a step) with the
    fields in `changes` replaced: dataclasses.replace without re-running __init__, for the hot path
    of a plan evaluated at a new size (flame.plan.instance), where it is most of the time."""
    y = object.__new__(type(x))
    y.__dict__.update(x.__dict__)
    y.__dict__.update(changes)
    return y


def byte_offset(buffers: dict[int, Buffer], bid: int) -> int:
    """Where bid's bytes start inside its root's (views of a contiguous slice start past 0)."""
    at = 0
    while buffers[bid].base is not None:
        at += buffers[bid].view_at
        bid = buffers[bid].base
    return at


def root(buffers: dict[int, Buffer], bid: int) -> int:
    """The id of the buffer that owns bid's bytes (follows views to their base)."""
    while buffers[bid].base is not None:
        bid = buffers[bid].base
    return bid


def swapped(ids: tuple, old: int, new: int) -> tuple:
    """ids with every `old` replaced by `new` (found by the tuple's own search: a horizontal kernel's
    step names hundreds of buffers, and each in-place update renames one of them)."""
    try:
        at = ids.index(old)
    except ValueError:
        return ids
    out = list(ids)
    while True:
        out[at] = new
        try:
            at = ids.index(old, at + 1)
        except ValueError:
            return tuple(out)


def buffer_field(**kw):
    """A step field holding a buffer id (or a tuple of them, or None): Step.renamed rewrites it."""
    return field(metadata={"buffer": True}, **kw)


@functools.cache
def _buffer_fields(cls: type) -> tuple[str, ...]:
    """The names of a step type's buffer-id fields (declared with buffer_field())."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("buffer"))


class Step:
    """What every plan step provides (subclasses are frozen dataclasses):
    - `reads` / `writes`: the buffer ids it reads / writes (views not resolved); `touches`: every
      buffer whose bytes must be live at the step (reads + writes unless said otherwise);
    - `outputs` / `scratch`: the writes that hold values / the workspace among the writes;
    - `ops`: the IR ops whose work the step does (none for a view or a copy);
    - `launches`: how many GPU launches the step issues from the host;
    - `format(ids)`: its line in the printed plan."""

    @property
    def reads(self) -> tuple[int, ...]:
        raise NotImplementedError

    @property
    def writes(self) -> tuple[int, ...]:
        raise NotImplementedError

    @property
    def touches(self) -> tuple[int, ...]:
        return self.reads + self.writes

    @property
    def outputs(self) -> tuple[int, ...]:
        return self.writes

    @property
    def scratch(self) -> tuple[int, ...]:
        return ()

    @property
    def launches(self) -> int:
        return 0

    def renamed(self, old: int, new: int) -> Step:
        """This step with buffer `old` replaced by `new` wherever it appears."""
        changed = {}
        for name in _buffer_fields(type(self)):
            v = getattr(self, name)
            if isinstance(v, tuple):  # one search of the tuple, which may name hundreds of buffers
                w = swapped(v, old, new)
                if w is not v:
                    changed[name] = w
            elif v == old:
                changed[name] = new
        return with_fields(self, changed) if changed else self  # most steps do not name old

    def remapped(self, ids: dict[int, int]) -> Step:
        """This step with every buffer id in `ids` replaced by the id it maps to (renamed for each)."""
        changed = {}
        for name in _buffer_fields(type(self)):
            v = getattr(self, name)
            if isinstance(v, tuple):
                if any(a in ids for a in v):
                    changed[name] = tuple([ids.get(a, a) for a in v])
            elif v in ids:
                changed[name] = ids[v]
        return with_fields(self, changed) if changed else self

    def format(self, ids: dict[Value, int]) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class KernelLaunch(Step):
    """Launch generated kernel `name` with args = (inputs..., outputs...[, scratch]). `ops` are the
    IR ops the kernel implements; an op lowered to several kernels has one launch per part
    (`part` = (i, n)), and only the last part completes the op."""

    name: str
    source: str
    grid: int
    block: int
    smem: int
    args: tuple[int, ...] = buffer_field()
    n_inputs: int
    ops: tuple[Op, ...]
    part: tuple[int, int] = (0, 1)
    n_outputs: int = 1  # a fused kernel writes args[n_inputs : n_inputs + n_outputs]
    reason: str = ""  # why the fusion pass ended the kernel here
    in_place_safe: bool = True  # an output may take the bytes of a same-shaped input (see Kernel)
    sizes: tuple[int, ...] = ()  # int64 arguments after args: the size s0 of a dynamic dim (flame.ir.symbolic)
    side: bool = False  # issued on the side stream after the steps before it, finished by its Wait

    @property
    def out(self) -> int:
        return self.args[self.n_inputs]

    @property
    def reads(self) -> tuple[int, ...]:
        return self.args[: self.n_inputs]

    @property
    def writes(self) -> tuple[int, ...]:
        return self.args[self.n_inputs:]

    @property
    def outputs(self) -> tuple[int, ...]:
        return self.args[self.n_inputs: self.n_inputs + self.n_outputs]

    @property
    def scratch(self) -> tuple[int, ...]:
        return self.args[self.n_inputs + self.n_outputs:]

    @property
    def launches(self) -> int:
        return 1 if self.grid else 0

    def format(self, ids: dict[Value, int]) -> str:
        part = f" [{self.part[0] + 1}/{self.part[1]}]" if self.part[1] > 1 else ""
        ins = ", ".join(f"b{a}" for a in self.reads)
        scratch = f" scratch=b{self.args[-1]}" if self.scratch else ""
        outs = ", ".join(f"b{a}" for a in self.outputs)
        comment = "; ".join(format_op(o, ids) for o in self.ops)
        launch = f"{self.name}{part} <<<{self.grid}, {self.block}, {self.smem}>>>"
        launch += " on side stream" if self.side else ""
        if self.sizes:
            launch += f" s0={','.join(map(str, self.sizes))}"
        return f"{outs} = launch {launch} ({ins}){scratch}  # {comment}"


class LibraryCall(Step):
    """A call into a vendor library (cuBLASLt, cuDNN, later NCCL) that does the work of IR op `op`.
    Subclasses set `name` (the call) and `library`, name their operands as fields, and have the
    fields `out` (the result's buffer) and `workspace` (the library's scratch in the arena, or None)."""

    name: ClassVar[str]
    library: ClassVar[str]

    @property
    def writes(self) -> tuple[int, ...]:
        return (self.out,) + self.scratch

    @property
    def outputs(self) -> tuple[int, ...]:
        return (self.out,)

    @property
    def scratch(self) -> tuple[int, ...]:
        return () if self.workspace is None else (self.workspace,)

    def _scratch_note(self) -> str:
        return "" if self.workspace is None else f" scratch=b{self.workspace}"

    @property
    def ops(self) -> tuple[Op, ...]:
        return (self.op,)

    @property
    def launches(self) -> int:
        return 1


@dataclass(frozen=True)
class MatmulCall(LibraryCall):
    """out[..., m, n] = epilogue(op(a) @ op(b) [+ bias]) through cuBLASLt (runtime/matmul.py). ta / tb:
    a / b are stored transposed ([..., k, m] / [..., n, k]), a transpose folded into the call;
    batch_a / batch_b / batch: the batch shapes of a, b and out (NumPy broadcasting); epilogue: one of
    flame.target.MATMUL_EPILOGUES or none, with `bias` the buffer of a [n] vector (bias*), `aux` the
    buffer the pre-activation a @ b [+ bias] is written to (*gelu_aux; out holds the activation) and
    `bgrad` the buffer of the sum over k of op(a) ([m], bgrad_a) or of op(b) ([n], bgrad_b). An FP8
    GEMM (op fp8_matmul, whose b is [n, k] as the op takes it: out = a @ b^T) also reads `a_scale` and
    `b_scale`, the buffers of its two f32 inverse scales (the product is multiplied by both: cuBLASLt's
    A/B scale pointers)."""

    name: ClassVar[str] = "matmul"
    library: ClassVar[str] = "cuBLASLt"

    a: int = buffer_field()
    b: int = buffer_field()
    out: int = buffer_field()
    op: Op
    m: int
    n: int
    k: int
    batch_a: tuple[int, ...]
    batch_b: tuple[int, ...]
    batch: tuple[int, ...]
    ta: bool = False
    tb: bool = False
    epilogue: str = "none"
    bias: int | None = buffer_field(default=None)
    workspace: int | None = buffer_field(default=None)  # cuBLASLt's workspace, scratch in the arena
    aux: int | None = buffer_field(default=None)
    bgrad: int | None = buffer_field(default=None)
    a_scale: int | None = buffer_field(default=None)
    b_scale: int | None = buffer_field(default=None)

    @classmethod
    def of(cls, op: Op, a: int, b: int, out: int, **kw) -> MatmulCall:
        """The call computing matmul `op` (its shapes as in the IR) from buffers a, b into out."""
        sa, sb, so = op.inputs[0].type.shape, op.inputs[1].type.shape, op.out.type.shape
        return cls(a, b, out, op, so[-2], so[-1], sa[-1], sa[:-2], sb[:-2], so[:-2], **kw)

    @property
    def reads(self) -> tuple[int, ...]:
        extra = (self.bias, self.a_scale, self.b_scale)
        return (self.a, self.b) + tuple(x for x in extra if x is not None)

    @property
    def outputs(self) -> tuple[int, ...]:
        return (self.out,) + tuple(b for b in (self.aux, self.bgrad) if b is not None)

    @property
    def writes(self) -> tuple[int, ...]:
        return self.outputs + self.scratch

    def format(self, ids: dict[Value, int]) -> str:
        attrs = {"m": self.m, "n": self.n, "k": self.k, "batch_a": list(self.batch_a),
                 "batch_b": list(self.batch_b), "batch": list(self.batch), "ta": self.ta, "tb": self.tb}
        if self.epilogue != "none":
            attrs["epilogue"] = self.epilogue
        info = ", ".join(f"{k}={format_attr(v)}" for k, v in attrs.items())
        ins = ", ".join(f"b{a}" for a in self.reads)
        outs = ", ".join(f"b{a}" for a in self.outputs)
        return f"{outs} = call {self.name} ({ins}) {{{info}}}{self._scratch_note()}  # {format_op(self.op, ids)}"


@dataclass(frozen=True)
class AttentionCall(LibraryCall):
    """Fused attention through cuDNN (runtime/cudnn_attention.py) for IR op `op` (ir/ops/attention.py):
    - forward (scaled_dot_product_attention: out = softmax(q @ k^T * scale [+ mask]) @ v); with
      `stats_op` (the op's softmax statistics, which the fusion pass joined to it) the call also
      writes their log-sum-exp into buffer `stats`;
    - statistics alone (scaled_dot_product_attention_stats: out = the log-sum-exp; the forward's
      result goes to the workspace);
    - backward (scaled_dot_product_attention_backward: out = dq, dk, dv packed flat, from o = the
      forward's result, grad_out and the forward's `stats`, which it reads).
    `workspace` is the call's scratch in the arena (`workspace_bytes` of it). `layouts`: the operands
    the call reads or writes through strides, as (name, start, strides) in elements of their buffer
    (flame.plan.views): q, k, v, o (the forward's result, the backward's input), grad_out, and the
    backward's dq, dk, dv (then `out` holds them at those places; without, packed flat). An operand
    without one is its buffer, contiguous."""

    name: ClassVar[str] = "attention"
    library: ClassVar[str] = "cuDNN"

    q: int = buffer_field()
    k: int = buffer_field()
    v: int = buffer_field()
    out: int = buffer_field()
    op: Op
    o: int | None = buffer_field(default=None)
    grad_out: int | None = buffer_field(default=None)
    stats: int | None = buffer_field(default=None)
    mask: int | None = buffer_field(default=None)
    workspace: int | None = buffer_field(default=None)
    stats_op: Op | None = None
    layouts: tuple[tuple[str, int, tuple[int, ...]], ...] = ()
    extras: tuple[int, ...] = buffer_field(default=())  # what the op's score_mod reads (ir/ops/attention.py)

    @property
    def backward(self) -> bool:
        return self.grad_out is not None

    def operands(self) -> dict[str, tuple[int, tuple[int, ...], int, tuple[int, ...]]]:
        """name -> (buffer, shape, start, strides in elements) of each tensor the call reads or writes
        but the statistics and the mask: q, k, v, o, and grad_out, dq, dk, dv for a backward."""
        return self._operands

    @functools.cached_property
    def _operands(self) -> dict[str, tuple[int, tuple[int, ...], int, tuple[int, ...]]]:
        """operands(), worked out once per step (the reference executor asks at every call)."""
        ins = [v.type.shape for v in self.op.inputs]
        got = {"q": (self.q, ins[0]), "k": (self.k, ins[1]), "v": (self.v, ins[2])}
        if self.backward:
            got.update(o=(self.o, ins[3]), grad_out=(self.grad_out, ins[4]))
            got.update(dq=(self.out, ins[0]), dk=(self.out, ins[1]), dv=(self.out, ins[2]))
        elif self.op.name == FORWARD:
            got["o"] = (self.out, self.op.out.type.shape)
        packed = {"dq": 0, "dk": math.prod(ins[0]), "dv": math.prod(ins[0]) + math.prod(ins[1])}
        lays = {name: (start, strides) for name, start, strides in self.layouts}
        return {name: (b, shape, *lays.get(name, (packed.get(name, 0), contiguous_strides(shape))))
                for name, (b, shape) in got.items()}

    def arrays(self, bufs: dict, as_strided) -> dict:
        """The operands' arrays (see operands) over the buffers' arrays `bufs` (NumPy or CuPy, whose
        `as_strided` makes the strided ones)."""
        out = {}
        for name, (b, shape, start, strides) in self.operands().items():
            flat = bufs[b].reshape(-1)
            out[name] = as_strided(flat[start:], shape, tuple(s * flat.itemsize for s in strides))
        return out

    @property
    def reads(self) -> tuple[int, ...]:
        """The op's inputs in order: q, k, v[, out, grad_out, stats (backward)][, mask | *extras]."""
        saved = (self.o, self.grad_out, self.stats) if self.backward else ()
        return tuple(b for b in (self.q, self.k, self.v, *saved, self.mask, *self.extras) if b is not None)

    @property
    def outputs(self) -> tuple[int, ...]:
        return (self.out,) if self.stats_op is None else (self.out, self.stats)

    @property
    def writes(self) -> tuple[int, ...]:
        return self.outputs + self.scratch

    @property
    def ops(self) -> tuple[Op, ...]:
        return (self.op,) if self.stats_op is None else (self.op, self.stats_op)

    def format(self, ids: dict[Value, int]) -> str:
        ins = ", ".join(f"b{a}" for a in self.reads)
        call = self.name + self.op.name.removeprefix("scaled_dot_product_attention")
        outs = ", ".join(f"b{b}" for b in self.outputs)
        ops = "; ".join(format_op(op, ids) for op in self.ops)
        lays = "".join(f" {n}={start}+{list(strides)}" for n, start, strides in self.layouts)
        strided = f" {{strided{lays}}}" if lays else ""
        return f"{outs} = call {call} ({ins}){strided}{self._scratch_note()}  # {ops}"


@dataclass(frozen=True)
class CollectiveCall(LibraryCall):
    """A collective (IR op `op`: all_reduce, broadcast, all_gather or reduce_scatter, see
    ir/ops/collective.py) through the process group's communicator: NCCL on CUDA
    (runtime/nccl.py), the store exchange or the identity on the reference executor. Several inputs
    are packed flat, in order, into `out` (all_gather: at this rank's slot) or into `workspace`
    (reduce_scatter, whose `out` is one rank's part) and the collective runs once on the packed bytes.
    `overlap`: issued on the communication stream after the steps before it, and finished by the
    Wait the plan builder puts before the first step that needs its buffers again, so the
    steps between them overlap the transfer."""

    name: ClassVar[str] = "collective"
    library: ClassVar[str] = "NCCL"

    inputs: tuple[int, ...] = buffer_field()
    out: int = buffer_field()
    op: Op
    workspace: int | None = buffer_field(default=None)
    overlap: bool = False

    @property
    def reads(self) -> tuple[int, ...]:
        return self.inputs

    def format(self, ids: dict[Value, int]) -> str:
        attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in self.op.attrs.items())
        ins = ", ".join(f"b{a}" for a in self.inputs)
        stream = " on comm stream" if self.overlap else ""
        return (f"b{self.out} = call {self.op.name} ({ins}) {{{attrs}}}{self._scratch_note()}{stream}  "
                f"# {format_op(self.op, ids)}")


@dataclass(frozen=True)
class Wait(Step):
    """The plan's stream waits for an overlapped step to finish: a CollectiveCall on the communication
    stream, an update's KernelLaunch on the side stream or a HostCopy on the host-copy stream
    (`stream`), the one writing `out` for IR op
    `op`. It reads the step's inputs and writes what the step writes (`out`, then `rest`: a workspace,
    other results, scratch) as far as the memory planner is concerned, so those bytes stay untouched
    by other steps while the step runs. A bound input the step itself overwrites in place is not
    among `inputs` (nothing can take its bytes, and reading it here would cost the update its
    in-place write)."""

    inputs: tuple[int, ...] = buffer_field()
    out: int = buffer_field()
    op: Op  # the step's (first) op: with `out`, it names the step's events (the wait itself does no work)
    rest: tuple[int, ...] = buffer_field(default=())
    stream: str = "comm"

    @property
    def ops(self) -> tuple[Op, ...]:
        return ()

    @property
    def reads(self) -> tuple[int, ...]:
        return self.inputs

    @property
    def writes(self) -> tuple[int, ...]:
        return (self.out,) + self.rest

    @property
    def outputs(self) -> tuple[int, ...]:
        return ()

    def format(self, ids: dict[Value, int]) -> str:
        what = {"comm": "collective", "side": "update", "host": "host copy"}[self.stream]
        return f"wait b{self.out}  # the {what} writing b{self.out} on the {self.stream} stream has finished"


@dataclass(frozen=True)
class ConvCall(LibraryCall):
    """A convolution through cuDNN (runtime/cudnn_conv.py) for IR op `op`: conv (out = y from x, w),
    conv_grad_input (out = dx from dy, w) or conv_grad_weight (out = dw from x, dy); the two operands
    the op reads are set, the third is None. `workspace` is the call's scratch in the arena (the
    bytes the target says the call needs)."""

    name: ClassVar[str] = "conv"
    library: ClassVar[str] = "cuDNN"
    KINDS: ClassVar[dict[str, str]] = {"conv": "fprop", "conv_grad_input": "dgrad", "conv_grad_weight": "wgrad"}

    out: int = buffer_field()
    op: Op
    x: int | None = buffer_field(default=None)
    w: int | None = buffer_field(default=None)
    dy: int | None = buffer_field(default=None)
    workspace: int | None = buffer_field(default=None)

    @classmethod
    def of(cls, op: Op, a: int, b: int, out: int, workspace: int | None = None) -> ConvCall:
        """The call computing `op` from buffers a, b (its inputs in IR order) into out."""
        names = {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("x", "dy")}[cls.KINDS[op.name]]
        return cls(out, op, workspace=workspace, **dict(zip(names, (a, b))))

    @property
    def kind(self) -> str:
        return self.KINDS[self.op.name]

    @property
    def reads(self) -> tuple[int, ...]:
        """The operands in the op's input order: (x, w), (dy, w) or (x, dy)."""
        order = {"fprop": (self.x, self.w), "dgrad": (self.dy, self.w), "wgrad": (self.x, self.dy)}
        return order[self.kind]

    def format(self, ids: dict[Value, int]) -> str:
        ins = ", ".join(f"b{a}" for a in self.reads)
        return f"b{self.out} = call {self.op.name} ({ins}){self._scratch_note()}  # {format_op(self.op, ids)}"


@dataclass(frozen=True)
class HostCopy(LibraryCall):
    """An offloaded activation's copy (IR op `op`: offload or reload, ir/ops/host.py) between device
    memory and pinned host memory: `to_host` copies device buffer `src` into host buffer `out` (role
    "host": not in the arena, not on the device), else host `src` into device `out`. `overlap`: issued
    on the host-copy stream after the steps before it, and finished by the Wait the plan builder puts
    after the next compute step (an offload: its source's bytes are free after that) or before the
    first reader (a reload), so the transfers run while compute does."""

    name: ClassVar[str] = "host_copy"
    library: ClassVar[str] = "CUDA runtime"

    src: int = buffer_field()
    out: int = buffer_field()
    op: Op
    to_host: bool = True
    overlap: bool = True
    workspace: int | None = buffer_field(default=None)

    @property
    def reads(self) -> tuple[int, ...]:
        return (self.src,)

    def format(self, ids: dict[Value, int]) -> str:
        where = "host" if self.to_host else "device"
        stream = " on host-copy stream" if self.overlap else ""
        return f"b{self.out} = copy to {where} b{self.src}{stream}  # {format_op(self.op, ids)}"


@dataclass(frozen=True)
class Copy(Step):
    """Copy the bytes of buffer src into buffer dst (same size)."""

    src: int = buffer_field()
    dst: int = buffer_field()

    @property
    def ops(self) -> tuple[Op, ...]:
        return ()

    @property
    def reads(self) -> tuple[int, ...]:
        return (self.src,)

    @property
    def writes(self) -> tuple[int, ...]:
        return (self.dst,)

    def format(self, ids: dict[Value, int]) -> str:
        return f"b{self.dst} = copy b{self.src}"


@dataclass(frozen=True)
class Alias(Step):
    """dst is a view of src's bytes with another shape (IR op `op`'s), starting `start` elements
    into src (a slice that selects a contiguous block; 0 for reshapes): no work at run time beyond
    the view, so it reads and writes nothing, but both buffers are touched (live) at the step."""

    src: int = buffer_field()
    dst: int = buffer_field()
    op: Op
    start: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.out.type.shape

    @property
    def ops(self) -> tuple[Op, ...]:
        return ()

    @property
    def reads(self) -> tuple[int, ...]:
        return ()

    @property
    def writes(self) -> tuple[int, ...]:
        return ()

    @property
    def touches(self) -> tuple[int, ...]:
        return (self.src, self.dst)

    def format(self, ids: dict[Value, int]) -> str:
        at = f" + {self.start}" if self.start else ""
        return f"b{self.dst} = alias b{self.src}{at}  # {format_op(self.op, ids)}"

    def view(self, src):
        """The view of array `src` (NumPy or CuPy, contiguous) this step binds to dst."""
        if not self.start and src.size == math.prod(self.shape):
            return src.reshape(self.shape)
        return src.reshape(-1)[self.start: self.start + math.prod(self.shape)].reshape(self.shape)


@dataclass(frozen=True)
class MemoryBudget:
    """What flame.compile(memory_budget=...) asked for and what the plan had without it: `requested`
    as given (bytes, or a fraction of the unconstrained peak), `bytes` the budget in bytes, and the
    planned peak of the same step without rematerialisation for the budget."""

    requested: float
    bytes: int
    unconstrained_peak: int


@dataclass(frozen=True)
class ActivationBudget:
    """What flame.compile(activation_budget=...) asked for and what the solver chose
    (passes/activation_budget.py): `requested` the fraction, the activation bytes kept for the backward
    without the budget (`unconstrained`), the budget in bytes, the bytes kept with it (`kept`), all three
    as the memory report counts them on the finished plans (plan/memory.saved_bytes), and each choice as
    (kind: "recompute" or "offload", the value's IR line, its bytes, the seconds it costs at the
    Target's rates)."""

    requested: float
    unconstrained: int
    bytes: int
    kept: int
    choices: tuple[tuple[str, str, int, float], ...] = ()


@dataclass
class Plan:
    """Buffers (by id), steps in order, the buffer of each graph input and output, and the arena
    size. `graph` and `buffer_of` (Value -> buffer id) let the reference executor run the IR ops.
    `memory_budget` / `activation_budget`: set when the plan was fitted to a budget (the memory report
    shows it). `reused`: the kernels rendered once and reused by alike groups (a model's repeated
    blocks), as (kernel names, how many more groups took them), for `flame explain`."""

    name: str
    buffers: dict[int, Buffer]
    steps: list[Step]
    inputs: list[int]
    outputs: list[int]
    arena_size: int
    graph: Graph
    buffer_of: dict[Value, int]
    memory_budget: MemoryBudget | None = None
    activation_budget: ActivationBudget | None = None
    reused: tuple[tuple[tuple[str, ...], int], ...] = ()

    def kernels(self) -> list[KernelLaunch]:
        return [s for s in self.steps if isinstance(s, KernelLaunch)]

    def root(self, bid: int) -> Buffer:
        """The buffer that owns bid's bytes (follows views)."""
        return self.buffers[root(self.buffers, bid)]

    def __str__(self) -> str:
        return format_plan(self)


def format_plan(plan: Plan) -> str:
    """The whole plan: header with the arena size, buffers with roles and offsets, steps (one line
    each, IR-like: `b5 = launch add_f32 <<<4, 256, 0>>> (b0, b1)  # %5 = add ...`), returns."""
    ids = plan.graph.numbering()
    lines = [f"plan {plan.name} (arena {plan.arena_size} bytes) {{"]
    lines += ["  " + plan.buffers[k].describe() for k in sorted(plan.buffers)]
    lines += ["  ---"]
    lines += ["  " + s.format(ids) for s in plan.steps]
    lines.append("  return" + (" " + ", ".join(f"b{o}" for o in plan.outputs) if plan.outputs else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"
