"""User ops as Tensor functions (flame.cuda.kernel, flame.cuda.elementwise): the callable the user gets,
which runs or records the op (eager and inside @flame.compile alike) and checks, at the first call for
each input signature, that the user's CUDA code compiles with NVRTC (the error then names the user's
line and the call); and the user's backward, written with flame Tensor ops, as the op's VJP."""

from __future__ import annotations

from collections.abc import Callable

from flame.codegen.user import compile_check
from flame.errors import AutogradError, FlameError, TraceError
from flame.frontend.context import current_trace, user_location
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor
from flame.frontend.trace import Trace
from flame.ir.graph import BackwardLoc, Value
from flame.ir.registry import get
from flame.ir.types import TensorType
from flame.runtime.device import cuda_available

CHECK_ARCH = "sm_90"  # what a user kernel is compiled for to check it where no GPU is present


def definition_site() -> str | None:
    """The user's `file.py:LINE` of the current call (no source text: it goes into kernel sources)."""
    loc = user_location()
    return loc.split("  ", 1)[0] if loc else None


class _BackwardTrace(Trace):
    """The trace a user's backward runs in: its ops go into the graph being differentiated, through the
    autodiff pass's builder; a tensor from outside (a captured parameter) has no value there."""

    what: str = ""

    def value_of(self, t) -> Value:
        if t._value is None:
            raise AutogradError(
                f"{self.what}: its vjp used a tensor it was not given (shape {list(t.shape)}); a "
                f"vjp computes with its arguments (grad, the inputs, out) and Python numbers only"
            )
        return super().value_of(t)


def run_backward(b, what: str, fn: Callable, values) -> tuple:
    """fn(*tensors) over the Values `values` (None stays None) of the graph being differentiated, as
    traced Tensors: its flame ops are appended to that graph through the autodiff pass's builder `b`, each
    marked as backward work (BackwardLoc) with the user's line. Returns (what fn returned, the trace)."""
    trace = _BackwardTrace(b.graph)
    trace.builder, trace.what = b, what
    loc, start, token = b.loc, len(b.graph.ops), current_trace.set(trace)
    try:
        got = fn(*(None if v is None else Tensor._traced(v, trace) for v in values))
    finally:
        current_trace.reset(token)
        b.loc = loc
    for op in b.graph.ops[start:]:
        if not isinstance(op.loc, BackwardLoc):
            op.loc = BackwardLoc(op.loc or "")
    return got, trace


def tensor_vjp(fn: Callable, what: str) -> Callable:
    """`fn(grad, *inputs, out)` over flame Tensors (returning one gradient Tensor or None per input) as an
    OpDef VJP `vjp(b, g, *inputs, out)` over the builder's Values."""

    def vjp(b, g, *args):
        got, trace = run_backward(b, what, fn, (g, *args))
        many = isinstance(got, (tuple, list))
        out = []
        for x in got if many else (got,):
            if x is not None and not (isinstance(x, Tensor) and x._trace is trace):
                raise AutogradError(
                    f"{what}: its vjp returned {type(x).__name__}; expected a flame Tensor "
                    f"computed from its arguments, or None, per input"
                )
            out.append(None if x is None else x._value)
        return tuple(out) if many else out[0]

    return vjp


class UserOp:
    """A user's op as a function of Tensors (and Python numbers): `op(x, y)` runs it eagerly or records it
    in a @flame.compile trace. `name` is its op in the IR (`flame explain` and IR dumps show it)."""

    def __init__(self, name: str):
        self.name = name
        self._checked: set[tuple] = set()
        self.__doc__ = get(name).doc

    def __call__(self, *inputs):
        opdef = get(self.name)
        if len(inputs) != opdef.arity:
            params = ", ".join(opdef.user.params)
            raise FlameError(
                f"{opdef.user.what}: takes {opdef.arity} inputs ({params}), got {len(inputs)}\n  at {user_location()}"
            )
        self._check(inputs)
        return apply(self.name, *inputs)

    def _check(self, inputs: tuple) -> None:
        """Compile the op for these input types with NVRTC once (where NVRTC is present)."""
        types = tuple(TensorType(tuple(x.shape), x.dtype) for x in inputs if hasattr(x, "dtype"))
        if types in self._checked or len(types) != len(inputs):
            return
        arch = _check_arch()
        if arch is None:
            return
        try:
            compile_check(self.name, types, arch)
        except (FlameError, TraceError) as e:
            raise type(e)(f"{e}\n  at {user_location()}") from None
        self._checked.add(types)

    def __repr__(self) -> str:
        return f"<flame user op {self.name}: {get(self.name).doc}>"


def _check_arch() -> str | None:
    """The architecture to check user kernels for: the GPU's, or CHECK_ARCH where NVRTC is present without
    a GPU; None where there is no NVRTC (the kernel is then compiled where it runs)."""
    from flame.codegen import nvrtc

    if cuda_available():
        return nvrtc.device_arch()
    try:
        nvrtc.nvrtc_version()
    except Exception:
        return None
    return CHECK_ARCH
