"""What a backward frees: torch frees the saved tensors of the nodes a backward runs, so a second
backward through one of them raises, while a node that saves none (a view, a cat, a sum, an add) can
be passed again. flame keeps no saved tensors of its own (the gradient graph reads forward values);
an op "saves" what its VJP reads, found by running that VJP once per op signature.

Saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks): while a (pack, unpack) pair is
installed, an eager op that records a gradient history calls pack(t) on each tensor its VJP reads (the
inputs, by position, and its result), the innermost pair only, as torch's; the node keeps what pack
returned. A backward through the node calls unpack on each and its VJP reads the unpacked tensors in
place of the forward's (passes/autodiff.py `unpacked`). Both hooks run with gradients off, as torch's.
Inside @flame.compile an op recorded with hooks installed is a TraceError: the traced step has no
point where Python could run them. Where flame computes forward-mode derivatives by reverse mode
(flame.func.jvp, jacfwd, forward AD) no hook runs, as torch's forward mode saves nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from flame.errors import AutogradError, TraceError
from flame.ir.builder import Builder
from flame.ir.graph import Graph, Op, Value, is_backward
from flame.ir.registry import REGISTRY
from flame.ir.types import TensorType
from flame.passes.autodiff import autodiff

# the installed (pack, unpack) pairs, innermost last
_hooks: ContextVar[tuple] = ContextVar("flame_saved_tensors_hooks", default=())
# the message of an entered disable_saved_tensors_hooks, or None
_disabled: ContextVar[str | None] = ContextVar("flame_saved_tensors_hooks_disabled", default=None)
# inside a forward-mode transform (flame.func.jvp, jacfwd, forward AD's tangents): flame computes its
# tangents by reverse mode, where torch saves nothing, so no hook runs
_suspended: ContextVar[bool] = ContextVar("flame_saved_tensors_hooks_suspended", default=False)
# forward AD's answer to whether an op on these inputs records a gradient torch would record (one that
# reads a tensor that requires grad for a reason other than carrying a tangent), or None
grad_for_real: ContextVar = ContextVar("flame_grad_for_real", default=None)


def reads(ops: Iterable[Op], stop: Op | None = None) -> set[Value]:
    """The values the backward ops among `ops` (the ones autodiff appended) read, directly or through
    the forward values the pass added for them (residuals, constants); not through op `stop`'s inputs."""
    read: set[Value] = set()
    todo = [v for op in ops if is_backward(op) for v in op.inputs]
    while todo:
        v = todo.pop()
        if v not in read:
            read.add(v)
            if v.producer is not None and not is_backward(v.producer) and v.producer is not stop:
                todo.extend(v.producer.inputs)
    return read


_READS: dict[tuple, tuple[frozenset, bool]] = {}
_READS_KEPT = 4096  # answers kept (each size of a dynamic dim is a signature of its own)


def vjp_reads(op: Op) -> tuple[frozenset, bool]:
    """(the positions of the inputs op's VJP reads, whether it reads the result), from its VJP run once
    on an op of the same name, attributes and input types (a Python number's constant is an input, as
    torch saves a wrapped number)."""
    return _reads_of(op.name, op.attrs, tuple(x.type for x in op.inputs))


def _reads_of(name: str, attrs: dict, types: tuple, needs: tuple | None = None) -> tuple[frozenset, bool]:
    """vjp_reads of op `name` on inputs of `types`, the gradients of the inputs at `needs` (True/False
    per input; None: every floating-point input) asked for. With `needs`, what the VJP reads itself (for
    saved-tensor hooks): its reading the result does not count as reading the inputs the result is made of."""
    key = (name, repr(sorted(attrs.items())), types, needs)
    if key not in _READS:
        g = Graph("saves")
        ins = [g.add_input(t) for t in types]
        out = Builder(g).emit(name, *ins, **attrs)
        wrt = [x for i, x in enumerate(ins) if x.dtype.is_float and (needs is None or needs[i])]
        got = set()
        if out.dtype.is_float and wrt and REGISTRY[name].vjp is not None:
            autodiff(g, out, wrt, g.add_input(out.type))
            got = reads(g.ops, out.producer if needs is not None else None)
        if len(_READS) >= _READS_KEPT:
            _READS.clear()
        _READS[key] = (frozenset(i for i, x in enumerate(ins) if x in got), out in got)
    return _READS[key]


def saved_inputs(op: Op, needs: tuple) -> frozenset:
    """The positions of the inputs op's VJP reads itself (its reading the result aside), the gradients
    of the inputs at `needs` (True/False each) asked for (what torch's node saves: torch_saved)."""
    return saved_reads(op, needs)[0]


def saved_reads(op: Op, needs: tuple) -> tuple[frozenset, bool]:
    """(saved_inputs, whether op's VJP reads its result), the gradients of the inputs at `needs` asked
    for: what flame's VJP reads (torch's node may save otherwise: torch_saved)."""
    return _reads_of(op.name, op.attrs, tuple(x.type for x in op.inputs), needs)


def torch_saved(op: Op, needs: tuple) -> tuple[frozenset, bool]:
    """(the positions of the inputs, whether the result) torch's node of op saves, the gradients of the
    inputs at `needs` asked for: the op's `saves` trait, else what its VJP reads (saved_reads)."""
    declared = REGISTRY[op.name].saves
    return declared(op, needs) if declared is not None else saved_reads(op, needs)


class saved_tensors_hooks:
    """torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook): inside the block, pack_hook(t)
    is called on every tensor an op saves for its backward and may return any object; unpack_hook(obj)
    is called on it when a backward needs the tensor and must return a tensor of t's shape (converted to
    t's dtype), which the backward uses in t's place. Nested blocks: the innermost pair is used."""

    def __init__(self, pack_hook: Callable[[Any], Any], unpack_hook: Callable[[Any], Any]) -> None:
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook
        self._token = None

    def __enter__(self) -> saved_tensors_hooks:
        if _disabled.get() is not None:
            raise RuntimeError(_disabled.get())
        self._token = _hooks.set((*_hooks.get(), (self.pack_hook, self.unpack_hook)))
        return self

    def __exit__(self, *exc) -> None:
        _hooks.reset(self._token)


class save_on_cpu(saved_tensors_hooks):
    """torch.autograd.graph.save_on_cpu: saved tensors are kept in host memory (Tensor.cpu()) and moved
    back to the device they came from when the backward needs them. pin_memory and device_type are
    accepted as torch's (flame's host copies are plain NumPy arrays)."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack(t):
            return t.device, t.cpu()

        def unpack(packed):
            device, t = packed
            return t.to(device)

        super().__init__(pack, unpack)


class disable_saved_tensors_hooks:
    """torch.autograd.graph.disable_saved_tensors_hooks(error_message): inside the block, installing
    saved-tensor hooks raises RuntimeError(error_message), and so does entering it with hooks installed."""

    def __init__(self, error_message: str) -> None:
        self.error_message = error_message
        self._token = None

    def __enter__(self) -> disable_saved_tensors_hooks:
        if _hooks.get():
            raise RuntimeError(self.error_message)
        self._token = _disabled.set(self.error_message)
        return self

    def __exit__(self, *exc) -> None:
        _disabled.reset(self._token)


def hooks_installed() -> bool:
    return bool(_hooks.get()) and not _suspended.get()


def saves_nothing() -> bool:
    """Inside hooks_suspended: the reverse-mode passes of a forward-mode transform, whose nodes torch never
    records (its forward AD saves nothing), so no saved-tensor hook runs and no version is checked."""
    return _suspended.get()


@contextmanager
def hooks_suspended():
    """No saved-tensor hook runs inside (the gradients a forward-mode transform computes by reverse mode
    save nothing in torch)."""
    token = _suspended.set(True)
    try:
        yield
    finally:
        _suspended.reset(token)


def refuse_in_trace(name: str, loc: str | None) -> TraceError:
    """The error of an op recording a gradient inside @flame.compile while saved-tensor hooks are installed."""
    return TraceError(f"{name}: saved_tensors_hooks (or save_on_cpu) cannot run inside @flame.compile: a compiled "
                      f"step keeps no saved tensors a Python hook could pack and unpack; install the hooks around "
                      f"eager code only\n  at {loc}")


def packs(inputs) -> bool:
    """Whether an op recording a gradient from `inputs` runs the pack hook: not where its gradient
    history only carries forward AD's tangents (torch's forward AD saves nothing)."""
    real = grad_for_real.get()
    return real is None or real(inputs)


def pack_saves(name: str, attrs: dict, inputs: tuple, out, scalar_type: Callable) -> dict | None:
    """The installed pack hook run on what an eager op (name, attrs, inputs -> out) saves for its
    backward: {input position (-1: the result): (the unpack hook, what pack returned)}, or None."""
    from flame.frontend.tensor import Tensor

    if not packs(inputs):
        return None

    types = tuple(TensorType(x.shape, x.dtype) if isinstance(x, Tensor) else scalar_type(x) for x in inputs)
    needs = tuple(isinstance(x, Tensor) and x.requires_grad for x in inputs)
    positions, result = _reads_of(name, attrs, types, needs)
    saved = [i for i in sorted(positions) if isinstance(inputs[i], Tensor)] + ([-1] if result else [])
    if not saved:
        return None
    return pack_tensors({i: out if i < 0 else inputs[i] for i in saved})


def pack_tensors(tensors: dict) -> dict:
    """{position: (the unpack hook, what the installed pack hook returned for the tensor there)}, the
    hook run with gradients off, as torch's."""
    from flame.frontend.context import no_grad

    pack, unpack = _hooks.get()[-1]
    with no_grad():
        return {i: (unpack, pack(t)) for i, t in tensors.items()}


def unpack_saves(node, saved_type: Callable) -> dict:
    """{position: the tensor its unpack hook returns} for a node whose saves were packed; each must have
    the shape of the tensor saved (saved_type(position)), and is converted to its dtype."""
    from flame.frontend.context import no_grad, user_location
    from flame.frontend.tensor import Tensor

    got = {}
    with no_grad():
        for i, (unpack, packed) in node.packed.items():
            t = unpack(packed)
            want = saved_type(i)
            if not isinstance(t, Tensor) or tuple(t.shape) != want.shape:
                what = f"{t.dtype}{list(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
                raise AutogradError(f"unpack_hook: returned {what} for a tensor {node.name} saved as "
                                    f"{want.dtype}{list(want.shape)} (at {node.loc}); it must return a tensor of "
                                    f"the saved tensor's shape\n  at {user_location()}")
            got[i] = t if t.dtype == want.dtype else t.to(want.dtype)  # (a compressing pair's dtype comes back)
    return got


def saves(op: Op, read: set[Value]) -> bool:
    """Whether a backward that read `read` ran op's VJP and read what it saves. A user Function's op
    (its VJP is the user's backward, not run here) saves whenever the backward read one of its values."""
    if REGISTRY[op.name].call_result:
        return op.out in read or any(x in read for x in op.inputs)
    positions, result = vjp_reads(op)
    return (result and op.out in read) or any(op.inputs[i] in read for i in positions)
