"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay (SGD),
averaged SGD (ASGD) and resilient backpropagation (Rprop), with torch.optim's update rules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flame.frontend.creation import full_like, zeros_like
from flame.frontend.ops import where
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import f64
from flame.optim.optimizer import Optimizer, compute_dtype, scalar_dtype, state_tensor


class SGD(Optimizer):
    """p -= lr * d, where d is the gradient (plus weight_decay * p), or with momentum the buffer
    b = momentum * b + (1 - dampening) * g (b = g on the first step), and d = g + momentum * b for
    Nesterov. With momentum, the buffer and a step counter are created at construction."""

    torch_flags = ("maximize", "foreach", "differentiable", "fused")

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        **flags,
    ):
        super().__init__(
            params,
            dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov),
            **flags,
        )

    non_negative = ("momentum", "weight_decay")
    nan_accepted = True  # torch's SGD checks `lr < 0.0`, `momentum < 0.0` and `weight_decay < 0.0`

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        """With momentum: the buffer (torch's name) and a step counter (the first step copies the
        gradient into the buffer); without, nothing, as torch's."""
        if group["momentum"] == 0:
            return {}
        return {"momentum_buffer": state_tensor(p), "step": state_tensor(p, compute_dtype(p), ())}

    def _missing_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]):
        """The buffer and step counter for a group given a momentum after construction (OneCycleLR's and
        CyclicLR's momentum cycling on an SGD made without one): torch.optim.SGD starts its buffer from
        the gradient whenever it has none."""
        if group["momentum"] != 0 and "momentum_buffer" not in state:
            return lambda: {"momentum_buffer": state_tensor(p), "step": state_tensor(p, compute_dtype(p), ())}
        return None

    def state_dict(self) -> dict[str, Any]:
        """torch.optim.SGD's layout: a momentum_buffer for each parameter that has taken a step with
        momentum, nothing for the others (flame's step counter, which only tells the first step, is left
        out; loading infers it)."""
        sd = super().state_dict()
        sd["state"] = {
            i: {"momentum_buffer": st["momentum_buffer"]}
            for i, st in sd["state"].items()
            if "step" in st and st["step"].item() > 0
        }
        return sd

    def plan_load(self, state_dict: dict[str, Any]) -> list:
        """torch.optim.SGD's state_dict loads too: it has no step counter (a saved momentum_buffer means
        at least one step), and no state at all before the first step."""
        saved = state_dict.get("state") if isinstance(state_dict, dict) else None
        groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        if isinstance(saved, dict) and isinstance(groups, list):
            saved = {int(k): {n: t for n, t in v.items() if t is not None} for k, v in saved.items()}
            for g, mine in zip(groups, self.param_groups):
                for i, p in zip(g.get("params", []), mine["params"]):
                    own, theirs = self.state[p], saved.setdefault(int(i), {})
                    if ("step" in own or "momentum_buffer" in theirs) and "step" not in theirs:
                        theirs["step"] = float("momentum_buffer" in theirs)
                        if "momentum_buffer" not in theirs:
                            theirs["momentum_buffer"] = zeros_like(own["momentum_buffer"])
            state_dict = {**state_dict, "state": saved}
        return super().plan_load(state_dict)

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        x, g = p.to(cd), self.grad(p, group, cd)
        if self.option(group, "weight_decay", nonzero=True):
            g = g + self.hyper(group, "weight_decay", cd) * x
        if self.option(group, "momentum", nonzero=True):
            momentum = self.hyper(group, "momentum", cd)
            buf, step = state["momentum_buffer"], state["step"]
            new = buf.to(cd) * momentum + g * self.hyper(group, "dampening", cd, one_minus=True)
            new = where(step == 0, g, new)
            buf.copy_(new)
            step.copy_(step + 1)
            g = g + new * momentum if self.option(group, "nesterov") else new
        p.copy_(x - g * self.hyper(group, "lr", cd))


class ASGD(Optimizer):
    """Averaged SGD (torch.optim.ASGD): p = p (1 - lambd eta) - eta g, with eta = lr / (1 + lambd lr
    t)^alpha after step t (lr itself at the first step); ax, the average of the iterates, follows p
    with weight mu = 1 / max(1, t - t0) (a copy while mu is 1). State: step, eta, mu, ax."""

    torch_flags = ("foreach", "maximize", "differentiable", "capturable")

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0.0,
        **flags,
    ):
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay), **flags)

    non_negative = ("weight_decay",)
    param_dtype_state = ("eta", "mu")

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        cd = compute_dtype(p)
        sd = scalar_dtype()  # eta and mu are f32 (f64 by default f64), as torch's (which rounds them so)
        mu = state_tensor(p, sd, ())
        mu.copy_(mu + 1)
        return {"step": state_tensor(p, cd, ()), "eta": state_tensor(p, sd, ()), "mu": mu, "ax": state_tensor(p)}

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        x, g = self.begin(p, group, state)
        step = state["step"]
        lr, lambd = self.hyper(group, "lr", f64), self.hyper(group, "lambd", f64)
        t = step.to(f64)
        sd = state["eta"].dtype  # torch sets eta to the lr of the first step, in eta's dtype
        eta = where(t == 1, lr, state["eta"].to(f64)).to(sd).to(cd)
        x = x * (1 - lambd * eta) - g * eta
        mu = state["mu"].to(cd)
        state["ax"].copy_(where(mu == 1, x, state["ax"].to(cd) + (x - state["ax"].to(cd)) * mu))
        # torch computes the new eta and mu as Python floats, makes tensors of them (of the scalar dtype) and
        # copies those into its state (of the parameter's dtype after a load): rounded twice
        rd = scalar_dtype()
        state["eta"].copy_((lr / (1 + lambd * lr * t) ** self.hyper(group, "alpha", f64)).to(rd).to(sd))
        state["mu"].copy_((1 / (t - self.hyper(group, "t0", f64)).maximum(1.0)).to(rd).to(sd))
        p.copy_(x)


class Rprop(Optimizer):
    """Resilient backpropagation (torch.optim.Rprop): each element's step size grows by etas[1] while
    its gradient keeps its sign, shrinks by etas[0] when it flips (that step then skips the element and
    forgets its gradient), clamped to step_sizes; p -= sign(g) * step size. Step sizes start at the
    lr of the first step. State: step, prev, step_size."""

    torch_flags = ("capturable", "foreach", "maximize", "differentiable")

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-2,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50.0),
        **flags,
    ):
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes)), **flags)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        minus, plus = group["etas"]
        if not 0.0 < minus < 1.0 < plus:
            raise ValueError(f"Rprop: invalid etas {group['etas']}: need 0 < etaminus < 1 < etaplus")

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"step": state_tensor(p, compute_dtype(p), ()), "prev": state_tensor(p), "step_size": state_tensor(p)}

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        x, g = p.to(cd), self.grad(p, group, cd)
        step = state["step"]
        step.copy_(step + 1)
        minus, plus = self.hyper(group, "etas", cd, 0), self.hyper(group, "etas", cd, 1)
        lo, hi = self.hyper(group, "step_sizes", cd, 0), self.hyper(group, "step_sizes", cd, 1)
        same = (g * state["prev"].to(cd)).sign()
        factor = where(same > 0, plus, where(same < 0, minus, full_like(g, 1.0)))  # in g's dtype, not f32
        size = where(step == 1, self.hyper(group, "lr", cd), state["step_size"].to(cd))
        size = (size * factor).clamp(lo, hi)
        g = where(same < 0, 0.0, g)
        state["step_size"].copy_(size)
        state["prev"].copy_(g)
        p.copy_(x - g.sign() * size)
