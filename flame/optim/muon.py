"""Muon (Keller Jordan's MomentUm Orthogonalized by Newton-Schulz), with torch.optim.Muon's update rule,
arguments, checks, state name and defaults: the momentum buffer's Nesterov update is orthogonalized by
a quintic Newton-Schulz iteration in bf16 (torch's: its products rounded as torch's addmm rounds them),
then applied with decoupled weight decay and a learning rate scaled to the matrix's shape. For the 2-D
parameters of hidden layers (others go to AdamW, as torch's documentation says). Its state is created
at construction (optimizer.py), so one optimizer works eagerly and inside @flame.compile; ns_steps,
ns_coefficients, eps and adjust_lr_fn shape the update, so changing them re-traces a compiled step."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from flame.errors import ArgumentError
from flame.frontend.context import current_trace, user_location
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import bf16
from flame.optim.optimizer import Optimizer, compute_dtype, state_tensor

EPS = 1e-7
DEFAULT_A, DEFAULT_B, DEFAULT_C = 3.4445, -4.7750, 2.0315
DEFAULT_NS_STEPS = 5


def _zeropower_via_newtonschulz(grad: Tensor, ns_coefficients: tuple, ns_steps: int, eps: float) -> Tensor:
    """torch's: grad [A, B] in bf16, scaled to a spectral norm of at most 1 (by its Frobenius norm), then
    ns_steps quintic iterations X <- a X + (b G + c G G) X with G = X X^T (on the transpose of a tall
    matrix), converging towards U S' V^T with S' near 1."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if grad.ndim != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = ns_coefficients
    tall = grad.shape[0] > grad.shape[1]
    x = grad.to(bf16)
    x = x.T if tall else x
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = x.addmm(gram.addmm(gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def _adjust_lr(adjust_lr_fn: str | None, shape: tuple[int, ...]) -> float:
    """The factor torch's Muon scales lr by: sqrt(max(1, A / B)) ("original", the default), or
    0.2 sqrt(max(A, B)) ("match_rms_adamw", Moonshot's, to reuse AdamW's lr and weight decay)."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return 1.0


class Muon(Optimizer):
    """buf = lerp(buf, g, 1 - momentum); u = lerp(g, buf, momentum) with nesterov, else buf;
    O = NewtonSchulz(u) (bf16); p = p (1 - lr weight_decay) - lr adjust(shape) O."""

    torch_flags = ()

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = (DEFAULT_A, DEFAULT_B, DEFAULT_C),
        eps: float = EPS,
        ns_steps: int = DEFAULT_NS_STEPS,
        adjust_lr_fn: str | None = None,
    ):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                        ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        if not 0.0 <= group["lr"]:
            raise ArgumentError(f"Learning rate should be >= 0 but is: {group['lr']}")
        if not 0.0 <= group["momentum"]:
            raise ArgumentError(f"momentum should be >= 0 but is: {group['momentum']}")
        if not 0.0 <= group["weight_decay"]:
            raise ArgumentError(f"weight decay should be >= 0 but is: {group['weight_decay']}")
        if group["adjust_lr_fn"] not in (None, "original", "match_rms_adamw"):
            raise ArgumentError(f"Adjust learning rate function {group['adjust_lr_fn']} is not supported")
        for p in group["params"]:
            if p.ndim != 2:
                raise ArgumentError(f"Muon only supports 2D parameters whereas we found a parameter with size: "
                                    f"{list(p.shape)}\n  at {user_location()}")

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"momentum_buffer": state_tensor(p)}

    def _fixed(self, group: dict[str, Any], key: str):
        """group[key], a value the update's ops depend on: inside a trace, a guard of the trace."""
        trace = current_trace.get()
        if trace is None:
            return group[key]
        index = next(i for i, g in enumerate(self.param_groups) if g is group)
        at = self._reader(group)
        return trace.read_python(f"Muon.param_groups[{index}][{key!r}]", lambda: at()[key])

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        cd = compute_dtype(p)
        x, g = p.to(cd), p.grad.to(cd)  # (torch's Muon has no maximize)
        momentum = self.hyper(group, "momentum", cd)
        buf = state["momentum_buffer"]
        new = buf.to(cd).lerp(g, self.hyper(group, "momentum", cd, one_minus=True))
        buf.copy_(new)
        update = g.lerp(new, momentum) if self.option(group, "nesterov") else new
        update = _zeropower_via_newtonschulz(update, tuple(self._fixed(group, "ns_coefficients")),
                                             self._fixed(group, "ns_steps"), self._fixed(group, "eps"))
        lr = self.hyper(group, "lr", cd)
        x = x * (1 - lr * self.hyper(group, "weight_decay", cd))
        p.copy_(x - update.to(cd) * (lr * _adjust_lr(self._fixed(group, "adjust_lr_fn"), tuple(p.shape))))
