"""The base of flame.optim.lr_scheduler: LRScheduler (torch's construction step, step(), step(epoch)
with a closed form, get_last_lr, state_dict) and the helpers the schedulers share."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from flame.errors import ArgumentError, CheckpointError, TraceError
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.tensor import Tensor
from flame.optim.optimizer import Optimizer

SCHEDULER_BEFORE_OPTIMIZER_WARNING = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. As in PyTorch, call them in the opposite "
    "order: `optimizer.step()` before `lr_scheduler.step()`; otherwise the first value of the learning rate "
    "schedule is skipped."
)
EPOCH_DEPRECATION_WARNING = (
    "scheduler.step(epoch) is deprecated, as in PyTorch: call scheduler.step() without an epoch. Given an "
    "epoch, the scheduler jumps to it with its closed form where it has one, instead of the chainable form."
)


def not_traced(scheduler: Any) -> None:
    """Raise a TraceError where a scheduler steps inside @flame.compile: the body runs only when traced,
    so the schedule would advance once (and the traced call's update read the rate after the step),
    not at every call as in torch."""
    if current_trace.get() is not None:
        raise TraceError(
            f"{type(scheduler).__name__}.step() inside @flame.compile: a compiled function runs its Python "
            f"only when it is traced, so the schedule would advance once, not at every call; call "
            f"scheduler.step() outside the compiled step, after it (the rate is read at every call)"
            f"\n  at {user_location()}"
        )


def _lrs(optimizer: Optimizer) -> list[Any]:
    """Each group's current learning rate (a copy of a rate held as a tensor, as torch's)."""
    return [g["lr"].clone() if isinstance(g["lr"], Tensor) else g["lr"] for g in optimizer.param_groups]


def set_group_value(group: dict, key: str, value: Any) -> None:
    """group[key] = value, as torch's schedulers write it: a tensor the group holds (lr=tensor(0.1)) is
    filled in place, so the tensor given to the optimizer (or read by a compiled step) holds the rate."""
    old = group[key]
    if isinstance(old, Tensor) and not old.is_traced:
        with no_grad():
            old.fill_(value.item() if isinstance(value, Tensor) else value)
    else:
        group[key] = value


def _per_group(name: str, optimizer: Optimizer, value: Any) -> list[Any]:
    """One value per param group: a list or tuple as given (of the groups' length), else repeated."""
    groups = optimizer.param_groups
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ArgumentError(
                f"{name} must have one value per param group: {name} has {len(value)} values, "
                f"the optimizer {len(groups)} param_groups"
            )
        return list(value)
    return [value] * len(groups)


class LRScheduler:
    """Base class. Construction records each group's `initial_lr` (kept if the group has one) and
    takes the first step (epoch 0, or last_epoch + 1 when resuming); `step()` advances one epoch (or
    batch) and writes each group's learning rate from the subclass's `get_lr()`."""

    _is_initial: bool = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:  # a copy of a rate held as a tensor (filled in place later)
                g.setdefault("initial_lr", g["lr"].clone() if isinstance(g["lr"], Tensor) else g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise CheckpointError(
                        f"{type(self).__name__}(last_epoch={last_epoch}): param 'initial_lr' is not specified in "
                        f"param_groups[{i}]; resuming a scheduler needs the optimizer's state loaded first (it "
                        f"holds initial_lr); a fresh run leaves last_epoch at -1"
                    )
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
        if self._step_count == 1 and not getattr(self.optimizer, "_opt_called", False):
            warnings.warn(SCHEDULER_BEFORE_OPTIMIZER_WARNING, UserWarning, stacklevel=2)
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
        not_traced(self)
        groups = self.optimizer.param_groups
        if len(values) != len(groups):
            raise ArgumentError(
                f"{type(self).__name__}.step(): the optimizer has {len(groups)} param_groups, the "
                f"scheduler computed {len(values)} rates (a group added after the scheduler was "
                f"made has no schedule; make the scheduler after adding the group)"
            )
        for g, lr in zip(groups, values):
            set_group_value(g, "lr", lr)
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
