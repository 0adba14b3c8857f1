"""Stochastic weight averaging and exponential moving averages of a model's weights, as
torch.optim.swa_utils: AveragedModel, the averaging functions (get_swa_avg_fn, get_ema_avg_fn and
their multi-tensor forms), the SWALR schedule and update_bn.

AveragedModel.update_parameters works eagerly and inside a @flame.compile'd training step (how
diffusion training keeps its EMA weights): the averaged parameters, buffers and the n_averaged count
are written with `copy_`, so a trace lifts them to inputs and writes their new values back (aliased
outputs, ARCHITECTURE.md "Pure IR"), as an optimizer's state. Eagerly the first update copies the
model's weights, as torch's; a trace cannot branch on n_averaged, so it computes the average and
picks the model's weights where n_averaged is 0 (`where`), which gives the same values."""

from __future__ import annotations

import copy
import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from flame.frontend.context import current_trace, no_grad
from flame.frontend.creation import tensor
from flame.frontend.ops import where
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import i64
from flame.nn.batchnorm import _BatchNorm
from flame.nn.module import Module
from flame.optim._lr_base import LRScheduler, _per_group
from flame.optim.optimizer import Optimizer

__all__ = [
    "SWALR",
    "AveragedModel",
    "get_ema_avg_fn",
    "get_ema_multi_avg_fn",
    "get_swa_avg_fn",
    "get_swa_multi_avg_fn",
    "update_bn",
]


def _check_decay(decay: float) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")


def get_ema_multi_avg_fn(decay: float = 0.999) -> Callable[[Sequence[Tensor], Sequence[Tensor], Any], None]:
    """The in-place EMA update of lists of tensors: ema = decay * ema + (1 - decay) * model (a lerp
    towards the model's value by 1 - decay, for floating tensors, as torch's foreach lerp)."""
    _check_decay(decay)

    def ema_update(ema_param_list: Sequence[Tensor], current_param_list: Sequence[Tensor], _) -> None:
        with no_grad():
            if ema_param_list[0].dtype.is_float:
                for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                    p_ema.lerp_(p_model, 1 - decay)
            else:
                for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                    p_ema.copy_(p_ema * decay + p_model * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn() -> Callable[[Sequence[Tensor], Sequence[Tensor], Any], None]:
    """The in-place equal-weight average of lists of tensors: avg += (model - avg) / (n + 1), after
    n models were averaged (a lerp by 1 / (n + 1) for floating tensors, as torch's foreach lerp)."""

    def swa_update(
        averaged_param_list: Sequence[Tensor], current_param_list: Sequence[Tensor], num_averaged: Tensor | int
    ) -> None:
        with no_grad():
            if averaged_param_list[0].dtype.is_float:
                weight = 1 / (num_averaged + 1)  # a count tensor's: in the default float dtype, as torch's
                for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                    p_avg.lerp_(p_model, weight)
                return
            if isinstance(num_averaged, Tensor):
                raise RuntimeError(
                    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
                    "will perform a true division of tensor1 and tensor2. (get_swa_multi_avg_fn averages "
                    "integer tensors, such as BatchNorm's num_batches_tracked, only with an int num_averaged; "
                    "AveragedModel's default averaging handles them)"
                )
            for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                p_avg.copy_(p_avg + (p_model - p_avg) * (1.0 / (num_averaged + 1)))

    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> Callable[[Tensor, Tensor, Any], Tensor]:
    """The EMA of one tensor, returned: decay * ema + (1 - decay) * model."""
    _check_decay(decay)

    def ema_update(ema_param: Tensor, current_param: Tensor, num_averaged) -> Tensor:
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn() -> Callable[[Tensor, Tensor, Any], Tensor]:
    """The equal-weight average of one tensor, returned: avg + (model - avg) / (n + 1)."""

    def swa_update(averaged_param: Tensor, current_param: Tensor, num_averaged: Tensor | int) -> Tensor:
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


class AveragedModel(Module):
    """A deep copy of `model` (`self.module`) whose parameters (and, with use_buffers=True, buffers)
    hold a running average of the model's: update_parameters(model) copies the model's weights the
    first time and then averages them in with `avg_fn(averaged, current, n_averaged)` (returns the new
    value), or `multi_avg_fn(averaged_list, current_list, n_averaged)` (updates in place, called once
    per dtype), or by default the equal-weight (SWA) average. Without use_buffers the copy's buffers
    follow the model's. forward runs the copy; state_dict holds `n_averaged` and `module.*`, as torch's."""

    def __init__(
        self,
        model: Module,
        device: Any = None,
        avg_fn: Callable[[Tensor, Tensor, Tensor | int], Tensor] | None = None,
        multi_avg_fn: Callable[[Sequence[Tensor], Sequence[Tensor], Tensor | int], None] | None = None,
        use_buffers: bool = False,
    ) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype=i64))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The averaged copy's forward."""
        return self.module(*args, **kwargs)

    def update_parameters(self, model: Module) -> None:
        """Average `model`'s current weights into this copy and count them in n_averaged."""
        if self.use_buffers:
            mine = list(itertools.chain(self.module.parameters(), self.module.buffers()))
            theirs = list(itertools.chain(model.parameters(), model.buffers()))
        else:
            mine, theirs = list(self.parameters()), list(model.parameters())
        mine, theirs = mine[: len(theirs)], theirs[: len(mine)]  # zip's pairs, as torch's
        with no_grad():
            theirs = [p.detach() for p in theirs]
            if current_trace.get() is not None:
                self._update_traced(mine, theirs)
            else:
                first = self.n_averaged.item() == 0
                if first:
                    for p_avg, p_model in zip(mine, theirs):
                        p_avg.copy_(p_model)
                else:
                    self._average(mine, theirs)
            if not self.use_buffers:  # the copy's buffers follow the model's
                for b_avg, b_model in zip(self.module.buffers(), model.buffers(), strict=True):
                    b_avg.copy_(b_model.detach())
            self.n_averaged.add_(1)

    def _update_traced(self, mine: list[Tensor], theirs: list[Tensor]) -> None:
        """Inside a trace: average, then take the model's weights where nothing was averaged yet (a
        replayed step cannot branch on n_averaged in Python)."""
        first = self.n_averaged == 0
        self._average(mine, theirs)
        for p_avg, p_model in zip(mine, theirs):
            p_avg.copy_(where(first, p_model.to(p_avg.dtype), p_avg))

    def _average(self, mine: list[Tensor], theirs: list[Tensor]) -> None:
        """One averaging step of every pair: avg_fn per tensor, or multi_avg_fn once per dtype (as
        torch's groups the tensors by device and dtype), or by default get_swa_avg_fn per tensor."""
        if self.avg_fn is not None and self.multi_avg_fn is None:
            for p_avg, p_model in zip(mine, theirs):
                p_avg.copy_(self.avg_fn(p_avg.detach(), p_model, self.n_averaged))
            return
        groups: dict[Any, tuple[list[Tensor], list[Tensor]]] = {}
        for p_avg, p_model in zip(mine, theirs):
            avgs, models = groups.setdefault(p_avg.dtype, ([], []))
            avgs.append(p_avg)
            models.append(p_model)
        for avgs, models in groups.values():
            if self.multi_avg_fn is not None:
                self.multi_avg_fn(avgs, models, self.n_averaged)
            else:  # torch's per-tensor form (its CPU path: 1 / (n + 1) in the tensors' dtype, not f32)
                for p_avg, p_model in zip(avgs, models):
                    p_avg.copy_(get_swa_avg_fn()(p_avg, p_model, self.n_averaged))


def update_bn(loader: Iterable[Any], model: Module, device: Any = None) -> None:
    """Recompute the running statistics of every BatchNorm layer of `model` with one pass over
    `loader` (each batch a tensor, or a list/tuple whose first item is the input): the statistics are
    reset and averaged over all batches (momentum None for the pass), in training mode; the layers'
    momenta and the model's mode are restored afterwards."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    with no_grad():
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            if device is not None:
                batch = batch.to(device)
            model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each group's learning rate to its `swa_lr` over `anneal_epochs` steps, with a cosine
    ("cos") or linear ("linear") curve, then holds it there, as torch's SWALR: each step continues
    from the rate the group holds, so it can take over from another schedule."""

    def __init__(
        self,
        optimizer: Optimizer,
        swa_lr: float | Sequence[float],
        anneal_epochs: int = 10,
        anneal_strategy: str = "cos",
        last_epoch: int = -1,
    ) -> None:
        for lr, group in zip(_per_group("swa_lr", optimizer, swa_lr), optimizer.param_groups, strict=True):
            group["swa_lr"] = lr
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        self._in_step = False
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t: float) -> float:
        return t

    @staticmethod
    def _cosine_anneal(t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def _set_anneal_func(self, anneal_strategy: str) -> None:
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def step(self, epoch: int | None = None) -> None:
        self._in_step = True
        try:
            super().step(epoch)
        finally:
            self._in_step = False

    def get_lr(self) -> list[Any]:
        """The rates of the step being taken: the rate the group would have had before annealing began
        (recovered from its current rate), moved towards swa_lr by this step's annealing fraction."""
        if not self._in_step:
            warnings.warn(
                "To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
                UserWarning,
                stacklevel=2,
            )
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        groups = self.optimizer.param_groups
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, prev_lrs, strict=True)]

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer and the annealing function (torch's layout)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func", "_in_step")}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved attributes and the annealing function they name."""
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
