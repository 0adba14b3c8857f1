"""Learning-rate schedules (torch.optim.lr_scheduler names). A scheduler only writes group['lr'];
a compiled training step reads it as a `scalar` graph input at every call, so stepping a scheduler
never re-traces. flame's schedulers compute each step's rate from the initial lr (a closed form);
where torch's scheduler of the same name computes it from the current lr (and so chains with another
scheduler, or continues from a rate set by hand), a step that finds the rate changed since it last set
it raises instead of undoing the change."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

from flame.errors import FlameError
from flame.optim.optimizer import Optimizer

__all__ = ["ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR", "ExponentialLR", "LRScheduler",
           "LambdaLR", "LinearLR", "MultiStepLR", "MultiplicativeLR", "OneCycleLR", "PolynomialLR", "ReduceLROnPlateau",
           "SequentialLR", "StepLR", "WarmupCosineLR", "get_cosine_schedule_with_warmup"]


class LRScheduler:
    """Base class. Construction records each group's `initial_lr` and applies the schedule at
    epoch 0; `step()` advances one epoch (or step) and writes the new learning rates."""

    # torch's scheduler of this name computes the next rate from group['lr'] (it chains): a rate
    # changed by someone else since the last step would be continued from there, not undone
    chainable = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            if last_epoch == -1:
                g.setdefault("initial_lr", g["lr"])
            elif "initial_lr" not in g:
                raise KeyError("param 'initial_lr' is not specified in param_groups when resuming a scheduler")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._last_lr: list[float] = []
        self.step()

    def lr_at(self, epoch: int) -> list[float]:
        """The learning rate of each group at `epoch` (a closed form of the schedule)."""
        raise NotImplementedError

    def get_lr(self) -> list[float]:
        return self.lr_at(self.last_epoch)

    def step(self) -> None:
        """Advance one epoch (or step) and write each group's learning rate."""
        if self._last_lr and self.follows_current_lr(self.last_epoch + 1):
            self.check_unchanged()
        self.last_epoch += 1
        self._last_lr = [float(lr) for lr in self.get_lr()]
        for g, lr in zip(self.optimizer.param_groups, self._last_lr):
            g["lr"] = lr

    def follows_current_lr(self, epoch: int) -> bool:
        """Whether torch's scheduler computes epoch's rate from the current group['lr']."""
        return self.chainable

    def check_unchanged(self) -> None:
        """Raise when a group's lr is no longer the rate this scheduler last set: torch's scheduler would
        continue from the new rate (two schedulers stepping one optimizer chain in torch); flame's
        closed form would silently undo it."""
        for i, (g, mine) in enumerate(zip(self.optimizer.param_groups, self._last_lr)):
            if g["lr"] != mine:
                name = type(self).__name__
                raise FlameError(
                    f"{name}.step(): optimizer.param_groups[{i}]['lr'] is {g['lr']!r}, not the {mine!r} this "
                    f"scheduler set at its last step: another scheduler stepping the same optimizer, a "
                    f"change by hand or an optimizer state loaded without this scheduler's set it. torch's "
                    f"{name} would continue from {g['lr']!r}; flame's schedulers compute each rate from the "
                    f"initial lr and do not chain. Use one SequentialLR, or one LambdaLR with the product of "
                    f"the factors; load the scheduler's state_dict with the optimizer's; to start a new "
                    f"schedule from a rate set by hand, make a new scheduler")

    def get_last_lr(self) -> list[float]:
        """The learning rates the last step() wrote."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer and functions (torch's layout)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved attributes; the groups take the rates the saved scheduler last set (those
        of the optimizer saved with it), so a scheduler made before or after loading the optimizer's
        state resumes alike."""
        self.__dict__.update(state_dict)
        if self._last_lr:
            for g, lr in zip(self.optimizer.param_groups, self._last_lr):
                g["lr"] = lr


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(epoch) (one function, or one per group)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
                 last_epoch: int = -1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"expected {n} lr_lambdas, got {len(self.lr_lambdas)}")
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * f(epoch) for base, f in zip(self.base_lrs, self.lr_lambdas)]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}


class StepLR(LRScheduler):
    """lr = initial_lr * gamma ** (epoch // step_size)."""

    chainable = True

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * self.gamma ** (epoch // self.step_size) for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (the closed form)."""

    chainable = True

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        c = (1 + math.cos(math.pi * epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]


class WarmupCosineLR(LRScheduler):
    """Linear warmup from 0 to initial_lr over warmup_steps, then cosine decay to
    min_lr_ratio * initial_lr at total_steps (held there afterwards)."""

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0,
                 last_epoch: int = -1):
        if total_steps <= warmup_steps:
            raise ValueError(f"total_steps ({total_steps}) must exceed warmup_steps ({warmup_steps})")
        self.warmup_steps, self.total_steps, self.min_lr_ratio = warmup_steps, total_steps, min_lr_ratio
        super().__init__(optimizer, last_epoch)

    def factor(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / max(1, self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    def lr_at(self, epoch: int) -> list[float]:
        return [base * self.factor(epoch) for base in self.base_lrs]


def get_cosine_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int,
                                    last_epoch: int = -1) -> WarmupCosineLR:
    """The Hugging Face name for WarmupCosineLR (decaying to zero)."""
    return WarmupCosineLR(optimizer, num_warmup_steps, num_training_steps, 0.0, last_epoch)


class MultiStepLR(LRScheduler):
    """lr = initial_lr * gamma ** (the number of milestones reached)."""

    chainable = True

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * self.gamma ** bisect.bisect_right(self.milestones, epoch) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """lr = initial_lr * gamma ** epoch."""

    chainable = True

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * self.gamma ** epoch for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr = initial_lr * factor until total_iters, then initial_lr."""

    chainable = True

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * (self.factor if epoch < self.total_iters else 1.0) for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr = initial_lr * a factor going linearly from start_factor to end_factor over total_iters
    epochs, then held (a warmup with the defaults' start_factor below 1)."""

    chainable = True

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1], got {start_factor} "
                             f"and {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        t = min(epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return [base * (self.start_factor + (self.end_factor - self.start_factor) * t) for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr = initial_lr * (1 - min(epoch, total_iters) / total_iters) ** power."""

    chainable = True

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * (1.0 - min(epoch, self.total_iters) / self.total_iters) ** self.power for base in self.base_lrs]


class MultiplicativeLR(LambdaLR):
    """lr = the last lr * lr_lambda(epoch) at each step after the first (one function or one per group):
    LambdaLR's arguments, applied to the running rate instead of initial_lr."""

    def get_lr(self) -> list[float]:
        if self.last_epoch <= 0:
            return list(self.base_lrs)
        return [g["lr"] * f(self.last_epoch) for g, f in zip(self.optimizer.param_groups, self.lr_lambdas)]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from initial_lr to eta_min over T_0 epochs, then again over T_0 * T_mult, ...
    (SGDR, Loshchilov and Hutter), restarting at initial_lr each time."""

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1):
        if T_0 <= 0 or not isinstance(T_0, int) or T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"CosineAnnealingWarmRestarts: T_0 must be a positive int and T_mult an int >= 1, got "
                             f"{T_0} and {T_mult}")
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        t_cur, t_i = epoch, self.T_0
        if self.T_mult == 1:
            t_cur = epoch % self.T_0
        else:
            while t_cur >= t_i:
                t_cur, t_i = t_cur - t_i, t_i * self.T_mult
        c = (1 + math.cos(math.pi * t_cur / t_i)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith): lr rises from max_lr / div_factor to max_lr over pct_start of
    total_steps, then anneals to max_lr / div_factor / final_div_factor (three_phase: back to the
    initial lr first, then down); with cycle_momentum, momentum (SGD) or beta1 (Adam) moves the other
    way between max_momentum and base_momentum. Cosine or linear annealing, as PyTorch."""

    def __init__(self, optimizer: Optimizer, max_lr: float | Sequence[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True, base_momentum: float = 0.85,
                 max_momentum: float = 0.95, div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0 or not 0 <= pct_start <= 1 or anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: total_steps must be positive, pct_start in [0, 1] and anneal_strategy 'cos' "
                             f"or 'linear'; got {total_steps}, {pct_start}, {anneal_strategy!r}")
        self.total_steps, self.cycle_momentum = total_steps, cycle_momentum
        self.anneal = self._cos if anneal_strategy == "cos" else self._linear
        up = float(pct_start * total_steps) - 1
        if three_phase:
            self.phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                           (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum",
                            "max_momentum"),
                           (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            self.phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                           (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        groups = optimizer.param_groups
        max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * len(groups)
        if len(max_lrs) != len(groups):
            raise ValueError(f"OneCycleLR: expected {len(groups)} max_lr values, got {len(max_lrs)}")
        self.use_beta1 = "betas" in optimizer.defaults
        if cycle_momentum and not self.use_beta1 and "momentum" not in optimizer.defaults:
            raise ValueError("OneCycleLR: optimizer must support momentum or beta1 with cycle_momentum enabled")
        for g, top in zip(groups, max_lrs):
            if last_epoch == -1:
                g["initial_lr"], g["max_lr"] = top / div_factor, top
                g["min_lr"] = g["initial_lr"] / final_div_factor
            if cycle_momentum:
                if last_epoch == -1:
                    self._set_momentum(g, max_momentum)
                g["max_momentum"], g["base_momentum"] = max_momentum, base_momentum
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _cos(start: float, end: float, pct: float) -> float:
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    @staticmethod
    def _linear(start: float, end: float, pct: float) -> float:
        return (end - start) * pct + start

    def _set_momentum(self, group: dict, value: float) -> None:
        _set_momentum(group, self.use_beta1, value)

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: stepped {step} times, more than total_steps = {self.total_steps}")
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self.phases):
                if step <= end or i == len(self.phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self.anneal(g[lr0], g[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(g, self.anneal(g[m0], g[m1], pct))
                    break
                start = end
        return lrs


def _set_momentum(group: dict, use_beta1: bool, value: float) -> None:
    """Cycle the momentum: beta1 of an Adam-like optimizer, else SGD's momentum."""
    if use_beta1:
        group["betas"] = (value, *group["betas"][1:])
    else:
        group["momentum"] = value


def _per_group(name: str, optimizer: Optimizer, value: float | Sequence[float]) -> list[float]:
    groups = optimizer.param_groups
    values = list(value) if isinstance(value, (list, tuple)) else [value] * len(groups)
    if len(values) != len(groups):
        raise ValueError(f"expected {len(groups)} values for {name}, got {len(values)}")
    return values


class CyclicLR(LRScheduler):
    """The cyclical learning rate (Smith): lr goes from base_lr up to max_lr over step_size_up steps
    and back over step_size_down (default: the same), the amplitude scaled by mode "triangular" (1),
    "triangular2" (halved every cycle) or "exp_range" (gamma ** step), or by scale_fn(cycle or step,
    per scale_mode); with cycle_momentum, momentum (SGD) or beta1 (Adam) moves the other way between
    max_momentum and base_momentum. Step it after every batch, as PyTorch's."""

    def __init__(self, optimizer: Optimizer, base_lr: float | Sequence[float], max_lr: float | Sequence[float],
                 step_size_up: int = 2000, step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None, scale_mode: str = "cycle",
                 cycle_momentum: bool = True, base_momentum: float | Sequence[float] = 0.8,
                 max_momentum: float | Sequence[float] = 0.9, last_epoch: int = -1):
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for g, lr in zip(optimizer.param_groups, base_lrs):
                g["lr"] = lr
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size, self.step_ratio = up + down, up / (up + down)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"CyclicLR: mode {mode!r} is none of 'triangular', 'triangular2', 'exp_range' and "
                             f"there is no scale_fn")
        self.mode, self.gamma, self.scale_fn = mode, gamma, scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else ("iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("CyclicLR: optimizer must support momentum or beta1 with cycle_momentum enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = _per_group("base_momentum", optimizer, base_momentum)
            self.max_momentums = _per_group("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for g, top, low in zip(optimizer.param_groups, self.max_momentums, self.base_momentums):
                    _set_momentum(g, self.use_beta1, top)
                    g["max_momentum"], g["base_momentum"] = top, low
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _scale(self, x: float) -> float:
        if self.scale_fn is not None:
            return self.scale_fn(x)
        return {"triangular": 1.0, "triangular2": 1 / (2.0 ** (x - 1)), "exp_range": self.gamma**x}[self.mode]

    def get_lr(self) -> list[float]:
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self._scale(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (top - base) * factor * scale for base, top in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for g, low, top in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                _set_momentum(g, self.use_beta1, top - (top - low) * factor * scale)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().state_dict().items() if k != "scale_fn"}


class SequentialLR(LRScheduler):
    """schedulers[i] from milestones[i - 1] on, each counting its epochs from its milestone (the
    warmup-then-decay idiom: SequentialLR(opt, [LinearLR(...), CosineAnnealingLR(...)], [warmup]))."""

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: expected {len(schedulers) - 1} milestones for {len(schedulers)} "
                             f"schedulers, got {len(milestones)}")
        if any(s.optimizer is not optimizer for s in schedulers):
            raise ValueError("SequentialLR: every scheduler must wrap the optimizer SequentialLR is given")
        self.schedulers, self.milestones = list(schedulers), list(milestones)
        for g, base in zip(optimizer.param_groups, schedulers[0].base_lrs):
            g["lr"] = base
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        i = bisect.bisect_right(self.milestones, self.last_epoch)
        start = self.milestones[i - 1] if i else 0
        sched = self.schedulers[i]
        sched.last_epoch = self.last_epoch - start
        return sched.get_lr()

    def follows_current_lr(self, epoch: int) -> bool:
        """The scheduler epoch falls in follows the current rate, except at its milestone (torch starts
        it there from its closed form)."""
        i = bisect.bisect_right(self.milestones, epoch)
        return self.schedulers[i].chainable and not (i and self.milestones[i - 1] == epoch)

    def state_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in super().state_dict().items() if k != "schedulers"}
        out["_schedulers"] = [s.state_dict() for s in self.schedulers]
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        for s, sd in zip(self.schedulers, state.pop("_schedulers")):
            s.load_state_dict(sd)
        super().load_state_dict(state)


class ReduceLROnPlateau:
    """Multiply the learning rates by factor when a metric stopped improving for patience epochs
    (mode "min": lower is better), as torch.optim.lr_scheduler.ReduceLROnPlateau: step(metric) once
    per epoch; threshold (relative or absolute) says what counts as better; cooldown epochs pass
    after a reduction before counting again; lrs never go below min_lr (one or one per group), and a
    change smaller than eps is not made."""

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: float | Sequence[float] = 0.0, eps: float = 1e-8):
        if factor >= 1.0 or mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: factor must be < 1, mode 'min' or 'max' and threshold_mode 'rel' "
                             f"or 'abs'; got {factor}, {mode!r}, {threshold_mode!r}")
        n = len(optimizer.param_groups)
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * n
        if len(self.min_lrs) != n:
            raise ValueError(f"ReduceLROnPlateau: expected {n} min_lr values, got {len(self.min_lrs)}")
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = threshold, threshold_mode, cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs, self.cooldown_counter, self.last_epoch = 0, 0, 0
        self._last_lr = [float(g["lr"]) for g in optimizer.param_groups]

    def _better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < (best * (1 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (1 + self.threshold) if self.threshold_mode == "rel" else best + self.threshold)

    def step(self, metrics: float) -> None:
        current = float(metrics)
        self.last_epoch += 1
        if self._better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for g, low in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(g["lr"] * self.factor, low)
                if g["lr"] - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [float(g["lr"]) for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)
