"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay, with
torch.optim.SGD's update rule."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flame.errors import FlameError
from flame.frontend.creation import zeros_like
from flame.frontend.ops import where
from flame.frontend.tensor import Tensor
from flame.optim.optimizer import Optimizer, compute_dtype, state_tensor


class SGD(Optimizer):
    """p -= lr * d, where d is the gradient (plus weight_decay * p), or with momentum the buffer
    b = momentum * b + (1 - dampening) * g (b = g on the first step), and d = g + momentum * b for
    Nesterov. With momentum, the buffer and a step counter are created at construction."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, **flags):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov), **flags)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        if group["momentum"] < 0 or group["weight_decay"] < 0:
            raise ValueError(f"invalid momentum {group['momentum']} or weight_decay {group['weight_decay']}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        """With momentum: the buffer (torch's name) and a step counter (the first step copies the
        gradient into the buffer); without, nothing, as torch's."""
        if group["momentum"] == 0:
            return {}
        return {"momentum_buffer": state_tensor(p), "step": state_tensor(p, compute_dtype(p), ())}

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
                    if "step" in own and "step" not in theirs:
                        theirs["step"] = float("momentum_buffer" in theirs)
                        theirs.setdefault("momentum_buffer", zeros_like(own["momentum_buffer"]))
            state_dict = {**state_dict, "state": saved}
        return super().plan_load(state_dict)

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        x, g = p.to(cd), self.grad(p, group, cd)
        if self.option(group, "weight_decay", nonzero=True):
            g = g + self.hyper(group, "weight_decay", cd) * x
        if self.option(group, "momentum", nonzero=True):
            if "momentum_buffer" not in state:
                raise FlameError("SGD: momentum was set after the optimizer was made with momentum 0, which keeps "
                                 "no momentum_buffer; make the optimizer with momentum set")
            momentum = self.hyper(group, "momentum", cd)
            buf, step = state["momentum_buffer"], state["step"]
            new = buf.to(cd) * momentum + g * (1 - self.hyper(group, "dampening", cd))
            new = where(step == 0, g, new)
            buf.copy_(new)
            step.copy_(step + 1)
            g = g + new * momentum if self.option(group, "nesterov") else new
        p.copy_(x - g * self.hyper(group, "lr", cd))
