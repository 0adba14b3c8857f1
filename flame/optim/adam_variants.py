"""Adamax, NAdam and RAdam, with torch.optim's update rules, state names and defaults. Their state is
created at construction (see optimizer.py), so one optimizer works eagerly and inside @flame.compile.

torch computes the step-dependent factors (bias corrections, NAdam's momentum schedule, RAdam's
rectification) as Python floats; here they are 0-d f64 tensors, so a compiled step follows the step
counter without re-tracing and still rounds as torch does (RAdam's length of the approximated SMA is
a difference of two numbers near 2 / (1 - beta2): in f32 it is off by 1% at step 6)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flame.frontend.ops import where
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import f64
from flame.optim.adam import Adam, _adam_defaults
from flame.optim.optimizer import compute_dtype, scalar_dtype, state_tensor


class _AdamLike(Adam):
    """Adam's arguments, checks and moments (exp_avg, exp_avg_sq), with an optional decoupled weight
    decay (NAdam's and RAdam's `decoupled_weight_decay`)."""

    torch_flags = ("foreach", "maximize", "capturable", "differentiable")

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], defaults: dict[str, Any], **flags):
        super(Adam, self).__init__(params, defaults, **flags)

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {
            "step": state_tensor(p, compute_dtype(p), ()),
            "exp_avg": state_tensor(p),
            "exp_avg_sq": state_tensor(p),
        }

    def _begin(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]):
        """begin() (decoupled weight decay where the group has decoupled_weight_decay), and the new step
        as a 0-d f64 tensor."""
        x, g = self.begin(p, group, state, "decoupled_weight_decay" if "decoupled_weight_decay" in group else False)
        return x, g, state["step"].to(f64)


class Adamax(_AdamLike):
    """m = lerp(m, g, 1 - b1); u = max(b2 u, |g| + eps); p -= lr / (1 - b1^t) * m / u. weight_decay adds
    weight_decay * p to the gradient. State: step, exp_avg, exp_inf."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        **flags,
    ):
        super().__init__(params, _adam_defaults(lr, betas, eps, weight_decay), **flags)

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"step": state_tensor(p, compute_dtype(p), ()), "exp_avg": state_tensor(p), "exp_inf": state_tensor(p)}

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        x, g, t = self._begin(p, group, state)
        cd = g.dtype
        b2 = self.hyper(group, "betas", cd, 1)
        m = state["exp_avg"].to(cd)
        m = m + (g - m) * self.hyper(group, "betas", cd, 0, one_minus=True)
        u = (state["exp_inf"].to(cd) * b2).maximum(g.abs() + self.hyper(group, "eps", cd))
        state["exp_avg"].copy_(m)
        state["exp_inf"].copy_(u)
        clr = self.hyper(group, "lr", f64) / (1 - self.hyper(group, "betas", f64, 0) ** t)
        p.copy_(x - m / u * clr.to(cd))


class NAdam(_AdamLike):
    """Adam with Nesterov momentum and torch's momentum schedule mu_t = b1 (1 - 0.96^(t psi) / 2)
    (psi: momentum_decay): p -= lr (1 - mu_t) / (1 - prod mu) g / d + lr mu_{t+1} / (1 - prod mu
    * mu_{t+1}) m / d, d = sqrt(v / (1 - b2^t)) + eps. State: step, mu_product, exp_avg, exp_avg_sq."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        **flags,
    ):
        defaults = _adam_defaults(
            lr, betas, eps, weight_decay, momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay
        )
        super().__init__(params, defaults, **flags)

    non_negative = ("eps", "weight_decay", "momentum_decay")
    param_dtype_state = ("mu_product",)

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        st = super()._init_state(p, group)
        mu_product = state_tensor(p, scalar_dtype(), ())  # f32 (f64 by default f64), as torch's rounds it
        mu_product.copy_(mu_product + 1)
        return {"step": st["step"], "mu_product": mu_product, "exp_avg": st["exp_avg"], "exp_avg_sq": st["exp_avg_sq"]}

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        x, g, t = self._begin(p, group, state)
        cd = g.dtype
        b1, b2 = self.hyper(group, "betas", f64, 0), self.hyper(group, "betas", f64, 1)
        lr, psi = self.hyper(group, "lr", f64), self.hyper(group, "momentum_decay", f64)
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * psi))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * psi))
        prod = state["mu_product"]
        prod.copy_(prod * mu.to(prod.dtype))  # in mu_product's dtype, as torch's mu_product *= mu
        prod = prod.to(f64)
        m, v = self.moments(group, state, g)
        d = (v / (1 - b2**t).to(cd)).sqrt() + self.hyper(group, "eps", cd)
        on_g = (-lr * (1.0 - mu) / (1.0 - prod)).to(cd)
        on_m = (-lr * mu_next / (1.0 - prod * mu_next)).to(cd)
        p.copy_(x + g / d * on_g + m / d * on_m)


class RAdam(_AdamLike):
    """Adam with the variance rectification of Liu et al.: while the approximated SMA's length rho_t
    is at most 5, p -= lr m / (1 - b1^t); then p -= lr m / (1 - b1^t) * r_t sqrt(1 - b2^t) / (sqrt(v)
    + eps). State: step, exp_avg, exp_avg_sq."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        **flags,
    ):
        defaults = _adam_defaults(lr, betas, eps, weight_decay, decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults, **flags)

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        x, g, t = self._begin(p, group, state)
        cd = g.dtype
        b1, b2 = self.hyper(group, "betas", f64, 0), self.hyper(group, "betas", f64, 1)
        m, v = self.moments(group, state, g)
        bias1, bias2 = 1 - b1**t, 1 - b2**t
        rho_inf = 2 / (1 - b2) - 1
        rho = rho_inf - 2 * t * b2**t / bias2
        rectified = rho > 5.0
        # the rectification term; where rho_t <= 5 (the root of a negative there) it is not used
        safe = where(rectified, rho, rho_inf)
        rect = ((safe - 4) * (safe - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * safe)).sqrt()
        # torch's order of operations: m / bias1 * lr * (sqrt(bias2) / (sqrt(v) + eps)) * rect
        step = m / bias1.to(cd) * self.hyper(group, "lr", cd)
        adaptive = bias2.sqrt().to(cd) / (v.sqrt() + self.hyper(group, "eps", cd))
        p.copy_(x - where(rectified, step * adaptive * rect.to(cd), step))
