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

from __future__ import annotations

import math
import types
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from flame.errors import ArgumentError, ArgumentTypeError, CheckpointError
from flame.optim.optimizer import Optimizer

__all__ = ["ChainedScheduler", "ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR",
           "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR", "MultiplicativeLR", "OneCycleLR",
           "PolynomialLR", "ReduceLROnPlateau", "SequentialLR", "StepLR", "WarmupCosineLR",
           "get_cosine_schedule_with_warmup"]

EPOCH_DEPRECATION_WARNING = (
    "scheduler.step(epoch) is deprecated, as in PyTorch: call scheduler.step() without an epoch. Given an "
    "epoch, the scheduler jumps to it with its closed form where it has one, instead of the chainable form.")


def _lrs(optimizer: Optimizer) -> list[Any]:
    """Each group's current learning rate."""
    return [g["lr"] for g in optimizer.param_groups]


def _per_group(name: str, optimizer: Optimizer, value: Any) -> list[Any]:
    """One value per param group: a list or tuple as given (of the groups' length), else repeated."""
    groups = optimizer.param_groups
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ArgumentError(f"{name} must have one value per param group: {name} has {len(value)} values, "
                                f"the optimizer {len(groups)} param_groups")
        return list(value)
    return [value] * len(groups)


def _set_momentum(group: dict, use_beta1: bool, value: float) -> None:
    """Cycle the momentum: beta1 of an Adam-like optimizer, else SGD's momentum."""
    if use_beta1:
        group["betas"] = (value, *group["betas"][1:])
    else:
        group["momentum"] = value


class LRScheduler:
    """Base class. Construction records each group's `initial_lr` (kept if the group has one) and
    takes the first step (epoch 0, or last_epoch + 1 when resuming); `step()` advances one epoch (or
    batch) and writes each group's learning rate from the subclass's `get_lr()`."""

    _is_initial: bool = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise CheckpointError(
                        f"{type(self).__name__}(last_epoch={last_epoch}): param 'initial_lr' is not specified in "
                        f"param_groups[{i}]; resuming a scheduler needs the optimizer's state loaded first (it "
                        f"holds initial_lr); a fresh run leaves last_epoch at -1")
        self.base_lrs: list[Any] = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """Reset the step count and take the construction step (in it, the chainable forms keep the
        rate the group holds)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[Any]:
        """The rates of the step being taken (step() calls it after advancing last_epoch); to read the
        current rates, use get_last_lr()."""
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or batch) and write each group's learning rate; step(epoch) (deprecated,
        as in torch) sets last_epoch to epoch and uses the closed form where the scheduler has one."""
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        self._write(values)

    def _write(self, values: Sequence[Any]) -> None:
        groups = self.optimizer.param_groups
        if len(values) != len(groups):
            raise ArgumentError(f"{type(self).__name__}.step(): the optimizer has {len(groups)} param_groups, the "
                                f"scheduler computed {len(values)} rates (a group added after the scheduler was "
                                f"made has no schedule; make the scheduler after adding the group)")
        for g, lr in zip(groups, values):
            g["lr"] = lr
        self._last_lr = _lrs(self.optimizer)

    def _bases(self) -> list[tuple[Any, dict]]:
        """(initial lr, group) pairs; a group added after the scheduler was made has no initial lr."""
        groups = self.optimizer.param_groups
        if len(self.base_lrs) != len(groups):
            self._write([None] * len(self.base_lrs))  # raises, naming both counts
        return list(zip(self.base_lrs, groups))

    def get_last_lr(self) -> list[Any]:
        """The learning rates the last step() wrote."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer (torch's layout)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved attributes (the groups' rates are the optimizer's state, not the scheduler's)."""
        self.__dict__.update(state_dict)


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
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
                               for fn in self.lr_lambdas]
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

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
                 last_epoch: int = -1):
        super().__init__(optimizer, lr_lambda, last_epoch)

    def get_lr(self) -> list[Any]:
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(_LambdaScheduler):
    """lr = the current lr * lr_lambda(epoch) at each step after the first (one function or one per
    group)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
                 last_epoch: int = -1):
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
            raise ArgumentError(f"ConstantLR(factor=0).step() at total_iters={self.total_iters}: the rate is "
                                f"restored by dividing the current one by factor (as torch, which raises "
                                f"ZeroDivisionError here); use LambdaLR(lambda e: 0.0 if e < {self.total_iters} "
                                f"else 1.0)")
        return [lr * (1.0 / self.factor) for lr in _lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list[Any]:
        return [base * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for base in self.base_lrs]


def _closed_form_iters(name: str, total_iters: int) -> None:
    if total_iters == 0:
        raise ArgumentError(f"{name}(total_iters=0) has no closed form (it divides by total_iters, as torch's, "
                            f"which raises ZeroDivisionError): step it without an epoch")


class LinearLR(LRScheduler):
    """Multiply the rate by start_factor at epoch 0, then scale it so that it moves linearly to
    initial_lr * end_factor at total_iters, and hold it (a warmup with start_factor below 1)."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
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
        return [lr * (1.0 + delta / (self.total_iters * self.start_factor + (self.last_epoch - 1) * delta))
                for lr in _lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list[Any]:
        _closed_form_iters("LinearLR", self.total_iters)
        return [base * (self.start_factor + (self.end_factor - self.start_factor)
                        * min(self.total_iters, self.last_epoch) / self.total_iters) for base in self.base_lrs]


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
        decay = ((1.0 - self.last_epoch / self.total_iters) / (1.0 - (self.last_epoch - 1) / self.total_iters)
                 ) ** self.power
        return [lr * decay for lr in _lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list[Any]:
        _closed_form_iters("PolynomialLR", self.total_iters)
        return [base * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
                for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Anneal the rate along a cosine from initial_lr to eta_min over T_max epochs (and back up over the
    next T_max: the cosine continues), each step from the current rate (SGDR without restarts)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        if T_max == 0:
            raise ArgumentError("CosineAnnealingLR: T_max must not be 0 (it divides by T_max; torch raises "
                                "ZeroDivisionError at the first step)")
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
        return [(1 + math.cos(math.pi * e / t_max)) / (1 + math.cos(math.pi * (e - 1) / t_max)) * (lr - eta_min)
                + eta_min for lr in _lrs(self.optimizer)]

    def _get_closed_form_lr(self) -> list[Any]:
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


class WarmupCosineLR(LRScheduler):
    """Linear warmup from 0 to initial_lr over warmup_steps, then cosine decay to
    min_lr_ratio * initial_lr at total_steps (held there afterwards); each rate from initial_lr."""

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0,
                 last_epoch: int = -1):
        if total_steps <= warmup_steps:
            raise ArgumentError(f"WarmupCosineLR: total_steps ({total_steps}) must exceed warmup_steps "
                                f"({warmup_steps})")
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


def get_cosine_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int,
                                    last_epoch: int = -1) -> WarmupCosineLR:
    """The Hugging Face name for WarmupCosineLR (decaying to zero)."""
    return WarmupCosineLR(optimizer, num_warmup_steps, num_training_steps, 0.0, last_epoch)


def _check_schedulers(name: str, optimizer: Optimizer, schedulers: Sequence[Any]) -> None:
    if len(schedulers) < 1:
        raise ArgumentError(f"{name} expects at least one scheduler, got none")
    for i, s in enumerate(schedulers):
        if not hasattr(s, "optimizer"):
            raise ArgumentTypeError(f"{name}: the scheduler at index {i} ({type(s).__name__}) has no optimizer")
        if isinstance(s, ReduceLROnPlateau):
            raise ArgumentError(f"{name} does not support ReduceLROnPlateau (its step() takes a metric), got one at "
                                f"index {i}")
        if s.optimizer is not optimizer:
            raise ArgumentError(f"{name} expects all schedulers to step the same optimizer; the {type(s).__name__} "
                                f"at index {i} steps another one")


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

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1):
        _check_schedulers("SequentialLR", optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ArgumentError(f"SequentialLR: expected {len(schedulers) - 1} milestones for {len(schedulers)} "
                                f"schedulers, got {len(milestones)}")
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
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

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ArgumentError(f"CosineAnnealingWarmRestarts: T_0 must be a positive int, got {T_0!r}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ArgumentError(f"CosineAnnealingWarmRestarts: T_mult must be an int >= 1, got {T_mult!r}")
        if not isinstance(eta_min, (float, int)):
            raise ArgumentError(f"CosineAnnealingWarmRestarts: eta_min must be a float or int, got {eta_min!r}")
        self.T_0, self.T_i, self.T_mult, self.eta_min, self.T_cur = T_0, T_0, T_mult, eta_min, last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[Any]:
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base in self.base_lrs]

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



class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith): lr rises from max_lr / div_factor to max_lr over pct_start of
    total_steps, then anneals to max_lr / div_factor / final_div_factor (three_phase: back to the
    initial lr first, then down); with cycle_momentum, momentum (SGD) or beta1 (Adam) moves the other
    way between max_momentum and base_momentum. Cosine or linear annealing; each rate from the group's
    initial_lr, max_lr and min_lr."""

    def __init__(self, optimizer: Optimizer, max_lr: float | Sequence[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True,
                 base_momentum: float | Sequence[float] = 0.85, max_momentum: float | Sequence[float] = 0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1):
        self.optimizer = optimizer
        self.total_steps = _total_steps(total_steps, epochs, steps_per_epoch)
        self._schedule_phases = _phases(pct_start, self.total_steps, three_phase)
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ArgumentError(f"OneCycleLR: pct_start must be a float in [0, 1], got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ArgumentError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self._anneal_func_type = anneal_strategy
        max_lrs = _per_group("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for g, top in zip(optimizer.param_groups, max_lrs):
                g["initial_lr"], g["max_lr"] = top / div_factor, top
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _momentum_kind("OneCycleLR", optimizer)
            tops = _per_group("max_momentum", optimizer, max_momentum)
            lows = _per_group("base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for g, top, low in zip(optimizer.param_groups, tops, lows):
                    _set_momentum(g, self.use_beta1, top)
                    g["max_momentum"], g["base_momentum"] = top, low
        super().__init__(optimizer, last_epoch)

    def _anneal_func(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[Any]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ArgumentError(f"OneCycleLR: tried to step {step} times, more than total_steps = "
                                f"{self.total_steps}")
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end = phase["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal_func(g[phase["start_lr"]], g[phase["end_lr"]], pct))
                    if self.cycle_momentum:
                        momentum = self._anneal_func(g[phase["start_momentum"]], g[phase["end_momentum"]], pct)
                        _set_momentum(g, self.use_beta1, momentum)
                    break
                start = phase["end_step"]
        return lrs


def _total_steps(total_steps: int | None, epochs: int | None, steps_per_epoch: int | None) -> int:
    """OneCycleLR's total_steps, given or epochs * steps_per_epoch."""
    if total_steps is not None:
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise ArgumentError(f"OneCycleLR: total_steps must be a positive int, got {total_steps!r}")
        return total_steps
    if epochs is None or steps_per_epoch is None:
        raise ArgumentError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
    for name, v in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
        if not isinstance(v, int) or v <= 0:
            raise ArgumentError(f"OneCycleLR: {name} must be a positive int, got {v!r}")
    return epochs * steps_per_epoch


def _phases(pct_start: float, total_steps: int, three_phase: bool) -> list[dict[str, Any]]:
    """OneCycleLR's phases: the step each ends at, and the group keys of its start and end values."""
    def phase(end: float, lr0: str, lr1: str, m0: str, m1: str) -> dict[str, Any]:
        return {"end_step": end, "start_lr": lr0, "end_lr": lr1, "start_momentum": m0, "end_momentum": m1}

    up = phase(float(pct_start * total_steps) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum")
    if three_phase:
        return [up, phase(float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum",
                          "max_momentum"),
                phase(total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
    return [up, phase(total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]


def _momentum_kind(name: str, optimizer: Optimizer) -> bool:
    """True to cycle beta1 (Adam-like), False for SGD's momentum; an optimizer with neither raises."""
    if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
        raise ArgumentError(f"{name}: optimizer must support momentum or beta1 with cycle_momentum enabled "
                            f"({type(optimizer).__name__} has neither; pass cycle_momentum=False)")
    return "betas" in optimizer.defaults


class CyclicLR(LRScheduler):
    """The cyclical learning rate (Smith): lr goes from base_lr up to max_lr over step_size_up steps
    and back over step_size_down (default: the same), the amplitude scaled by mode "triangular" (1),
    "triangular2" (halved every cycle) or "exp_range" (gamma ** step), or by scale_fn(cycle or step,
    per scale_mode); with cycle_momentum, momentum (SGD) or beta1 (Adam) moves the other way between
    max_momentum and base_momentum. Step it after every batch."""

    def __init__(self, optimizer: Optimizer, base_lr: float | Sequence[float], max_lr: float | Sequence[float],
                 step_size_up: int = 2000, step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None, scale_mode: str = "cycle",
                 cycle_momentum: bool = True, base_momentum: float | Sequence[float] = 0.8,
                 max_momentum: float | Sequence[float] = 0.9, last_epoch: int = -1):
        self.optimizer = optimizer
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for g, lr in zip(optimizer.param_groups, base_lrs):
                g["lr"] = lr
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ArgumentError(f"CyclicLR: mode {mode!r} is none of 'triangular', 'triangular2', 'exp_range' and "
                                f"there is no scale_fn")
        self.mode, self.gamma, self._scale_fn_custom = mode, gamma, scale_fn
        self.scale_mode = scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _momentum_kind("CyclicLR", optimizer)
            self.base_momentums = _per_group("base_momentum", optimizer, base_momentum)
            self.max_momentums = _per_group("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for g, top, low in zip(optimizer.param_groups, self.max_momentums, self.base_momentums):
                    _set_momentum(g, self.use_beta1, top)
                    g["max_momentum"], g["base_momentum"] = top, low
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        if self._scale_fn_custom is None:
            self.scale_mode = "iterations" if self.mode == "exp_range" else "cycle"

    def scale_fn(self, x: float) -> float:
        """The amplitude's scale at cycle or iteration x."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma**x

    def get_lr(self) -> list[Any]:
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (top - base) * factor * scale for base, top in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for g, low, top in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                _set_momentum(g, self.use_beta1, top - (top - low) * factor * scale)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        """The attributes, with a custom scale_fn as its __dict__ when it is a callable object (None for a
        function)."""
        state = super().state_dict()
        fn = state.pop("_scale_fn_custom")
        state["_scale_fn_custom"] = None if fn is None or isinstance(fn, types.FunctionType) else fn.__dict__.copy()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the attributes, keeping this scheduler's own scale_fn (given its saved __dict__)."""
        state = dict(state_dict)
        fn = state.pop("_scale_fn_custom")
        super().load_state_dict(state)
        if fn is not None:
            self._scale_fn_custom.__dict__.update(fn)
        self._init_scale_fn()


class ReduceLROnPlateau(LRScheduler):
    """Multiply the learning rates by factor when a metric stopped improving for patience epochs
    (mode "min": lower is better): step(metric) once per epoch; threshold (relative or absolute) says
    what counts as better; cooldown epochs pass after a reduction before counting again; rates never
    go below min_lr (one or one per group), and a change smaller than eps is not made."""

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: float | Sequence[float] = 0.0, eps: float = 1e-8):
        if factor >= 1.0:
            raise ArgumentError(f"ReduceLROnPlateau: factor must be < 1.0, got {factor}")
        self.factor, self.optimizer = factor, optimizer
        if isinstance(min_lr, (list, tuple)):
            self.default_min_lr, self.min_lrs = None, _per_group("min_lr", optimizer, min_lr)
        else:
            self.default_min_lr, self.min_lrs = min_lr, [min_lr] * len(optimizer.param_groups)
        self.patience, self.cooldown, self.eps, self.last_epoch = patience, cooldown, eps, 0
        self._last_lr = _lrs(optimizer)
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best, self.cooldown_counter, self.num_bad_epochs = self.mode_worse, 0, 0

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in ("min", "max"):
            raise ArgumentError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ArgumentError(f"ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    @property
    def in_cooldown(self) -> bool:
        """Whether a reduction happened less than cooldown epochs ago."""
        return self.cooldown_counter > 0

    def is_better(self, a: float, best: float) -> bool:
        """Whether metric a improves on best by more than the threshold."""
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == "rel" else best + self.threshold)

    def step(self, metrics: float, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record the epoch's metric; reduce the rates after patience epochs without improvement."""
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = _lrs(self.optimizer)

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise ArgumentError(f"ReduceLROnPlateau: the optimizer has {len(groups)} param_groups, min_lr was "
                                    f"given for {len(self.min_lrs)} (a group added since); set the scheduler's "
                                    f"min_lrs to one value per group")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for g, low in zip(groups, self.min_lrs):
            old = float(g["lr"])
            new = max(old * self.factor, low)
            if old - new > self.eps:
                g["lr"] = new

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved attributes."""
        self.__dict__.update(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)
