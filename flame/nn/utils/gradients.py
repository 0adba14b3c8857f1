"""Gradient tools: the total norm of tensors, clipping by norm or value, seeded gradient noise,
per-parameter gradient statistics. All of them work eagerly and inside @flame.compile (they update
`.grad` with copy_, which a trace records as a rebinding)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable

from flame.errors import ArgumentRangeError, ArgumentTypeError, NonFiniteError, TraceError
from flame.frontend.context import no_grad, user_location
from flame.frontend.creation import Generator, randn
from flame.frontend.ops import stack, vector_norm
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import bf16, f16, f32, promote

__all__ = ["add_grad_noise_", "clip_grad_norm", "clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_",
           "get_total_norm", "grad_stats"]


def _grads(params: Tensor | Iterable[Tensor]) -> list[Tensor]:
    params = [params] if isinstance(params, Tensor) else list(params)
    return [p.grad for p in params if p.grad is not None]


def get_total_norm(tensors: Tensor | Iterable[Tensor], norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach: bool | None = None) -> Tensor:
    """The norm of order norm_type of the tensors taken as one vector, as torch's: the norm of the stacked
    per-tensor norms (any order vector_norm takes: inf, -inf, 0 counts the non-zero elements, negative
    and fractional orders), in the tensors' promoted dtype; a 0-d f32 zero for no tensors.
    error_if_nonfinite raises for a NaN or infinite norm (eagerly; see clip_grad_norm_). foreach is
    accepted and changes nothing."""
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    for i, t in enumerate(tensors):
        if t is None:  # torch's foreach norm refuses an undefined tensor
            raise ArgumentRangeError(f"Tensors of the first list of nested Tensor lists are supposed to be defined but "
                                     f"the {i}-th Tensor is not.\n  at {user_location()}")
    if not tensors:
        return Tensor(0.0)
    dt = tensors[0].dtype
    for t in tensors[1:]:
        dt = promote(dt, t.dtype)
    norms = [vector_norm(t, norm_type).to(dt) for t in tensors]
    total = vector_norm(stack(norms), norm_type)
    if error_if_nonfinite:
        _check_finite(total, norm_type)
    return total


def clip_grads_with_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, total_norm: Tensor,
                          foreach: bool | None = None) -> None:
    """Scale every gradient by min(1, max_norm / (total_norm + 1e-6)), as torch's (total_norm: what
    get_total_norm returned). foreach is accepted and changes nothing."""
    grads = _grads(parameters)
    if not grads:
        return
    if not isinstance(total_norm, Tensor):  # torch's clamp of a Python number fails with a TypeError
        raise ArgumentTypeError(f"clip_grads_with_norm_: total_norm must be a Tensor (what get_total_norm returns), "
                                f"got {type(total_norm).__name__}\n  at {user_location()}")
    with no_grad():
        # torch's max_norm / (total_norm + 1e-6) is Tensor.__rtruediv__: the reciprocal rounded, then the product
        coef = ((total_norm + 1e-6).reciprocal() * float(max_norm)).clamp(max=1.0)
        for g in grads:
            g.copy_(_times(g, coef))


def _times(g: Tensor, coef: Tensor) -> Tensor:
    """g * coef as torch's mul_ by a 0-d tensor: coef in g's dtype, except that an f16 / bf16 g is
    multiplied in f32 by coef's f32 value and rounded once (torch's CPU kernel reads the 0-d operand's
    original value for half types; coef in g's dtype would round it first, off by an ulp of g)."""
    if g.dtype in (f16, bf16):
        return (g.to(f32) * coef.to(f32)).to(g.dtype)
    return g * coef.to(g.dtype)


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale all gradients together so their joint norm is at most max_norm (as torch does: by
    min(1, max_norm / (norm + 1e-6))). Returns the norm before clipping as a 0-d Tensor (get_total_norm's);
    no host synchronisation, so it works inside @flame.compile. error_if_nonfinite=True raises, as torch's,
    when the norm is NaN or infinite (eagerly: a compiled step cannot read the norm while it is traced,
    so there it raises a TraceError saying to check the returned norm after the call); foreach is
    accepted and changes nothing. Parameters without a gradient are left out."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    with no_grad():  # without gradients too: norm_type is checked and a 0-d zero returned, as torch's
        total = get_total_norm(_grads(params), norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(params, max_norm, total, foreach)
    return total


def clip_grad_norm(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """clip_grad_norm_ under its older name, which torch keeps with a FutureWarning."""
    warnings.warn("`flame.nn.utils.clip_grad_norm` is now deprecated in favor of `flame.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def _check_finite(total: Tensor, norm_type: float) -> None:
    if total.is_traced:
        raise TraceError(f"clip_grad_norm_(error_if_nonfinite=True) reads the norm's value, which a step being "
                         f"traced does not know; inside @flame.compile return the norm clip_grad_norm_ returns "
                         f"and check it after the call (the gradients are then scaled by a non-finite norm, as "
                         f"with error_if_nonfinite=False)\n  at {user_location()}")
    if not math.isfinite(total.item()):
        raise NonFiniteError(f"The total norm of order {float(norm_type)} for gradients from `parameters` is "
                             f"non-finite, so it cannot be clipped. To disable this error and scale the gradients by "
                             f"the non-finite norm anyway, set `error_if_nonfinite=False`\n  at {user_location()}")


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every gradient element into [-clip_value, clip_value]; foreach is accepted and changes nothing."""
    with no_grad():
        for g in _grads(parameters):
            g.copy_(g.clamp(-float(clip_value), float(clip_value)))


def add_grad_noise_(parameters: Tensor | Iterable[Tensor], std: float, generator: Generator | None = None) -> None:
    """Add N(0, std^2) noise to every gradient, drawn from `generator` (seeded: reproducible; inside
    @flame.compile its seed and offset are state, so each replayed step draws fresh noise)."""
    with no_grad():
        for g in _grads(parameters):
            g.copy_(g + randn(*g.shape, dtype=g.dtype, generator=generator) * float(std))


def grad_stats(named_parameters: Iterable[tuple[str, Tensor]]) -> dict[str, dict[str, float | Tensor]]:
    """name -> {norm, min, max, mean, nan_count, inf_count} of each parameter's gradient (parameters
    without a gradient are left out). Eagerly the values are Python numbers; inside @flame.compile
    they are 0-d Tensors (return them from the step to read them)."""
    out: dict[str, dict[str, float | Tensor]] = {}
    with no_grad():
        for name, p in named_parameters:
            g = p.grad
            if g is None:
                continue
            nan = g != g
            inf = g.abs() == float("inf")
            stats = {"norm": (g * g).sum().sqrt(), "min": g.amin(), "max": g.amax(), "mean": g.mean(),
                     "nan_count": nan.sum(), "inf_count": inf.sum()}
            if not g.is_traced:
                stats = {k: v.item() for k, v in stats.items()}
            out[name] = stats
    return out
