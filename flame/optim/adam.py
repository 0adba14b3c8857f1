"""Adam and AdamW (decoupled weight decay), with torch.optim's update rule, bias correction and
optional AMSGrad. Moments and the step counter are created at construction (see optimizer.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flame.errors import ArgumentError, ShapeError
from flame.frontend.context import user_location
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import f64
from flame.optim.optimizer import Optimizer, compute_dtype, state_tensor


class Adam(Optimizer):
    """m = lerp(m, g, 1 - b1); v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t)
    + eps). Adam adds weight_decay * p to the gradient; with decoupled_weight_decay (AdamW's rule) it
    instead scales p by 1 - lr * weight_decay."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        decoupled_weight_decay: bool = False,
        **flags,
    ):
        _check_tensor_options(type(self).__name__, lr, betas, flags)
        defaults = _adam_defaults(
            lr, betas, eps, weight_decay, amsgrad=amsgrad, decoupled_weight_decay=decoupled_weight_decay
        )
        super().__init__(params, defaults, **flags)

    non_negative = ("eps", "weight_decay")

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        b1, b2 = group["betas"]
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"invalid betas {group['betas']}: each must be in [0, 1)")

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        st = {"step": state_tensor(p, compute_dtype(p), ()), "exp_avg": state_tensor(p), "exp_avg_sq": state_tensor(p)}
        if group["amsgrad"]:
            st["max_exp_avg_sq"] = state_tensor(p)
        return st

    def _missing_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]):
        """max_exp_avg_sq for amsgrad set after construction but before the parameter's first step, as
        torch.optim.Adam makes its state at the first step."""
        if group.get("amsgrad") and "max_exp_avg_sq" not in state and state["step"].item() == 0:
            return lambda: {"max_exp_avg_sq": state_tensor(p)}
        return None

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        x, g = self.begin(p, group, state, "decoupled_weight_decay")
        m, v = self.moments(group, state, g)
        if self.option(group, "amsgrad"):
            v = state["max_exp_avg_sq"].to(cd).maximum(v)
            state["max_exp_avg_sq"].copy_(v)
        # torch's Python floats: bias corrections and lr / (1 - b1^t) in double, each rounded once to cd
        t = state["step"].to(f64)
        bias1 = 1 - self.hyper(group, "betas", f64, 0) ** t
        bias2_sqrt = (1 - self.hyper(group, "betas", f64, 1) ** t).sqrt().to(cd)
        denom = v.sqrt() / bias2_sqrt + self.hyper(group, "eps", cd)
        p.copy_(x - (m / denom) * (self.hyper(group, "lr", f64) / bias1).to(cd))

    def moments(self, group: dict[str, Any], state: dict[str, Tensor], g: Tensor) -> tuple[Tensor, Tensor]:
        """exp_avg = lerp(exp_avg, g, 1 - b1) and exp_avg_sq = b2 exp_avg_sq + (1 - b2) g^2, written to the
        state and returned, with 1 - b1 and 1 - b2 rounded from double precision as torch's."""
        cd = g.dtype
        m = state["exp_avg"].to(cd)
        m = m + (g - m) * self.hyper(group, "betas", cd, 0, one_minus=True)
        v = state["exp_avg_sq"].to(cd) * self.hyper(group, "betas", cd, 1) + g * self.hyper(
            group, "betas", cd, 1, one_minus=True) * g
        state["exp_avg"].copy_(m)
        state["exp_avg_sq"].copy_(v)
        return m, v


def _adam_defaults(lr: Any, betas: Any, eps: float, weight_decay: float, **more: Any) -> dict[str, Any]:
    """The Adam family's group defaults: lr, betas (as a tuple), eps and weight_decay, then `more` in
    their order."""
    return dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, **more)


def _check_tensor_options(name: str, lr: Any, betas: Any, flags: dict[str, Any]) -> None:
    """torch.optim.Adam's checks of a rate or betas held as tensors: betas both floats or both tensors,
    each tensor of one element, and none with foreach=True unless capturable=True (torch's foreach
    update takes Python numbers there)."""
    b1, b2 = betas
    if not (isinstance(b1, float) and isinstance(b2, float) or isinstance(b1, Tensor) and isinstance(b2, Tensor)):
        raise ArgumentError(
            f"{name}: betas must be either both floats or both Tensors, got ({type(b1).__name__}, "
            f"{type(b2).__name__})\n  at {user_location()}"
        )
    for what, value in (("lr", lr), ("betas[0]", b1), ("betas[1]", b2)):
        if not isinstance(value, Tensor):
            continue
        if flags.get("foreach") and not flags.get("capturable"):
            raise ArgumentError(
                f"{name}: {what} as a Tensor is not supported for capturable=False and foreach=True\n"
                f"  at {user_location()}"
            )
        if value.numel() != 1:  # (a ValueError, as torch's for lr, and a RuntimeError, as its range check's for betas)
            raise ShapeError(
                f"{name}: Tensor {what} must be 1-element, got shape {list(value.shape)}\n  at {user_location()}"
            )


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01), as torch.optim.AdamW (whose groups hold
    decoupled_weight_decay=True)."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        **flags,
    ):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, decoupled_weight_decay=True, **flags)
