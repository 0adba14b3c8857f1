"""Ops the user defines with their own CUDA code (flame.cuda.kernel, flame.cuda.elementwise): one OpDef
per definition, registered as `user_<name>` (a number appended when that name is taken), carrying the
user's NumPy reference (what the reference executor runs), a gradient rule and the `user` trait
(UserCode) that codegen renders. The elementwise form is an "elementwise" op, so the fusion pass fuses
it with its neighbours like a built-in one; the raw-kernel form is "opaque": its own launch, its own
grid (ARCHITECTURE.md "Where a change goes": a new op). A user's autograd Function is an op of its
own too (define_function): the identity of its traced forward, whose gradient is the user's backward."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flame.errors import ArgumentError, ArgumentTypeError, AutogradError, DTypeError, FlameError
from flame.ir.dtypes import dtype_of
from flame.ir.graph import Value
from flame.ir.ops._shapes import broadcast_shapes
from flame.ir.registry import REGISTRY, Attr, OpDef, check_dtype, register
from flame.ir.types import TensorType

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = {"out", "i", "n", "blockIdx", "threadIdx", "blockDim", "gridDim"}
MAX_THREADS = 1024  # threads per block on every CUDA GPU
MAX_BLOCKS = (1 << 31) - 1  # blocks of a 1-D grid


@dataclass(frozen=True, eq=False)
class UserCode:
    """The `user` trait of an op defined with the user's CUDA code. form "elementwise": `source` is a
    C++ expression over the inputs, named `params`, each of the inputs' compute type (float for
    f16/bf16/f32); codegen makes it a device function the elementwise kernels call. form "kernel":
    `source` is the body of a __global__ function whose parameters are the inputs (const pointers
    named `params`) and then `out`; `grid(*input types, out type) -> (blocks, threads)` is its launch
    (None: one thread per output element, 256 per block). `what` names the definition in errors
    ("flame.cuda.kernel 'scale_rows', defined at model.py:12")."""

    form: str
    name: str
    source: str
    params: tuple[str, ...]
    grid: Callable[..., Any] | None = None
    what: str = ""

    def launch(self, in_types: Sequence[TensorType], out_type: TensorType) -> tuple[int, int]:
        """(blocks, threads) of the raw kernel for these types, from the user's grid rule, checked."""
        if self.grid is None:
            return -(-out_type.numel // 256), 256
        try:
            got = self.grid(*in_types, out_type)
        except FlameError:
            raise
        except Exception as e:
            raise ArgumentError(f"{self.what}: its grid rule raised {type(e).__name__}: {e}") from e
        ok = (
            isinstance(got, (tuple, list))
            and len(got) == 2
            and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in got)
        )
        if not ok:
            raise ArgumentError(
                f"{self.what}: its grid rule must return (blocks, threads), two ints; it returned {got!r}"
            )
        blocks, threads = int(got[0]), int(got[1])
        if not (1 <= threads <= MAX_THREADS and 1 <= blocks <= MAX_BLOCKS):
            raise ArgumentError(
                f"{self.what}: its grid rule returned {blocks} blocks of {threads} threads; "
                f"expected 1 to {MAX_BLOCKS} blocks of 1 to {MAX_THREADS} threads"
            )
        return blocks, threads


def describe(kind: str, name: str, where: str | None) -> str:
    """How errors name a user definition: "flame.cuda.kernel 'scale_rows', defined at model.py:12"."""
    return f"flame.cuda.{kind} {name!r}" + (f", defined at {where}" if where else "")


def op_name(name: str) -> str:
    """The registry name of a new user op called `name`: user_<name>, or user_<name>_2, _3... when taken."""
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise ArgumentError(f"a user kernel's name must be a C identifier (letters, digits, _), got {name!r}")
    base = f"user_{name.lower()}"
    found, k = base, 1
    while found in REGISTRY:
        k += 1
        found = f"{base}_{k}"
    return found


def check_params(what: str, params: Sequence[str]) -> tuple[str, ...]:
    """The inputs' names as the CUDA code sees them: C identifiers, distinct, none of flame's own."""
    params = tuple(params)
    for p in params:
        if not isinstance(p, str) or not _IDENT.fullmatch(p) or p in _RESERVED or p.startswith("flame_"):
            raise ArgumentError(
                f"{what}: input name {p!r} cannot name a CUDA parameter (a C identifier, not "
                f"{', '.join(sorted(_RESERVED))} or flame_*)"
            )
    if len(set(params)) != len(params):
        raise ArgumentError(f"{what}: input names {list(params)} repeat a name")
    if not params:
        raise ArgumentError(f"{what}: a user kernel needs at least one input")
    return params


def _reference(what: str, ref: Callable) -> Callable:
    """The user's NumPy reference, checked to give exactly one array."""
    if ref is None:
        raise ArgumentError(
            f"{what}: reference= is required: a NumPy function of the input arrays giving the "
            f"output array (the reference executor runs it, and the tests compare with it)"
        )
    if not callable(ref):
        raise ArgumentError(
            f"{what}: reference= must be a NumPy function of the inputs (the reference "
            f"executor runs it), got {type(ref).__name__}"
        )

    def run(*arrays):
        got = ref(*arrays)
        if isinstance(got, (tuple, list)):
            raise FlameError(f"{what}: its reference returned {len(got)} values; a user kernel has exactly one output")
        if got is None:
            raise FlameError(f"{what}: its reference returned None; expected the output array")
        return got

    run.__doc__ = ref.__doc__
    return run


def _no_vjp(what: str) -> Callable:
    def vjp(b, g, *args):
        raise AutogradError(
            f"{what} has no gradient: it was defined without vjp=, and a gradient flows through it here"
        )

    return vjp


def _checked_vjp(what: str, fn: Callable, arity: int) -> Callable:
    """The gradient rule `fn(b, g, *inputs, out)`, checked to give one gradient (or None) per input, each
    of its input's shape or one that sums to it (a broadcast input)."""

    def vjp(b, g, *args):
        grads = fn(b, g, *args)
        if isinstance(grads, Value) or grads is None:
            grads = (grads,)
        if not isinstance(grads, (tuple, list)) or len(grads) != arity:
            n = len(grads) if isinstance(grads, (tuple, list)) else type(grads).__name__
            raise AutogradError(
                f"{what}: its vjp returned {n} gradients; expected {arity}, one per input "
                f"(None for an input without one)"
            )
        for k, (x, gx) in enumerate(zip(args, grads)):
            if gx is None:
                continue
            try:
                fits = np.broadcast_shapes(x.shape, gx.shape) == gx.shape
            except ValueError:
                fits = False
            if not fits:
                raise AutogradError(f"{what}: its vjp gave input {k} ({x.type}) a gradient of shape {gx.shape}")
        return tuple(grads)

    return vjp


def _gradient(what: str, vjp: Callable | None, arity: int) -> Callable:
    return _no_vjp(what) if vjp is None else _checked_vjp(what, vjp, arity)


def _elementwise_infer(what: str):
    def infer(types):
        first = types[0].dtype
        for t in types:
            check_dtype(what, t, ("float", "int"))
            if t.dtype != first:
                raise DTypeError(
                    f"{what}: inputs {', '.join(str(x) for x in types)} differ in dtype; it takes "
                    f"one dtype (cast one first)"
                )
        return TensorType(broadcast_shapes(what, types), first)

    return infer


def define_elementwise(
    name: str, expr: str, params: Sequence[str], reference: Callable, vjp: Callable | None, where: str | None
) -> OpDef:
    """Register an elementwise op computing the C++ expression `expr` over inputs named `params` (NumPy
    broadcasting; one dtype in and out). vjp(b, g, *inputs, out) -> one gradient Value per input."""
    what = describe("elementwise", name, where)
    _check_source(what, expr, "expression")
    full = op_name(name)
    code = UserCode("elementwise", name, expr, check_params(what, params), what=what)
    return register(
        OpDef(
            full,
            "elementwise",
            len(code.params),
            _elementwise_infer(full),
            _reference(what, reference),
            vjp=_gradient(what, vjp, len(code.params)),
            compute_f32=True,
            doc=what,
            user=code,
        )
    )


def _as_type(what: str, got: Any) -> TensorType:
    """The user's output spec as a TensorType: a TensorType, or (shape, dtype)."""
    if isinstance(got, TensorType):
        return got
    pair = isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[0], (tuple, list))
    if pair and not isinstance(got[1], (tuple, list, TensorType)):
        try:
            return TensorType(tuple(int(s) for s in got[0]), dtype_of(got[1]))
        except (TypeError, ValueError, DTypeError) as e:
            raise ArgumentError(f"{what}: out= gave {got!r}, not a (shape, dtype) ({e})") from None
    if isinstance(got, (tuple, list)):
        raise ArgumentError(
            f"{what}: out= gave {len(got)} outputs; a user kernel writes exactly one (its "
            f"`out`): give one TensorType or (shape, dtype)"
        )
    raise ArgumentTypeError(f"{what}: out= gave {type(got).__name__}; expected a TensorType or (shape, dtype)")


def _kernel_infer(what: str, out: Any):
    if out is not None and not callable(out):
        fixed = _as_type(what, out)

    def infer(types):
        if out is None:
            return types[0]
        if not callable(out):
            return fixed
        try:
            got = out(*types)
        except FlameError:
            raise
        except Exception as e:
            raise ArgumentError(f"{what}: its out= rule raised {type(e).__name__}: {e}") from e
        return _as_type(what, got)

    return infer


def define_kernel(
    name: str,
    source: str,
    params: Sequence[str],
    out: Any,
    reference: Callable,
    vjp: Callable | None,
    grid: Callable | None,
    where: str | None,
) -> OpDef:
    """Register an opaque op launching the user's __global__ body `source` over inputs named `params`.
    out: the output type (a TensorType or (shape, dtype)), or a function of the input types giving
    it, or None (the first input's type); grid(*input types, out type) -> (blocks, threads)."""
    what = describe("kernel", name, where)
    _check_source(what, source, "kernel body")
    if grid is not None and not callable(grid):
        raise ArgumentError(
            f"{what}: grid= must be a function (*input types, out type) -> (blocks, threads), got {type(grid).__name__}"
        )
    full = op_name(name)
    code = UserCode("kernel", name, source, check_params(what, params), grid, what)
    return register(
        OpDef(
            full,
            "opaque",
            len(code.params),
            _kernel_infer(what, out),
            _reference(what, reference),
            vjp=_gradient(what, vjp, len(code.params)),
            doc=what,
            user=code,
        )
    )


def _last_type(types, **attrs):
    return types[-1]


def _last(*arrays, **attrs):
    return np.copy(arrays[-1])


def define_function(name: str, vjp: Callable, where: str | None) -> OpDef:
    """Register the op of a user's autograd Function (flame.autograd.Function, flame.custom_vjp), one per
    definition: `op(*tensor inputs, *saved tensors, result, call=N, index=K)` is `result` (the forward,
    traced before it from flame ops), and its gradient is the user's backward: vjp(b, {index: cotangent},
    *inputs, out, call=N, index=K) (the `call_result` trait)."""
    return register(
        OpDef(
            op_name(name),
            "elementwise",
            -1,
            _last_type,
            _last,
            attrs={"call": Attr("int"), "index": Attr("int")},
            vjp=vjp,
            doc=f"the autograd Function {name!r}" + (f", defined at {where}" if where else ""),
            call_result=True,
            autocast="keep",  # the identity of the forward's result: autocast never casts it (as in PyTorch)
        )
    )


def _check_source(what: str, source: Any, kind: str) -> None:
    if not isinstance(source, str) or not source.strip():
        raise ArgumentError(f"{what}: the CUDA {kind} must be a non-empty string, got {source!r}")


__all__ = ["UserCode", "define_elementwise", "define_function", "define_kernel", "describe", "op_name"]
