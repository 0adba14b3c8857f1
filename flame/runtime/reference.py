"""The NumPy reference executor. run_graph interprets a graph op by op with each op's reference
implementation (the test oracle); run_plan runs a compiled Plan exactly as the CUDA executor does,
with the arena as one NumPy byte buffer and temporaries as views at their planned offsets, so a
wrong memory plan breaks results here too (ARCHITECTURE.md "Plans are data"). It is the executor without a GPU."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial

import numpy as np

from flame.errors import FlameError
from flame.ir.evaluate import compute_op, evaluate_graph
from flame.ir.graph import Graph
from flame.ir.ops.elementwise import gelu_tanh
from flame.ir.registry import gemm_bias, get
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
)
from flame.runtime.communicator import run_collective
from flame.runtime.segments import kernel_function

log = logging.getLogger("flame")
POISON = 0xFF  # fresh arena bytes: NaN in every float dtype, so a read of unwritten memory shows


def check_inputs(g: Graph, arrays: Sequence) -> None:
    if len(arrays) != len(g.inputs):
        raise FlameError(f"graph {g.name} takes {len(g.inputs)} inputs, got {len(arrays)}")
    for i, (v, a) in enumerate(zip(g.inputs, arrays)):
        if tuple(a.shape) != v.type.shape or a.dtype != v.type.dtype.np_dtype:
            raise FlameError(f"graph {g.name}: input {i} should be {v.type}, got "
                             f"{a.dtype}{list(a.shape)}")


def run_graph(g: Graph, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Interpret g on NumPy arrays; returns one array per graph output."""
    check_inputs(g, arrays)
    env = evaluate_graph(g, arrays)
    return [env[v] for v in g.outputs]


def arena_view(arena: np.ndarray, b: Buffer) -> np.ndarray:
    """The array a temporary or scratch buffer occupies in the arena."""
    return np.ndarray(b.shape, b.dtype.np_dtype, arena, b.offset)  # one call (bind makes ~100 per run)


def _launch(s: KernelLaunch, bufs: dict, plan: Plan) -> None:
    """The kernel's ops by segment, alike segments at once (runtime/segments.py)."""
    kernel_function(s, plan)(bufs)


def _matmul(s: MatmulCall, bufs: dict, plan: Plan) -> None:
    """ta/tb read a stored-transposed operand (an FP8 GEMM also reads its two scales: the op's reference
    emulates it); the epilogue is applied to the f32-or-wider product as cuBLASLt does: + bias, the
    pre-activation rounded once into aux, relu or tanh-GELU rounded once into out; bgrad_a / bgrad_b
    sum op(a) / op(b) over k in f32 (or wider). A GEMM with a bias of its own (matmul_bias) adds it
    before the one rounding."""
    a, b = bufs[s.a], bufs[s.b]
    if s.ta:
        a = np.swapaxes(a, -1, -2)
    if s.tb:
        b = np.swapaxes(b, -1, -2)
    own = gemm_bias(s.op) is not None
    # the op's inputs: an FP8 GEMM's inverse scales, or the bias of a GEMM with its own
    ins = [a, b, *(bufs[x] for x in ((s.bias,) if own else (s.a_scale, s.b_scale)) if x is not None)]
    epilogue = s.epilogue
    if epilogue.startswith("bgrad"):
        out = compute_op(s.op, ins)
        x, axis = (a, -1) if epilogue == "bgrad_a" else (b, -2)
        acc = np.promote_types(x.dtype, np.float32)
        np.copyto(bufs[s.bgrad], x.astype(acc).sum(axis).reshape(bufs[s.bgrad].shape), casting="unsafe")
    elif epilogue != "none":
        out = _accumulator(s.op, ins)
        if "bias" in epilogue and not own:
            out = out + bufs[s.bias].reshape(-1).astype(out.dtype)
        if s.aux is not None:
            np.copyto(bufs[s.aux], out, casting="unsafe")
        if "relu" in epilogue:
            out = np.maximum(out, 0)
        if "gelu" in epilogue:
            out = gelu_tanh(out)
    else:
        out = compute_op(s.op, ins)
    np.copyto(bufs[s.out], out, casting="unsafe")


def _accumulator(op, ins: list) -> np.ndarray:
    """GEMM op's result before its rounding, in f32 for f16/bf16 operands (exact in f32: the op's reference
    on them sums in f32, as its narrow one does); an FP8 GEMM's emulation rounds as the op says."""
    if len(ins) == 2 or gemm_bias(op) is not None:
        wide = [x.astype(np.promote_types(x.dtype, np.float32), copy=False) for x in ins]
        return np.asarray(get(op.name).ref(*wide, **op.attrs))
    out = compute_op(op, ins)
    return out.astype(np.promote_types(out.dtype, np.float32), copy=False)


def _strided(x: np.ndarray, shape: tuple, strides: tuple) -> np.ndarray:
    """NumPy's as_strided in one np.ndarray call over contiguous x (which checks that the view stays
    inside x; as_strided's Python costs ~5 us, six times per attention call)."""
    return np.ndarray(shape, x.dtype, x, 0, strides)


def _attention(s: AttentionCall, bufs: dict, plan: Plan) -> None:
    """The op's NumPy reference on the call's operands, read and written through their layouts (the
    workspace is cuDNN's alone), and that of the softmax statistics the call also writes (they read
    the forward's inputs). A backward's packed result is written part by part (dq, dk, dv)."""
    arrays = s.arrays(bufs, _strided)
    names = ("q", "k", "v", "o", "grad_out")[: 5 if s.backward else 3]
    ins = [arrays[n] for n in names] + [bufs[b] for b in s.reads[len(names):]]  # the op's inputs in order
    got = compute_op(s.op, ins)
    if s.backward:
        at = 0
        for n in ("dq", "dk", "dv"):
            np.copyto(arrays[n], got[at: at + arrays[n].size].reshape(arrays[n].shape))
            at += arrays[n].size
        if s.extras:  # a score modification's float extras' gradients, after dv in the flat result
            np.copyto(bufs[s.out].reshape(-1)[at:], got[at:])
    else:
        np.copyto(arrays["o"] if "o" in arrays else bufs[s.out], got)
    if s.stats_op is not None:
        np.copyto(bufs[s.stats], compute_op(s.stats_op, ins))


def _collective(s: CollectiveCall, bufs: dict, plan: Plan) -> None:
    """Through the process's communicator (the identity in a world of one, the TCP-store exchange
    between processes otherwise); synchronous, so the matching Wait has nothing to do."""
    run_collective(s, bufs)


def _wait(s: Wait, bufs: dict, plan: Plan) -> None:
    pass


def _host_copy(s: HostCopy, bufs: dict, plan: Plan) -> None:
    """An offloaded activation to or from its host buffer (a NumPy array outside the arena), byte for byte."""
    np.copyto(bufs[s.out], bufs[s.src])


def _conv(s: ConvCall, bufs: dict, plan: Plan) -> None:
    """The op's NumPy reference on the call's operands (the workspace is cuDNN's alone)."""
    np.copyto(bufs[s.out], compute_op(s.op, [bufs[b] for b in s.reads]))  # reads: the op's inputs in order


def _alias(s: Alias, bufs: dict, plan: Plan) -> None:
    bufs[s.dst] = s.view(bufs[s.src])


def _copy(s: Copy, bufs: dict, plan: Plan) -> None:
    np.copyto(bufs[s.dst], bufs[s.src])


STEP_HANDLERS = {KernelLaunch: _launch, MatmulCall: _matmul, AttentionCall: _attention, CollectiveCall: _collective,
                 Wait: _wait, ConvCall: _conv, Alias: _alias, Copy: _copy, HostCopy: _host_copy}  # one per step type


def bind(plan: Plan, arrays: Sequence[np.ndarray], arena: np.ndarray | None = None) -> dict[int, np.ndarray]:
    """The arrays behind a plan's buffers for one run: inputs bound as given, outputs fresh,
    temporaries as views into `arena` (a uint8 buffer of plan.arena_size bytes; a fresh poisoned one
    by default). Views are bound by the Alias steps as they run."""
    check_inputs(plan.graph, arrays)
    if arena is None:
        arena = np.full(plan.arena_size, POISON, dtype=np.uint8)
    bufs: dict[int, np.ndarray] = dict(zip(plan.inputs, arrays))
    for b in plan.buffers.values():
        if b.role in ("temporary", "scratch"):
            bufs[b.id] = arena_view(arena, b)
        elif (b.role == "output" and b.base is None) or b.role == "host":
            bufs[b.id] = np.empty(b.shape, b.dtype.np_dtype)
    return bufs


StepHook = Callable[[Plan, int, Step, dict], None]
_step_hooks: ContextVar[tuple[StepHook, ...]] = ContextVar("flame_reference_step_hooks", default=())


@contextmanager
def watch_steps(hook: StepHook):
    """Call hook(plan, index, step, buffers) after every step the reference executor runs inside this
    block (compiled functions, eager ops and backward graphs alike), and hook(plan, -1, None, buffers)
    before the first: `flame check --nan` watches every kernel's output this way. Costs nothing
    outside such a block."""
    token = _step_hooks.set(_step_hooks.get() + (hook,))
    try:
        yield
    finally:
        _step_hooks.reset(token)


def prepare(plan: Plan) -> list[Callable[[dict], None]]:
    """Each step of the plan as a function of a run's buffers: its STEP_HANDLERS entry, a kernel's
    segments worked out once (segments.kernel_function)."""
    return [kernel_function(s, plan) if isinstance(s, KernelLaunch) else partial(_handle, s, plan)
            for s in plan.steps]


def _handle(s: Step, plan: Plan, bufs: dict) -> None:
    STEP_HANDLERS[type(s)](s, bufs, plan)


def run_plan(plan: Plan, arrays: Sequence[np.ndarray], arena: np.ndarray | None = None,
             program: list | None = None) -> list[np.ndarray]:
    """Run a Plan on NumPy arrays: inputs bound as given, outputs fresh, temporaries in `arena`
    (a uint8 buffer of plan.arena_size bytes; a fresh poisoned one by default); `program`: prepare(plan)
    (made here if not given; a compiled plan keeps its own)."""
    bufs = bind(plan, arrays, arena)
    hooks = _step_hooks.get()
    for hook in hooks:
        hook(plan, -1, None, bufs)
    with np.errstate(all="ignore"):  # the step handlers compute with compute_op: IEEE results, no warnings
        for i, (s, run) in enumerate(zip(plan.steps, prepare(plan) if program is None else program)):
            run(bufs)
            for hook in hooks:
                hook(plan, i, s, bufs)
    return [bufs[o] for o in plan.outputs]


class ReferenceExecutor:
    """Executor interface (shared with runtime.cuda): arrays in and out, graphs compiled to callables."""

    name = "reference"

    def asarray(self, data, dtype=None) -> np.ndarray:
        return np.asarray(data, dtype=dtype)

    def to_numpy(self, a, dtype=None) -> np.ndarray:
        return np.asarray(a)

    def from_dlpack(self, obj) -> np.ndarray:
        return np.from_dlpack(obj)

    def arena(self) -> None:
        """The arena the plans of one compiled function share: none here, where every call allocates
        a fresh poisoned one (run_plan) and frees it when it returns."""
        return None

    def compile(self, plan: Plan, arena: None = None):
        """A callable running the (memory-planned) Plan on NumPy; `.plan` is the plan. arena: as the
        CUDA executor's compile takes it (this executor's arena() is None)."""
        run = partial(run_plan, plan, program=prepare(plan))
        run.plan = plan
        return run
