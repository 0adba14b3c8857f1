"""Adafactor (Shazeer and Stern), with torch.optim.Adafactor's update rule, arguments, state names and
defaults. Its state is created at construction (see optimizer.py), so one optimizer works eagerly and
inside @flame.compile; torch computes the step-dependent factors (and two norms) as Python floats, here
they are 0-d tensors, so a compiled step follows the step counter without re-tracing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ml_dtypes
import numpy as np

from flame.frontend.context import current_trace
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import f64
from flame.optim.optimizer import Optimizer, compute_dtype, state_tensor


class Adafactor(Optimizer):
    """Second moments factored along a parameter's last two dimensions (row_var, col_var; a vector or a
    scalar keeps a full `variance`), averaged with weight step^beta2_decay; the step size is relative:
    alpha = max(eps2, rms(p)) * min(lr, 1 / sqrt(step)); the update g / sqrt(max(v, eps1^2)) is scaled
    down to rms d at most; weight_decay scales p by 1 - lr * weight_decay. eps1 None: the dtype's eps."""

    torch_flags = ("foreach", "maximize")

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-2,
        beta2_decay: float = -0.8,
        eps: tuple[float | None, float] = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        **flags,
    ):
        super().__init__(
            params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d, weight_decay=weight_decay), **flags
        )

    non_negative = ("weight_decay",)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        eps1, eps2 = group["eps"]
        if not 0.0 >= group["beta2_decay"]:  # (NaN is refused, as torch's)
            raise ValueError(f"beta2_decay should be <= 0 but is: {group['beta2_decay']}")
        if (eps1 is not None and not 0.0 <= eps1) or not 0.0 <= eps2:
            raise ValueError(f"Adafactor: invalid eps {group['eps']}: each must be >= 0 (or eps1 None)")
        if not 1.0 <= group["d"]:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {group['d']}")

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        """torch's state: step, and row_var and col_var (the last dimension, or the one before it, made 1)
        for a parameter of 2 or more dimensions, else variance."""
        st = {"step": state_tensor(p, compute_dtype(p), ())}
        if p.ndim > 1:
            shape = list(p.shape)
            st["row_var"] = state_tensor(p, shape=tuple(shape[:-1] + [1]))
            st["col_var"] = state_tensor(p, shape=tuple(shape[:-2] + [1, shape[-1]]))
        else:
            st["variance"] = state_tensor(p)
        return st

    def _eps1(self, group: dict[str, Any], p: Tensor) -> Tensor | float:
        """eps1 as given, or the machine epsilon of p's dtype where it is None (a choice a trace guards)."""
        trace = current_trace.get()
        given = (lambda: group["eps"][0] is not None)
        if trace is None:
            unset = not given()
        else:
            index = next(i for i, g in enumerate(self.param_groups) if g is group)
            unset = not trace.read_python(f"Adafactor.param_groups[{index}]['eps'][0] is not None", given)
        if unset:
            np_dtype = p.dtype.np_dtype
            info = ml_dtypes.finfo(np_dtype) if np_dtype.type not in (np.float16, np.float32, np.float64) else np.finfo(
                np_dtype
            )
            return float(info.eps)
        return self.hyper(group, "eps", f64, 0)

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        x, g = p.to(cd), self.grad(p, group, cd)
        step = state["step"]
        step.copy_(step + 1)
        t = step.to(f64)
        lr = self.hyper(group, "lr", f64)
        weight = _cast(t ** self.hyper(group, "beta2_decay", f64), cd)  # 1 - beta2 at this step
        rho = (t**-0.5).minimum(lr)
        rms = ((x * x).sum().to(f64) / p.numel()).sqrt()
        alpha = rms.maximum(self.hyper(group, "eps", f64, 1)) * rho
        if self.option(group, "weight_decay", nonzero=True):
            x = x * _cast(1 - lr * self.hyper(group, "weight_decay", f64), cd)
        eps1 = self._eps1(group, p)
        if p.ndim > 1:
            row = state["row_var"].to(cd).lerp((g * g).mean(dim=-1, keepdim=True), weight)
            col = state["col_var"].to(cd).lerp((g * g).mean(dim=-2, keepdim=True), weight)
            state["row_var"].copy_(row)
            state["col_var"].copy_(col)
            v = (row @ col) / row.mean(dim=-2, keepdim=True).maximum(_cast(eps1, cd))
        else:
            v = state["variance"].to(cd).lerp(g * g, weight)
            state["variance"].copy_(v)
        update = v.maximum(_cast(eps1 * eps1, cd)).rsqrt() * g
        urms = ((update * update).sum().to(f64) / max(update.numel(), 1)).sqrt() / self.hyper(group, "d", f64)
        scale = alpha / urms.maximum(1.0)
        p.copy_(x - update * scale.to(cd))


def _cast(v: Tensor | float, dtype) -> Tensor | float:
    """A 0-d tensor in dtype, a Python float as it is."""
    return v.to(dtype) if isinstance(v, Tensor) else v
