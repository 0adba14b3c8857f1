"""Automatic mixed precision: `with flame.autocast(dtype=flame.bf16):` (PyTorch's torch.autocast).

Inside the region every op picks its dtype exactly as PyTorch's autocast for the region's device_type
does, by a policy declared once per op: primitive ops carry it as the `autocast` (CUDA) and
`autocast_cpu` traits of their OpDef, and the composites (flame.nn.functional, the Tensor methods)
declare theirs with `@policy(cuda_policy, cpu=cpu_policy)` beside their definition (cpu omitted: the
same on both). A region of device_type "cpu" (or "reference", flame's CPU executor) follows torch's
CPU lists, one of "cuda" its CUDA lists. The CUDA policies are torch's three CUDA lists and the rest:
- "lower" (torch's "CUDA Ops that can autocast to float16"): run in the autocast dtype (matmul,
  linear, the convolutions, attention): f32/f16/bf16 inputs are cast to it;
- "f32" ("CUDA Ops that can autocast to float32"): run in f32 (exp, log, pow, rsqrt, sum, prod,
  cumsum, softmax, log_softmax, logsumexp, the norms and the losses): f16/bf16 inputs are cast to f32;
- "promote" ("CUDA Ops that promote to the widest input type": dot, addcmul, index_put, ...): the
  floating inputs are cast to float32 where one is, else kept in the autocast dtype; as torch's, an input
  of the other low dtype met (in argument order) before any float32 one is an error;
- "" (none of the lists: mean, max, relu, gelu, add, var, batch_norm, ...): the op runs in its
  inputs' dtype, as outside a region (several floating dtypes: type promotion, the widest).
torch's CPU lists are shorter: "lower" holds the GEMMs, convolutions, prelu and attention (not addmv, addr
or the recurrent cells), "f32" the losses, prod, cdist, trace, the 3-d pools, the reflection / replication
pads, grid_sample and the linear algebra (not the elementwise math, softmax, sum, cumsum or the norms),
"promote" only cat, stack and index_copy.
f64 inputs are never cast. As in PyTorch, a composite runs its body with autocast off: its policy
alone decides, so a var of bf16 is bf16 although flame computes it through a sum. Every cast is
an ordinary `cast` op, so the IR shows it, autodiff casts the gradient back (a gradient has its
input's dtype: f32 master weights get f32 gradients) and fusion folds it into a neighbour kernel.
Works eagerly and inside @flame.compile (the trace records the casts; the autocast state is part of
the compiled function's cache key). The state is a ContextVar: threads never see each other's.

FP8 training: `flame.autocast(dtype=flame.float8_e4m3fn)` or `flame.autocast(dtype=Float8Recipe(...))`
runs every Linear (flame.nn.functional.linear, nn.Linear) as FP8 GEMMs (frontend/fp8.py: e4m3 forward,
e5m2 gradients, per-tensor scales as the recipe says) and everything else as autocast bf16 does."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from flame.errors import ArgumentError, DTypeError
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import DType, bf16, dtype_of, f8e4m3, f16, f32, f64, promote

LOW = (f16, bf16)
DEVICE_TYPES = {"cuda": f16, "cpu": bf16, "reference": bf16}  # PyTorch's default dtype per device type


SCALINGS = ("current", "delayed")


@dataclass(frozen=True)
class Float8Recipe:
    """How `flame.autocast(dtype=Float8Recipe(...))` trains in FP8 (TransformerEngine's hybrid format:
    the Linear GEMMs' inputs and weights in e4m3, their gradients in e5m2, each tensor with one f32
    scale; f32 master weights stay f32; every other op runs as under autocast bf16).
    scaling="current": each tensor's scale comes from its own amax in the same step (torchao's dynamic
    scaling). scaling="delayed": a Linear's input, weight and output
    gradient each use a scale kept as device state beside an amax history of amax_history_len steps
    (TransformerEngine's DelayedScaling): the step casts with the stored scale, then pushes this step's
    amax into the history and stores fp8_max / max(history), so no cast waits for its own tensor's amax;
    the state is created at a weight's first FP8 step, carried by a compiled step like optimizer state
    and updated inside it (Linears of a compiled step reading the same input share its state and its
    cast). Every scale is fp8_max / max(amax, 1e-12) / 2**margin."""

    scaling: str = "current"
    amax_history_len: int = 16
    margin: int = 0

    def __post_init__(self):
        if self.scaling not in SCALINGS:
            raise ArgumentError(f"Float8Recipe: scaling must be one of {', '.join(SCALINGS)}, got {self.scaling!r}")
        if not isinstance(self.amax_history_len, int) or self.amax_history_len < 1:
            raise ArgumentError(f"Float8Recipe: amax_history_len must be a positive int, got {self.amax_history_len!r}")
        if not isinstance(self.margin, int) or self.margin < 0:
            raise ArgumentError(f"Float8Recipe: margin must be a non-negative int, got {self.margin!r}")


CPU_LISTS = ("cpu", "reference")  # device types whose regions follow torch's CPU op lists


@dataclass(frozen=True)
class AutocastState:
    """Whether autocast is on, its low-precision dtype, the FP8 recipe of an FP8 region, and whether the
    region follows torch's CPU op lists (device_type "cpu" or "reference") rather than its CUDA ones."""

    enabled: bool = False
    dtype: DType = f16
    fp8: Float8Recipe | None = None
    cpu_lists: bool = False


_OFF = AutocastState()
_state: ContextVar[AutocastState] = ContextVar("flame_autocast", default=_OFF)  # noqa: B039 (frozen)


def _device_type(device_type: str, fn: str) -> str:
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"{fn}: unsupported device_type {device_type!r}; expected one of {', '.join(DEVICE_TYPES)}")
    return device_type


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """True inside an enabled `flame.autocast` region (torch.is_autocast_enabled). One region covers the
    device flame runs on, so every device_type gives the same answer."""
    if device_type is not None:
        _device_type(device_type, "is_autocast_enabled")
    return _state.get().enabled


def cpu_lists() -> bool:
    """True inside an enabled region that follows torch's CPU op lists (device_type "cpu" or "reference")."""
    st = _state.get()
    return st.enabled and st.cpu_lists


def get_autocast_dtype(device_type: str | None = None) -> DType:
    """The dtype "lower" ops run in inside the current region (torch.get_autocast_dtype(device_type)): the
    innermost region's, enabled or not, else device_type's default (float16 for cuda, bfloat16 for cpu)."""
    st = _state.get()
    if st is not _OFF:
        return st.dtype
    return DEVICE_TYPES[_device_type("cuda" if device_type is None else device_type, "get_autocast_dtype")]


def get_autocast_gpu_dtype() -> DType:
    """get_autocast_dtype("cuda"), under torch's deprecated name (with its DeprecationWarning)."""
    warnings.warn("flame.get_autocast_gpu_dtype() is deprecated. Please use flame.get_autocast_dtype('cuda') "
                  "instead.", DeprecationWarning, stacklevel=2)
    return get_autocast_dtype("cuda")


def get_fp8_recipe() -> Float8Recipe | None:
    """The FP8 recipe of the current region (None outside an enabled FP8 region)."""
    st = _state.get()
    return st.fp8 if st.enabled else None


def cache_key() -> tuple:
    """The part of a compiled function's cache key that autocast decides: () when off."""
    st = _state.get()
    if not st.enabled:
        return ()
    lists = "cpu" if st.cpu_lists else "cuda"
    return ("autocast", st.dtype.name, lists) + ((repr(st.fp8),) if st.fp8 is not None else ())


class autocast:  # noqa: N801 - PyTorch's name
    """`with flame.autocast(dtype=flame.bf16):` or `flame.autocast("cuda", dtype=flame.float16)`, also
    as a decorator. device_type ("cuda", "cpu" or "reference") picks the default dtype, as in PyTorch
    (float16 for cuda, bfloat16 for cpu), and the op lists: torch's CUDA lists for "cuda", its CPU lists
    for "cpu" and "reference" (module doc); flame runs on the current device either way.
    dtype=flame.float8_e4m3fn (the default Float8Recipe) or a Float8Recipe trains in FP8 (module doc).
    As torch's, "cuda" takes any floating dtype as the one "lower" ops run in (float32 included), while "cpu"
    and "reference" take bfloat16 / float16 only: another dtype warns and leaves the region disabled.
    enabled=False turns autocast off inside an enclosing region. cache_enabled is accepted and ignored
    (inside @flame.compile common-subexpression elimination casts each weight once)."""

    def __init__(self, device_type: str | DType = "cuda", dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None):
        if not isinstance(device_type, str) or device_type in ("bf16", "f16", "float16", "bfloat16"):
            dtype, device_type = device_type, "cuda"  # flame.autocast(flame.bf16)
        if device_type not in DEVICE_TYPES:
            raise ValueError(f"autocast: unsupported device_type {device_type!r}; expected one of "
                             f"{', '.join(DEVICE_TYPES)}")
        self.fp8 = dtype if isinstance(dtype, Float8Recipe) else None
        if self.fp8 is None and dtype is not None and dtype_of(dtype) == f8e4m3:
            self.fp8 = Float8Recipe()
        dt = bf16 if self.fp8 else DEVICE_TYPES[device_type] if dtype is None else dtype_of(dtype)
        if not dt.is_float:
            raise DTypeError(f"autocast: dtype must be a floating dtype (float16 or bfloat16; float8_e4m3fn or a "
                             f"Float8Recipe: FP8 training), got {dt}")
        if enabled and dt not in LOW and device_type != "cuda":
            # torch's CUDA autocast runs "lower" ops in any fast dtype (float32 too); its CPU autocast warns
            # and turns itself off for a dtype other than bfloat16 / float16
            name = device_type.upper()
            warnings.warn(f"In {name} autocast, but the target dtype is not supported. Disabling autocast.\n"
                          f"{name} Autocast only supports dtypes of flame.bfloat16, flame.float16 currently.",
                          stacklevel=2)
            enabled = False
        self.device_type, self.fast_dtype, self.enabled = device_type, dt, bool(enabled)
        self._tokens: list = []

    def __enter__(self) -> autocast:
        state = AutocastState(self.enabled, self.fast_dtype, self.fp8, self.device_type in CPU_LISTS)
        self._tokens.append(_state.set(state))
        return self

    def __exit__(self, *exc) -> None:
        _state.reset(self._tokens.pop())

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with autocast(self.device_type, self.fp8 or self.fast_dtype, self.enabled):
                return fn(*args, **kwargs)

        return wrapped


def _widest(low: DType, dtypes: list[DType]) -> DType:
    """torch's autocast promote_type: from the region's dtype, each input in order (f64 already left out)
    makes it float32 if either is float32 and keeps it where both are the region's dtype; any other pair
    (the other low dtype met before a float32) is torch's RuntimeError."""
    to = low
    for d in dtypes:
        if to == f32 or d == f32:
            to = f32
        elif not to == d == low:
            raise DTypeError(f"Unexpected floating ScalarType in autocast's promote (an input of {d} in a region of "
                             f"{low}): torch's autocast promotes float32 and {low} inputs only")
    return to


def _target(policy: str, dtypes: list[DType]) -> DType | None:
    """The dtype `policy` casts floating inputs of these dtypes (in argument order) to, or None (nothing to
    do; "": an op on none of torch's lists runs on its inputs as they are, as outside a region)."""
    if policy in ("keep", ""):
        return None
    if policy == "lower":
        return _state.get().dtype
    if policy == "f32":
        return f32 if any(d in LOW for d in dtypes) else None
    if policy == "widest":  # flame's own glue (straight_through): operands that must agree, in the widest
        kinds = set(dtypes)
        return functools.reduce(promote, kinds) if len(kinds) > 1 else None
    return _widest(_state.get().dtype, dtypes)


def _eligible(policy: str, dt: DType) -> bool:
    if not dt.is_float or dt == f64:
        return False
    return policy != "f32" or dt in LOW


def _tensors(inputs: tuple):
    """The tensors of `inputs` in argument order, a list or tuple argument's (cat's, stack's) in its place."""
    for x in inputs:
        if isinstance(x, (list, tuple)):
            yield from (t for t in x if isinstance(t, Tensor))
        elif isinstance(x, Tensor):
            yield x


def cast_inputs(policy: str, inputs: tuple, cpu: str | None = None) -> tuple:
    """`inputs` with their floating-point tensors (those in a list or tuple argument too, as torch's autocast
    casts a TensorList) cast as `policy` (torch's CUDA list of the op) says inside an enabled region, or as
    `cpu` (its CPU list; None: the same) inside a region following the CPU lists (see the module
    docstring); other values and everything outside a region pass through."""
    st = _state.get()
    if not st.enabled:
        return inputs
    if st.cpu_lists and cpu is not None:
        policy = cpu
    dtypes = [x.dtype for x in _tensors(inputs) if _eligible(policy, x.dtype)]
    target = _target(policy, dtypes) if dtypes else None
    if target is None:
        return inputs

    def cast(x):
        if isinstance(x, (list, tuple)) and any(isinstance(t, Tensor) for t in x):
            return type(x)(cast(t) for t in x)
        return x.to(target) if isinstance(x, Tensor) and _eligible(policy, x.dtype) else x

    return tuple(cast(x) for x in inputs)


POLICIES = ("lower", "f32", "promote", "")  # what a composite may declare (OpDef traits add "keep")


def policy(kind: str, cpu: str | None = None) -> Callable[[Callable], Callable]:
    """Decorator declaring a composite function's autocast policy ("lower", "f32", "promote" or ""
    for none of torch's lists; module docstring): `kind` on torch's CUDA lists, `cpu` on its CPU lists
    (None: the same). Inside a region its tensor arguments are cast at entry as PyTorch's autocast casts
    the op of that name (not when it is given an explicit dtype=; "" casts nothing: the body promotes as
    it does outside a region), and its body runs with autocast off (as torch's autocast runs an op's
    kernel), so the ops it is made of cast nothing more."""
    for k in (kind, cpu):
        if k is not None and k not in POLICIES:
            raise ValueError(f"autocast.policy: unknown policy {k!r}; expected one of {POLICIES}")

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            st = _state.get()
            if not st.enabled:
                return fn(*args, **kwargs)
            now = cpu if st.cpu_lists and cpu is not None else kind
            if now and kwargs.get("dtype") is None:  # PyTorch: an op given an explicit dtype= is not cast
                names = list(kwargs)
                cast = cast_inputs(now, (*args, *(kwargs[n] for n in names)))  # one promote over all of them
                args, kwargs = cast[:len(args)], dict(zip(names, cast[len(args):]))
            token = _state.set(dataclasses.replace(st, enabled=False))
            try:
                return fn(*args, **kwargs)
            finally:
                _state.reset(token)

        run.autocast, run.autocast_cpu = kind, kind if cpu is None else cpu
        return run

    return wrap
