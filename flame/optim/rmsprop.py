"""RMSprop, Adagrad and Adadelta with torch.optim's update rules, state names and defaults. Their state (a step
counter and the running averages their options ask for, as torch's) is created at construction, as
every flame optimizer's (optimizer.py), so one optimizer works eagerly and inside @flame.compile."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flame.errors import FlameError
from flame.frontend.tensor import Tensor
from flame.optim.optimizer import Optimizer, compute_dtype, state_tensor


class RMSprop(Optimizer):
    """square_avg = alpha * square_avg + (1 - alpha) g^2; avg = sqrt(square_avg) + eps (centered:
    sqrt(square_avg - grad_avg^2) + eps with grad_avg the running mean of g); p -= lr * g / avg, or
    with momentum buf = momentum * buf + g / avg and p -= lr * buf. weight_decay adds wd * p to g."""

    torch_flags = ("capturable", "foreach", "maximize", "differentiable")

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        **flags,
    ):
        super().__init__(
            params,
            dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered),
            **flags,
        )

    non_negative = ("alpha", "eps", "weight_decay", "momentum")

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        """torch's state: step and square_avg, momentum_buffer with momentum > 0, grad_avg if centered."""
        st = {"step": state_tensor(p, compute_dtype(p), ()), "square_avg": state_tensor(p)}
        if group["momentum"] > 0:
            st["momentum_buffer"] = state_tensor(p)
        if group["centered"]:
            st["grad_avg"] = state_tensor(p)
        return st

    def _missing_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]):
        """The momentum_buffer or grad_avg of an option set after construction but before the parameter's
        first step (OneCycleLR's momentum on an RMSprop made without one), as torch.optim.RMSprop makes
        its state at the first step; set after it, torch has none and _update says so."""
        keys = [k for k, on in (("momentum_buffer", group["momentum"] > 0), ("grad_avg", group["centered"]))
                if on and k not in state]
        if keys and state["step"].item() == 0:
            return lambda: {k: state_tensor(p) for k in keys}
        return None

    @staticmethod
    def _buffer(state: dict[str, Tensor], key: str, option: str) -> Tensor:
        if key not in state:
            raise FlameError(
                f"RMSprop: {option} was set after the optimizer was made, which then kept no "
                f"{key}; make the optimizer with {option} set (its state is created with it, as "
                f"torch.optim.RMSprop's at its first step)"
            )
        return state[key]

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        lr, alpha, eps = self.hyper(group, "lr", cd), self.hyper(group, "alpha", cd), self.hyper(group, "eps", cd)
        x, g = self.begin(p, group, state)
        keep = self.hyper(group, "alpha", cd, one_minus=True)  # 1 - alpha rounded once, as torch's Python float
        square = state["square_avg"].to(cd) * alpha + g * keep * g
        state["square_avg"].copy_(square)
        if self.option(group, "centered"):
            grad_avg = self._buffer(state, "grad_avg", "centered")
            mean = grad_avg.to(cd).lerp(g, keep)
            grad_avg.copy_(mean)
            avg = (square - mean * mean).sqrt() + eps
        else:
            avg = square.sqrt() + eps
        if self.option(group, "momentum", nonzero=True):
            momentum_buffer = self._buffer(state, "momentum_buffer", "momentum")
            buf = momentum_buffer.to(cd) * self.hyper(group, "momentum", cd) + g / avg
            momentum_buffer.copy_(buf)
            p.copy_(x - buf * lr)
        else:
            p.copy_(x - g / avg * lr)


class Adagrad(Optimizer):
    """sum += g^2; p -= clr * g / (sqrt(sum) + eps), clr = lr / (1 + (step - 1) * lr_decay); sum starts
    at initial_accumulator_value; weight_decay adds wd * p to g."""

    torch_flags = ("foreach", "maximize", "differentiable", "fused")

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        **flags,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                lr_decay=lr_decay,
                weight_decay=weight_decay,
                initial_accumulator_value=initial_accumulator_value,
                eps=eps,
            ),
            **flags,
        )

    non_negative = ("lr_decay", "weight_decay", "initial_accumulator_value", "eps")
    state_at_construction = True

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        """step and sum; sum starts at the optimizer's initial_accumulator_value (the constructor's, as
        torch.optim.Adagrad's: a value a param group gives is kept in the group but does not start its sum)."""
        total = state_tensor(p)
        start = self.defaults["initial_accumulator_value"]
        if start:
            total.copy_(total + start)
        return {"step": state_tensor(p, compute_dtype(p), ()), "sum": total}

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        lr, eps = self.hyper(group, "lr", cd), self.hyper(group, "eps", cd)
        x, g = self.begin(p, group, state)
        clr = lr / ((state["step"].to(cd) - 1) * self.hyper(group, "lr_decay", cd) + 1)
        total = state["sum"].to(cd) + g * g
        state["sum"].copy_(total)
        p.copy_(x - g / (total.sqrt() + eps) * clr)


class Adadelta(Optimizer):
    """square_avg = rho square_avg + (1 - rho) g^2; delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps)
    * g; acc_delta = rho acc_delta + (1 - rho) delta^2; p -= lr * delta. weight_decay adds wd * p to g."""

    torch_flags = ("foreach", "capturable", "maximize", "differentiable")

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        **flags,
    ):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay), **flags)

    non_negative = ("eps", "weight_decay")

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        if not 0.0 <= group["rho"] <= 1.0:
            raise ValueError(f"Adadelta: invalid rho {group['rho']}")

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {
            "step": state_tensor(p, compute_dtype(p), ()),
            "square_avg": state_tensor(p),
            "acc_delta": state_tensor(p),
        }

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        lr, rho, eps = self.hyper(group, "lr", cd), self.hyper(group, "rho", cd), self.hyper(group, "eps", cd)
        x, g = self.begin(p, group, state)
        keep = self.hyper(group, "rho", cd, one_minus=True)  # 1 - rho rounded once, as torch's Python float
        square = state["square_avg"].to(cd) * rho + g * keep * g
        delta = (state["acc_delta"].to(cd) + eps).sqrt() / (square + eps).sqrt() * g
        state["square_avg"].copy_(square)
        state["acc_delta"].copy_(state["acc_delta"].to(cd) * rho + delta * keep * delta)
        p.copy_(x - delta * lr)
