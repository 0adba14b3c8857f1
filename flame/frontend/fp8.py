"""The FP8 linear: what flame.nn.functional.linear runs inside an FP8 autocast region
(`flame.autocast(dtype=flame.float8_e4m3fn)` or a `Float8Recipe`, frontend/autocast.py).

    x8 = scaled_cast(x, sx, e4m3)            w8 = scaled_cast(w, sw, e4m3)       (x [m, k], w [n, k])
    y  = fp8_matmul(x8, w8, 1/sx, 1/sw) -> bf16  (+ bias in bf16)
  backward, from the cotangent g [m, n] (bf16), its scale sg from amax(g) (current scaling):
    g8 = scaled_cast(g, sg, e5m2)
    dx = fp8_matmul(g8,   w8^T, 1/sg, 1/sw) -> x's dtype
    dw = fp8_matmul(g8^T, x8^T, 1/sg, 1/sx) -> w's dtype

All of it is IR (ir/ops/fp8.py): the casts are elementwise ops that fuse into the kernels producing
their inputs, the amaxes are ordinary reductions that fuse with their producers, and each fp8_matmul
is one cuBLASLt FP8 call (the reference executor emulates it exactly). The GEMM operands are always
"a [m, k] times b [n, k]", cuBLASLt's only FP8 form, which is why the backward takes transposed
copies: of the FP8 casts (a cast commutes with a transpose, bit for bit), so each is a tiled transpose
of 1-byte data rather than a cast reading its 2- or 4-byte input transposed (which ran at 14 % of the
copy bandwidth on an H100, benchmarks/results/2026-12-05-H100-fp8/), and the backward keeps x8
rather than x. The gradient flows
straight through the rounding (the derivative of the cast is taken as the identity, as
TransformerEngine and torchao do): one autograd Function (flame.autograd.Function) holds the forward
and emits the two gradient GEMMs itself. f32 master weights stay f32 (w is cast from f32 straight to
e4m3, and its gradient comes out of the GEMM in f32); the input and the bias are taken as autocast bf16
would (f32 data cast once, to FP8).

Scales (Float8Recipe): "current" computes sx, sw and sg from this step's amax of x, w and g;
"delayed" reads all three from device state kept per weight (`float8_state(weight)`: for the input, the
weight and the gradient an amax history [amax_history_len] and a scale []) and updates that state in
the same step, so no cast waits for its tensor's own amax and each fuses into the kernel making the
tensor. Within one compiled step a state is updated once: Linears reading the same input tensor (a
block's q, k and v projections; SwiGLU's gate and up) share one input state and one cast, and a role
met twice (a weight used twice) records the larger amax."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flame._identity import ByIdentity
from flame.errors import ArgumentError
from flame.frontend.autocast import Float8Recipe
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.custom_function import Function
from flame.frontend.dispatch import apply
from flame.frontend.hooks import forget
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import cat
from flame.ir.dtypes import DType, bf16, f8e4m3, f8e5m2, f16, f32, fp8_max
from flame.ir.ops.fp8 import SCALE_EPS

FLOAT_INPUTS = (f32, bf16, f16)  # f64 is never cast (autocast's rule)


@dataclass
class Float8Meta:
    """The delayed-scaling state of one tensor role: amax_history [L] (newest first) and scale [] (f32
    device tensors, role `state`)."""

    amax_history: Tensor
    scale: Tensor


@dataclass
class Float8State:
    """The delayed-scaling state of one weight: its input's, its own and its output gradient's
    (`Float8Meta`; Linears of one step reading the same input share its `input`). `probe` is an f32 [1]
    leaf the FP8 linear's backward gives the gradient's amax as its gradient; a hook on it records that
    amax into `grad` once the backward has made it (a weight used twice in one backward records the
    sum of its gradients' amaxes, a bound of each; several backwards of one compiled step, the
    largest)."""

    input: Float8Meta
    weight: Float8Meta
    grad: Float8Meta
    probe: Tensor
    recipe: Float8Recipe


_STATES = ByIdentity()  # weight -> its Float8State (an entry leaves with its weight)


def float8_state(weight: Tensor) -> Float8State | None:
    """The delayed-scaling state of `weight` (None before its first step under a delayed recipe)."""
    return _STATES.get(weight)


def _state_tensor(values: np.ndarray) -> Tensor:
    t = Tensor(values)
    t._role = "state"
    return t


def _meta(length: int) -> Float8Meta:
    return Float8Meta(_state_tensor(np.zeros(length, np.float32)), _state_tensor(np.ones((), np.float32)))


def _record_gradient(st: Float8State):
    """The hook on st.probe: the gradient's amax, accumulated into probe.grad by the backward, goes into
    st.grad's history; probe.grad is cleared for the next step."""

    def hook(probe: Tensor) -> None:
        a = probe.grad.reshape(())
        probe.grad = None
        with no_grad():
            _record(st.grad, a, lambda: a, st.recipe, f8e5m2)  # backwards of one step: their largest amax

    return hook


def _state_of(weight: Tensor, recipe: Float8Recipe) -> Float8State:
    st = float8_state(weight)
    if st is None or st.input.amax_history.shape[0] != recipe.amax_history_len:
        if weight._trace is not None or weight._value is not None:
            raise ArgumentError(
                "Float8Recipe(scaling='delayed'): the weight of a Linear must be a parameter (a "
                "concrete tensor) to keep its scaling state; this one is computed in the step"
                f"\n  at {user_location()}"
            )
        probe = Tensor(np.zeros(1, np.float32))
        probe._requires_grad, probe._role = True, "state"  # made with the state, not a write of the step
        st = Float8State(*(_meta(recipe.amax_history_len) for _ in range(3)), probe, recipe)
        # the state's own hook, made by the step that first uses it: not one of the user's hooks a
        # compiled step guards on (which would trace that step again at its next call)
        forget(probe.register_post_accumulate_grad_hook(_record_gradient(st)).id)
        _STATES[weight] = st
    st.recipe = recipe
    return st


def amax(x: Tensor) -> Tensor:
    """max |x| over every element, as an f32 scalar (the reduction fuses with x's producer)."""
    m = x.abs().amax()
    return m if m.dtype == f32 else m.float()


def scale_from_amax(a: Tensor, dtype: DType, margin: int = 0) -> Tensor:
    """fp8_max(dtype) / max(a, SCALE_EPS) / 2**margin (an all-zero tensor gets a large finite scale)."""
    return (fp8_max(dtype) / 2.0**margin) / a.clamp(min=SCALE_EPS)


# trace -> what its step has done to delayed-scaling state so far: `metas`, id(meta) -> (meta, the tensor it
# recorded, the scale the step casts with); `inputs`, id(input tensor) -> (tensor, its meta), the state
# Linears reading that tensor share
_STEPS = ByIdentity()


def _step_record() -> dict | None:
    """This trace's record of delayed-scaling updates (None outside @flame.compile: an eager call is a
    step of its own)."""
    trace = current_trace.get()
    if trace is None:
        return None
    got = _STEPS.get(trace)
    if got is None:
        got = _STEPS[trace] = {"metas": {}, "inputs": {}}
    return got


def _record(meta: Float8Meta, key: Tensor, amax_of, recipe: Float8Recipe, dtype: DType) -> Tensor:
    """The stored scale (what this step casts with), after which meta takes this step's amax
    (`amax_of()`, of the tensor `key`): the history shifts by one (newest first) and the scale becomes
    fp8_max(dtype) / max(history). A meta already updated in this step from the same tensor gives the
    scale it gave then; from another (a weight used twice), the newest entry becomes the larger amax."""
    step = _step_record()
    seen = None if step is None else step["metas"].get(id(meta))
    if seen is not None and seen[1] is key:
        return seen[2]
    newest = amax_of().reshape(1)
    if seen is not None:
        newest, rest, used = newest.maximum(meta.amax_history[:1]), meta.amax_history[1:], seen[2]
    else:
        rest, used = meta.amax_history[:-1], meta.scale * 1.0  # the value before the update below
    hist = cat([newest, rest]) if recipe.amax_history_len > 1 else newest
    meta.amax_history.copy_(hist)
    meta.scale.copy_(scale_from_amax(hist.amax(), dtype, recipe.margin))
    if step is not None:
        step["metas"][id(meta)] = (meta, key, used)
    return used


def _shared_input(st: Float8State, x: Tensor) -> None:
    """Point st.input at the input state of an earlier Linear of this step that read the same tensor x
    (or make st.input the one later readers of x share)."""
    step = _step_record()
    if step is None:
        return
    got = step["inputs"].get(id(x))
    if got is not None and got[0] is x:
        st.input = got[1]
    else:
        step["inputs"][id(x)] = (x, st.input)


def _scales(x: Tensor, x2: Tensor, w: Tensor, recipe: Float8Recipe) -> tuple[Tensor, Tensor, tuple]:
    """sx, sw, and for delayed scaling (sg, probe): the gradient's stored scale and the state's probe
    (empty for current scaling); x is the Linear's input as given (what readers of the same input
    share), x2 its [m, k] view."""
    if recipe.scaling == "current":
        with no_grad():
            return (scale_from_amax(amax(x2), f8e4m3, recipe.margin),
                    scale_from_amax(amax(w), f8e4m3, recipe.margin), ())
    st = _state_of(w, recipe)
    _shared_input(st, x)
    with no_grad():
        sx = _record(st.input, x, lambda: amax(x2), recipe, f8e4m3)
        sw = _record(st.weight, w, lambda: amax(w), recipe, f8e4m3)
        return sx, sw, (st.grad.scale * 1.0, st.probe)


def _cast(x: Tensor, scale: Tensor, dtype: DType) -> Tensor:
    return apply("scaled_cast", x, scale, dtype=dtype)


def _gemm(a8: Tensor, b8: Tensor, a_inv: Tensor, b_inv: Tensor, out: DType) -> Tensor:
    return apply("fp8_matmul", a8, b8, a_inv, b_inv, out_dtype=out)


class _Float8Linear(Function):
    """y = x @ w^T with the GEMMs in FP8 (module doc); x [m, k], w [n, k]; sx, sw: their f32 scales;
    under delayed scaling also sg, the gradient's stored scale, and probe, which gets the gradient's
    amax as its gradient."""

    @staticmethod
    def forward(ctx, x, w, sx, sw, sg=None, probe=None):
        x8, w8 = _cast(x, sx, f8e4m3), _cast(w, sw, f8e4m3)
        ctx.save_for_backward(x8, w8, sx, sw, sg)
        ctx.dtypes = x.dtype, w.dtype
        return _gemm(x8, w8, sx.reciprocal(), sw.reciprocal(), bf16)

    @staticmethod
    def backward(ctx, g):
        # the transposed operands are the FP8 casts transposed (a cast commutes with a transpose, bit for
        # bit): a transpose of 1-byte data, tiled, instead of a cast reading its bf16/f32 input transposed
        x8, w8, sx, sw, sg = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        stored = sg is not None
        if not stored:
            sg = scale_from_amax(amax(g), f8e5m2)
        g_inv = sg.reciprocal()
        g8 = _cast(g, sg, f8e5m2)
        dx = _gemm(g8, w8.T, g_inv, sw.reciprocal(), x_dtype)
        dw = _gemm(g8.T, x8.T, g_inv, sx.reciprocal(), w_dtype)
        return dx, dw, None, None, None, amax(g).reshape(1) if stored else None


def eligible(x: Tensor, weight: Tensor) -> bool:
    """Whether linear(x, weight) runs in FP8 in an FP8 region: floating inputs f32/bf16/f16, a 2-D
    weight and an input of rank 1 or more (f64 stays f64, as autocast never casts it)."""
    return x.dtype in FLOAT_INPUTS and weight.dtype in FLOAT_INPUTS and weight.ndim == 2 and x.ndim >= 1


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, recipe: Float8Recipe) -> Tensor:
    """x @ weight.T + bias with the GEMMs in FP8 as `recipe` says (module doc); the result is bf16."""
    k = weight.shape[-1]
    x2 = x.reshape(-1, k)
    sx, sw, grad_state = _scales(x, x2, weight, recipe)
    y = _Float8Linear.apply(x2, weight, sx, sw, *grad_state).reshape(*x.shape[:-1], weight.shape[0])
    return y + bias.to(bf16) if bias is not None else y
