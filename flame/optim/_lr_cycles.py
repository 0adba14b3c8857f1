"""OneCycleLR, CyclicLR and ReduceLROnPlateau (flame.optim.lr_scheduler's names): the schedulers that
cycle the momentum with the rate, and the one that follows a metric."""

from __future__ import annotations

import math
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from flame.errors import ArgumentError
from flame.optim._lr_base import EPOCH_DEPRECATION_WARNING, LRScheduler, _lrs, _per_group, not_traced, set_group_value
from flame.optim.optimizer import Optimizer


def _set_momentum(group: dict, use_beta1: bool, value: float) -> None:
    """Cycle the momentum: beta1 of an Adam-like optimizer, else SGD's momentum."""
    if use_beta1:
        group["betas"] = (value, *group["betas"][1:])
    else:
        group["momentum"] = value


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith): lr rises from max_lr / div_factor to max_lr over pct_start of
    total_steps, then anneals to max_lr / div_factor / final_div_factor (three_phase: back to the
    initial lr first, then down); with cycle_momentum, momentum (SGD) or beta1 (Adam) moves the other
    way between max_momentum and base_momentum. Cosine or linear annealing; each rate from the group's
    initial_lr, max_lr and min_lr."""

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | Sequence[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.85,
        max_momentum: float | Sequence[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ):
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
            raise ArgumentError(f"OneCycleLR: tried to step {step} times, more than total_steps = {self.total_steps}")
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
        return [
            up,
            phase(float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
            phase(total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
        ]
    return [up, phase(total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]


def _momentum_kind(name: str, optimizer: Optimizer) -> bool:
    """True to cycle beta1 (Adam-like), False for SGD's momentum; an optimizer with neither raises."""
    if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
        raise ArgumentError(
            f"{name}: optimizer must support momentum or beta1 with cycle_momentum enabled "
            f"({type(optimizer).__name__} has neither; pass cycle_momentum=False)"
        )
    return "betas" in optimizer.defaults


class CyclicLR(LRScheduler):
    """The cyclical learning rate (Smith): lr goes from base_lr up to max_lr over step_size_up steps
    and back over step_size_down (default: the same), the amplitude scaled by mode "triangular" (1),
    "triangular2" (halved every cycle) or "exp_range" (gamma ** step), or by scale_fn(cycle or step,
    per scale_mode); with cycle_momentum, momentum (SGD) or beta1 (Adam) moves the other way between
    max_momentum and base_momentum. Step it after every batch."""

    def __init__(
        self,
        optimizer: Optimizer,
        base_lr: float | Sequence[float],
        max_lr: float | Sequence[float],
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn: Callable[[float], float] | None = None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.8,
        max_momentum: float | Sequence[float] = 0.9,
        last_epoch: int = -1,
    ):
        self.optimizer = optimizer
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for g, lr in zip(optimizer.param_groups, base_lrs):
                set_group_value(g, "lr", lr)
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ArgumentError(
                f"CyclicLR: mode {mode!r} is none of 'triangular', 'triangular2', 'exp_range' and there is no scale_fn"
            )
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

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float | Sequence[float] = 0.0,
        eps: float = 1e-8,
    ):
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
        not_traced(self)
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
                raise ArgumentError(
                    f"ReduceLROnPlateau: the optimizer has {len(groups)} param_groups, min_lr was "
                    f"given for {len(self.min_lrs)} (a group added since); set the scheduler's "
                    f"min_lrs to one value per group"
                )
            self.min_lrs = [self.default_min_lr] * len(groups)
        for g, low in zip(groups, self.min_lrs):
            old = float(g["lr"])
            new = max(old * self.factor, low)
            if old - new > self.eps:
                set_group_value(g, "lr", new)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved attributes."""
        self.__dict__.update(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)
