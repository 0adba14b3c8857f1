"""Learning-rate schedules, as torch.optim.lr_scheduler: the same classes, arguments and rates, step
for step. A scheduler only writes group['lr'] (OneCycleLR and CyclicLR also the momentum or beta1); a
compiled training step reads group['lr'] as a `scalar` graph input at every call, so stepping a
scheduler never re-traces.

As in torch, StepLR, MultiStepLR, ConstantLR, LinearLR, ExponentialLR, PolynomialLR, CosineAnnealingLR
and MultiplicativeLR compute the next rate from the rate the group holds (the chainable form): two
schedulers stepping one optimizer compose (ChainedScheduler steps them together), and a rate set by hand
is continued from. LambdaLR, CosineAnnealingWarmRestarts, OneCycleLR, CyclicLR and WarmupCosineLR
compute each rate from the initial (or base) lr and overwrite what the group holds. SequentialLR starts
each scheduler at its milestone from the closed form of its first rate. step(epoch), deprecated in
torch, sets the epoch and uses the closed form where the scheduler has one. state_dict() holds every
attribute but the optimizer; load_state_dict() restores them and leaves the groups' rates alone, so
make a scheduler before loading the optimizer's state into its optimizer, as torch advises."""

import math
import types
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from flame.errors import ArgumentError, ArgumentTypeError
from flame.optim._lr_base import LRScheduler, _lrs, set_group_value
from flame.optim._lr_cycles import CyclicLR, OneCycleLR, ReduceLROnPlateau
from flame.optim.optimizer import Optimizer

__all__ = [
    "ChainedScheduler",
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "CyclicLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "SequentialLR",
    "StepLR",
    "WarmupCosineLR",
    "get_cosine_schedule_with_warmup",
]


class _LRScheduler(LRScheduler):
    """torch's older name of LRScheduler, which custom schedulers written against torch before 2.0
    still subclass (`from torch.optim.lr_scheduler import _LRScheduler`)."""


def _lambdas(name: str, optimizer: Optimizer, lr_lambda: Any) -> list[Callable[[int], float]]:
    n = len(optimizer.param_groups)
    if not isinstance(lr_lambda, (list, tuple)):
        return [lr_lambda] * n
    if len(lr_lambda) != n:
        raise ArgumentError(f"{name}: expected {n} lr_lambdas (one per param group), got {len(lr_lambda)}")
    return list(lr_lambda)


class _LambdaScheduler(LRScheduler):
    """LambdaLR's and MultiplicativeLR's arguments and state (a callable object's attributes are
    saved; a function or lambda is not)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Any, last_epoch: int = -1):
        self.optimizer = optimizer
        self.lr_lambdas = _lambdas(type(self).__name__, optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        """The attributes, with lr_lambdas as each callable object's __dict__ (None for a function)."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [
            None if isinstance(fn, types.FunctionType) else fn.__dict__.copy() for fn in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the attributes and each callable object's saved __dict__."""
        state = dict(state_dict)
        saved = state.pop("lr_lambdas")
        self.__dict__.update(state)
        for fn, attrs in zip(self.lr_lambdas, saved):
            if attrs is not None:
                fn.__dict__.update(attrs)


class LambdaLR(_LambdaScheduler):
    """lr = initial_lr * lr_lambda(epoch) (one function, or one per group)."""

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
        last_epoch: int = -1,
    ):
        super().__init__(optimizer, lr_lambda, last_epoch)

    def get_lr(self) -> list[Any]:
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(_LambdaScheduler):
    """lr = the current lr * lr_lambda(epoch) at each step after the first (one function or one per
    group)."""

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
        last_epoch: int = -1,
    ):
        for fn in lr_lambda if isinstance(lr_lambda, (list, tuple)) else [lr_lambda]:
            if not callable(fn):
                raise ArgumentTypeError(f"MultiplicativeLR: lr_lambda should be a function, got {type(fn).__name__}")
        super().__init__(optimizer, lr_lambda, last_epoch)

    def get_lr(self) -> list[Any]:
        if self._is_initial:
            return _lrs(self.optimizer)
        return [g["lr"] * f(self.last_epoch) for f, g in zip(self.lr_lambdas, self.optimizer.param_groups)]


class StepLR(LRScheduler):
    """Multiply the rate by gamma every step_size epochs (closed form: initial_lr * gamma ** (epoch //
    step_size))."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list[Any]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the rate by gamma at each milestone (by gamma ** k at a milestone given k times)."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = Counter(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        if self.last_epoch not in self.milestones:
            return _lrs(self.optimizer)
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in _lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list[Any]:
        milestones = sorted(self.milestones.elements())
        return [base * self.gamma ** bisect_right(milestones, self.last_epoch) for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """Multiply the rate by factor at epoch 0 and divide it by factor at total_iters."""

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        if factor > 1.0 or factor < 0:
            raise ArgumentError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        if self.last_epoch == 0:
            return [lr * self.factor for lr in _lrs(self.optimizer)]
        if self.last_epoch != self.total_iters:
            return _lrs(self.optimizer)
        if self.factor == 0:
            raise ArgumentError(
                f"ConstantLR(factor=0).step() at total_iters={self.total_iters}: the rate is "
                f"restored by dividing the current one by factor (as torch, which raises "
                f"ZeroDivisionError here); use LambdaLR(lambda e: 0.0 if e < {self.total_iters} "
                f"else 1.0)"
            )
        return [lr * (1.0 / self.factor) for lr in _lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list[Any]:
        return [
            base * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)) for base in self.base_lrs
        ]


def _closed_form_iters(name: str, total_iters: int) -> None:
    if total_iters == 0:
        raise ArgumentError(
            f"{name}(total_iters=0) has no closed form (it divides by total_iters, as torch's, "
            f"which raises ZeroDivisionError): step it without an epoch"
        )


class LinearLR(LRScheduler):
    """Multiply the rate by start_factor at epoch 0, then scale it so that it moves linearly to
    initial_lr * end_factor at total_iters, and hold it (a warmup with start_factor below 1)."""

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ):
        if start_factor > 1.0 or start_factor <= 0:
            raise ArgumentError(f"LinearLR: start_factor must be in (0, 1], got {start_factor}")
        if end_factor > 1.0 or end_factor < 0:
            raise ArgumentError(f"LinearLR: end_factor must be in [0, 1], got {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in _lrs(self.optimizer)]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        delta = self.end_factor - self.start_factor
        return [
            lr * (1.0 + delta / (self.total_iters * self.start_factor + (self.last_epoch - 1) * delta))
            for lr in _lrs(self.optimizer)
        ]

    def _get_closed_form_lr(self) -> list[Any]:
        _closed_form_iters("LinearLR", self.total_iters)
        return [
            base
            * (
                self.start_factor
                + (self.end_factor - self.start_factor) * min(self.total_iters, self.last_epoch) / self.total_iters
            )
            for base in self.base_lrs
        ]


class ExponentialLR(LRScheduler):
    """Multiply the rate by gamma every epoch (closed form: initial_lr * gamma ** epoch)."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        if self._is_initial:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list[Any]:
        return [base * self.gamma**self.last_epoch for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay the rate so that it follows initial_lr * (1 - epoch / total_iters) ** power to 0 at
    total_iters, then hold it."""

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        decay = (
            (1.0 - self.last_epoch / self.total_iters) / (1.0 - (self.last_epoch - 1) / self.total_iters)
        ) ** self.power
        return [lr * decay for lr in _lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list[Any]:
        _closed_form_iters("PolynomialLR", self.total_iters)
        return [
            base * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
            for base in self.base_lrs
        ]


class CosineAnnealingLR(LRScheduler):
    """Anneal the rate along a cosine from initial_lr to eta_min over T_max epochs (and back up over the
    next T_max: the cosine continues), each step from the current rate (SGDR without restarts)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        if T_max == 0:
            raise ArgumentError(
                "CosineAnnealingLR: T_max must not be 0 (it divides by T_max; torch raises "
                "ZeroDivisionError at the first step)"
            )
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        e, t_max, eta_min = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return _lrs(self.optimizer)
        if self._step_count == 1 and e > 0:
            return [eta_min + (base - eta_min) * (1 + math.cos(e * math.pi / t_max)) / 2 for base, _ in self._bases()]
        if (e - 1 - t_max) % (2 * t_max) == 0:  # the bottom of the cosine: the ratio below would be 0 / 0
            return [g["lr"] + (base - eta_min) * (1 - math.cos(math.pi / t_max)) / 2 for base, g in self._bases()]
        return [
            (1 + math.cos(math.pi * e / t_max)) / (1 + math.cos(math.pi * (e - 1) / t_max)) * (lr - eta_min) + eta_min
            for lr in _lrs(self.optimizer)
        ]

    def _get_closed_form_lr(self) -> list[Any]:
        return [
            self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
            for base in self.base_lrs
        ]


class WarmupCosineLR(LRScheduler):
    """Linear warmup from 0 to initial_lr over warmup_steps, then cosine decay to
    min_lr_ratio * initial_lr at total_steps (held there afterwards); each rate from initial_lr."""

    def __init__(
        self, optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0, last_epoch: int = -1
    ):
        if total_steps <= warmup_steps:
            raise ArgumentError(
                f"WarmupCosineLR: total_steps ({total_steps}) must exceed warmup_steps ({warmup_steps})"
            )
        self.warmup_steps, self.total_steps, self.min_lr_ratio = warmup_steps, total_steps, min_lr_ratio
        super().__init__(optimizer, last_epoch)

    def factor(self, step: int) -> float:
        """The multiple of initial_lr at `step`."""
        if step < self.warmup_steps:
            return step / max(1, self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    def get_lr(self) -> list[Any]:
        return [base * self.factor(self.last_epoch) for base in self.base_lrs]


def get_cosine_schedule_with_warmup(
    optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int, last_epoch: int = -1
) -> WarmupCosineLR:
    """The Hugging Face name for WarmupCosineLR (decaying to zero)."""
    return WarmupCosineLR(optimizer, num_warmup_steps, num_training_steps, 0.0, last_epoch)


def _check_schedulers(name: str, optimizer: Optimizer, schedulers: Sequence[Any]) -> None:
    if len(schedulers) < 1:
        raise ArgumentError(f"{name} expects at least one scheduler, got none")
    for i, s in enumerate(schedulers):
        if not hasattr(s, "optimizer"):
            raise ArgumentTypeError(f"{name}: the scheduler at index {i} ({type(s).__name__}) has no optimizer")
        if isinstance(s, ReduceLROnPlateau):
            raise ArgumentError(
                f"{name} does not support ReduceLROnPlateau (its step() takes a metric), got one at index {i}"
            )
        if s.optimizer is not optimizer:
            raise ArgumentError(
                f"{name} expects all schedulers to step the same optimizer; the {type(s).__name__} "
                f"at index {i} steps another one"
            )


class _Composite(LRScheduler):
    """SequentialLR's and ChainedScheduler's state: their own attributes, and each scheduler's state."""

    _schedulers: list[Any]

    def state_dict(self) -> dict[str, Any]:
        """The attributes, with `_schedulers` as each scheduler's state_dict()."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the attributes and each scheduler's state."""
        state = dict(state_dict)
        saved = state.pop("_schedulers")
        self.__dict__.update(state)
        for s, sd in zip(self._schedulers, saved):
            s.load_state_dict(sd)


class SequentialLR(_Composite):
    """schedulers[i] from milestones[i - 1] on: at its milestone a scheduler starts from the closed form
    of its epoch 0, then steps as it would alone (the warmup-then-decay idiom:
    SequentialLR(opt, [LinearLR(...), CosineAnnealingLR(...)], [warmup]))."""

    def __init__(
        self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int], last_epoch: int = -1
    ):
        _check_schedulers("SequentialLR", optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ArgumentError(
                f"SequentialLR: expected {len(schedulers) - 1} milestones for {len(schedulers)} "
                f"schedulers, got {len(milestones)}"
            )
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            set_group_value(g, "lr", g["initial_lr"])
        self.recursive_undo()  # the schedulers each took their construction step
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = self._schedulers[idx].get_last_lr()

    def recursive_undo(self, sched: Any = None) -> None:
        """Take back the construction step of every scheduler inside (one level of last_epoch)."""
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self.recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        """Advance one epoch: the scheduler of this epoch steps (or, at its milestone, starts)."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Composite):
    """Step several schedulers of one optimizer together, in order, each from the rate the one before
    set (torch.optim.lr_scheduler.ChainedScheduler)."""

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Optimizer | None = None):
        if len(schedulers) < 1:
            raise ArgumentError("ChainedScheduler expects at least one scheduler to chain, got none")
        optimizer = optimizer or schedulers[0].optimizer
        _check_schedulers("ChainedScheduler", optimizer, schedulers)
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._last_lr = _lrs(self._schedulers[-1].optimizer)

    def step(self) -> None:  # type: ignore[override]
        """Step every scheduler, in order."""
        for s in self._schedulers:
            s.step()
        self._last_lr = _lrs(self._schedulers[-1].optimizer)


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from initial_lr to eta_min over T_0 epochs, then again over T_0 * T_mult, ...
    (SGDR, Loshchilov and Hutter), restarting at initial_lr each time; step(epoch) takes fractional
    epochs (step(epoch + i / iters) per batch)."""

    def __init__(
        self,
        optimizer: Optimizer,
        T_0: int,
        T_mult: int = 1,
        eta_min: float = 0.0,  # noqa: N803
        last_epoch: int = -1,
    ):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ArgumentError(f"CosineAnnealingWarmRestarts: T_0 must be a positive int, got {T_0!r}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ArgumentError(f"CosineAnnealingWarmRestarts: T_mult must be an int >= 1, got {T_mult!r}")
        if not isinstance(eta_min, (float, int)):
            raise ArgumentError(f"CosineAnnealingWarmRestarts: eta_min must be a float or int, got {eta_min!r}")
        self.T_0, self.T_i, self.T_mult, self.eta_min, self.T_cur = T_0, T_0, T_mult, eta_min, last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        return [
            self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
            for base in self.base_lrs
        ]

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch, or go to `epoch` (a float for a fraction of one), and write the rates."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur, self.T_i = self.T_cur % self.T_i, self.T_i * self.T_mult
        elif epoch < 0:
            raise ArgumentError(f"CosineAnnealingWarmRestarts.step: epoch must be non-negative, got {epoch}")
        elif epoch >= self.T_0:
            if self.T_mult == 1:
                self.T_cur = epoch % self.T_0
            else:
                n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                self.T_cur = epoch - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
                self.T_i = self.T_0 * self.T_mult ** (n)
        else:
            self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        self._write(self.get_lr())
