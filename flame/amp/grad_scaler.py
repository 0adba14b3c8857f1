"""flame.amp.GradScaler: dynamic loss scaling for float16 training, with torch.amp.GradScaler's
interface and update rule.

The scale and the growth tracker are 0-d `state` tensors created with the scaler, so a compiled step
lifts them to graph inputs and writes them back like optimizer state. Every decision is a tensor op:
- unscale_: gradients are multiplied by 1/scale; found_inf is 1.0 when any gradient element is
  inf or NaN (`not |g| < inf`, built from comparisons, so NaN counts), else 0.0;
- step: eagerly, optimizer.step() runs only when found_inf is 0 (one host read, as PyTorch does).
  Inside @flame.compile the step is always traced and every parameter and optimizer state it changes
  becomes where(found_inf, old, new): a skipped step is a graph op, with no host synchronisation;
- update: scale *= backoff_factor on inf/NaN (tracker reset); when the count of clean steps in a row
  reaches growth_interval, scale *= growth_factor (kept when that would overflow), all with where().
  As torch's, the count must equal growth_interval: one already past it (the interval lowered by
  set_growth_interval, or a loaded state) grows no more until an inf/NaN resets the count.
Hyperparameters enter a trace as scalar inputs, so set_growth_factor() and friends never re-trace.
A compiled step may leave update() (or step() and update()) to the caller, as with torch.compile: the
found_inf of each optimizer is a 0-d state tensor the compiled step writes at every call, and the
scaler's bookkeeping the body leaves (which optimizers were unscaled or stepped) is set again before
each replay, so an eager update() after the call reads that call's check."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

from flame.errors import AssertedArgumentError, FlameError
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.creation import full
from flame.frontend.ops import maximum, where
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import DType, bf16, f16, f32, f64, i32


class _Stage(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _fresh_state() -> dict[str, Any]:
    return {"stage": _Stage.READY, "found_inf": None}


def _state_scalar(value: float | int, dtype: DType) -> Tensor:
    t = full((), value, dtype)
    t._role = "state"
    return t


def found_inf_of(grads: list[Tensor]) -> Tensor:
    """A 0-d f32 tensor: 1.0 when any element of any of `grads` is inf or NaN, else 0.0. Built from
    comparisons (NaN < inf is false), one reduction per gradient, no host read."""
    found = None
    for g in grads:
        bad = where(g.abs() < float("inf"), 0.0, 1.0).amax() if g.numel() else full((), 0.0, f32)
        bad = bad.to(f32)
        found = bad if found is None else maximum(found, bad)
    return found if found is not None else full((), 0.0, f32)


class GradScaler:
    """Scales the loss so float16 gradients do not underflow, unscales the gradients before the
    optimizer uses them, skips steps whose gradients overflowed and adapts the scale (PyTorch's
    torch.amp.GradScaler). device is accepted for compatibility; the scaler lives on flame's device."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if current_trace.get() is not None:
            raise FlameError("GradScaler: create the scaler before @flame.compile traces the step")
        if enabled:  # torch checks only these two, with assert, and only for an enabled scaler
            if growth_factor <= 1.0:
                raise AssertedArgumentError(f"The growth factor must be > 1.0. GradScaler: growth_factor="
                                            f"{growth_factor}\n  at {user_location()}")
            if backoff_factor >= 1.0:
                raise AssertedArgumentError(f"The backoff factor must be < 1.0. GradScaler: backoff_factor="
                                            f"{backoff_factor}\n  at {user_location()}")
        self.device, self._enabled = device, bool(enabled)
        self._init_scale, self._growth_factor = float(init_scale), float(growth_factor)
        self._backoff_factor, self._growth_interval = float(backoff_factor), int(growth_interval)
        self._per_optimizer_states: dict[int, dict[str, Any]] = {}
        self._scalars: tuple[object, dict] = (None, {})
        self._found_buffers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # optimizer -> found_inf
        self._replayed: object = None  # the trace that sets this scaler's bookkeeping again at each replay
        self._scaled = False  # torch makes its scale at the first scale() of a tensor; unscale_/step/update need it
        if self._enabled:
            self._scale = _state_scalar(self._init_scale, f32)
            self._growth_tracker = _state_scalar(0, i32)

    # ---- the training-loop API ------------------------------------------------------------------
    def scale(self, outputs):
        """outputs * scale: a tensor, or nested iterables of tensors (a list or tuple keeps its type, another
        iterable gives a lazy map, as torch's); outputs unchanged when disabled."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            self._scaled = True
            return outputs * self._scale
        if isinstance(outputs, Iterable):
            scaled = map(self.scale, outputs)
            return type(outputs)(scaled) if isinstance(outputs, (list, tuple)) else scaled
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer) -> None:
        """Divide the gradients of `optimizer`'s parameters by the scale, in place, and record whether
        any is inf or NaN. At most once per optimizer between update() calls (PyTorch's rule)."""
        if not self._enabled:
            return
        self._check_scaled("unscale_")
        st = self._opt_state(optimizer)
        if st["stage"] is _Stage.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if st["stage"] is _Stage.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if any(g.dtype == f16 for g in grads):
            raise ValueError("Attempting to unscale FP16 gradients.")
        if not grads:  # torch's per-device check dict stays empty: step() and update() then refuse
            st["found_inf"], st["stage"] = None, _Stage.UNSCALED
            return
        with no_grad():
            found = found_inf_of(grads)
            inv_scale = self._scale.double().reciprocal().float()  # 1/scale rounded once, as PyTorch
            for g in grads:  # a bf16 gradient times the f32 1/scale in f32, rounded once, as torch's kernel
                g.copy_((g.to(f32) * inv_scale).to(g.dtype)) if g.dtype == bf16 else g.mul_(inv_scale.to(g.dtype))
            trace = current_trace.get()
            if trace is not None:  # kept in the optimizer's state tensor: read after the call by an eager update()
                buffer = self._found_buffer(optimizer)
                buffer.copy_(found)
                found = buffer
                self._set_again_at_replays(trace)
        st["found_inf"], st["stage"] = found, _Stage.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """unscale_ (unless done already), then optimizer.step(*args, **kwargs) unless a gradient was
        inf or NaN. Eagerly that is a host-side choice (the step's result is returned, None when
        skipped); inside @flame.compile the update is selected on the device (see the module doc)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scaled("step")
        st = self._opt_state(optimizer)
        if st["stage"] is _Stage.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if st["stage"] is _Stage.READY:
            self.unscale_(optimizer)
        found = st["found_inf"]
        if found is None:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        st["stage"] = _Stage.STEPPED
        if current_trace.get() is not None:
            _step_unless(found, optimizer, args, kwargs)
            return None
        return optimizer.step(*args, **kwargs) if not found.item() else None

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Adapt the scale to the inf/NaN checks since the last update (or set it to new_scale)."""
        if not self._enabled:
            return
        self._check_scaled("update")
        if isinstance(new_scale, Tensor) and (new_scale.numel() != 1 or new_scale.requires_grad):
            raise AssertionError(f"new_scale should be a float or a 1-element FloatTensor with requires_grad=False; "
                                 f"update: new_scale has shape {tuple(new_scale.shape)} and requires_grad="
                                 f"{new_scale.requires_grad}\n  at {user_location()}")
        with no_grad():
            if new_scale is not None:
                self._scale.copy_(new_scale if isinstance(new_scale, Tensor) else full((), float(new_scale), f32))
            else:
                found = [s["found_inf"] for s in self._per_optimizer_states.values() if s["found_inf"] is not None]
                if not found:
                    raise AssertionError("No inf checks were recorded prior to update.")
                any_inf = found[0]
                for f in found[1:]:
                    any_inf = maximum(any_inf, f)
                self._update_scale(any_inf)
        self._per_optimizer_states = {}

    def _update_scale(self, found_inf: Tensor) -> None:
        """PyTorch's _amp_update_scale_, as tensor ops (no host read): the f32 scale times the f64 factor,
        rounded once to f32 (an f32 product of the rounded factor drifts from torch's scale)."""
        bad = found_inf > 0
        tracker = where(bad, 0, self._growth_tracker + 1)
        grow = tracker == self._hyper("growth_interval", i32)  # torch's test: never grows past it
        scale = self._scale.double()
        grown = (scale * self._hyper("growth_factor", f64)).float()
        grown = where(grown < float("inf"), grown, self._scale)  # never grow to inf
        backed_off = (scale * self._hyper("backoff_factor", f64)).float()
        self._scale.copy_(where(bad, backed_off, where(grow, grown, self._scale)))
        self._growth_tracker.copy_(where(grow, 0, tracker))

    # ---- queries and settings -------------------------------------------------------------------
    def get_scale(self) -> float:
        """The current scale as a Python float (reads the device; 1.0 when disabled)."""
        return float(self._scale.item()) if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict[str, Any]:
        """{'scale', 'growth_factor', 'backoff_factor', 'growth_interval', '_growth_tracker'} as
        PyTorch's (empty when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": int(self._growth_tracker.item())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state_dict in place (a compiled step keeps its bindings)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        with no_grad():
            self._scale.fill_(self._init_scale)
            self._growth_tracker.fill_(int(state_dict["_growth_tracker"]))

    def __getstate__(self) -> dict[str, Any]:
        """What pickle and copy.deepcopy keep, as torch's: only between iterations (no optimizer unscaled or
        stepped since the last update()); the scale and growth tracker as numbers, made into fresh state
        tensors by __setstate__, and the copy needs a scale() again before unscale_/step/update."""
        state = self.__dict__.copy()
        if self._enabled:
            if self._per_optimizer_states:
                raise AssertionError("A GradScaler instance may only be pickled at the beginning of an iteration, "
                                     "or at the end after scaler.update().")
            state["_init_scale"] = self.get_scale()
            state["_init_growth_tracker"] = int(self._growth_tracker.item())
            del state["_scale"], state["_growth_tracker"]
        state.update(_scaled=False, _found_buffers=None, _replayed=None, _scalars=(None, {}))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        tracker = state.pop("_init_growth_tracker", 0)
        self.__dict__.update(state)
        self._found_buffers = weakref.WeakKeyDictionary()
        if self._enabled:
            self._scale = _state_scalar(self._init_scale, f32)
            self._growth_tracker = _state_scalar(tracker, i32)

    # ---- helpers --------------------------------------------------------------------------------
    def _check_scaled(self, funcname: str) -> None:
        """torch's scale tensor exists only once scale() has met a tensor: before that, unscale_, step and
        update refuse (unscaled gradients would otherwise be divided by the initial scale)."""
        if not self._scaled:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  This may indicate your script did not "
                                 f"use scaler.scale(loss or outputs) earlier in the iteration.\n  at {user_location()}")

    def _opt_state(self, optimizer) -> dict[str, Any]:
        return self._per_optimizer_states.setdefault(id(optimizer), _fresh_state())

    def _found_buffer(self, optimizer) -> Tensor:
        """The 0-d state tensor holding `optimizer`'s found_inf across the calls of a compiled step
        (made concrete even while a step is traced, as optimizer state is)."""
        buffer = self._found_buffers.get(optimizer)
        if buffer is None:
            token = current_trace.set(None)
            try:
                buffer = self._found_buffers[optimizer] = _state_scalar(0.0, f32)
            finally:
                current_trace.reset(token)
        return buffer

    def _set_again_at_replays(self, trace) -> None:
        """When the traced body returns, what it left in the scaler's bookkeeping (an optimizer
        unscaled or stepped, its found_inf buffer) is set again before each replay: the Python of
        scale/unscale_/step runs only while tracing, and an update() outside the step reads it."""
        if self._replayed is trace:
            return
        self._replayed = trace

        def leave() -> None:
            left = {k: dict(v) for k, v in self._per_optimizer_states.items()}
            trace.before_run.append(functools.partial(self._restore, left))

        trace.after_body.append(leave)

    def _restore(self, states: dict[int, dict[str, Any]]) -> None:
        self._per_optimizer_states = {k: dict(v) for k, v in states.items()}

    def _hyper(self, key: str, dtype: DType) -> Tensor | float:
        """A hyperparameter: a Python number eagerly, a scalar input (read at every call) when traced."""
        trace = current_trace.get()
        if trace is None:
            return getattr(self, "_" + key)
        if self._scalars[0] is not trace:
            self._scalars = (trace, {})
        cache = self._scalars[1]
        if key not in cache:
            getter: Callable[[], float] = lambda: getattr(self, "_" + key)  # noqa: E731
            cache[key] = trace.scalar(getter, dtype)
        return cache[key]


def _step_unless(found_inf: Tensor, optimizer, args: tuple, kwargs: dict) -> None:
    """Inside a trace: optimizer.step(), then every parameter and state tensor it changed becomes
    where(found_inf, its value before the step, its value after)."""
    trace = current_trace.get()
    adopt = getattr(optimizer, "_adopt_new_params", None)
    if adopt is not None:  # state the step would make (a parameter added by hand, or converted) is selected too
        adopt()
    tensors = [p for group in optimizer.param_groups for p in group["params"]]
    tensors += [t for st in optimizer.state.values() for t in st.values() if isinstance(t, Tensor)]
    before = [(t, trace.value_of(t)) for t in tensors]
    optimizer.step(*args, **kwargs)
    with no_grad():
        skip = found_inf > 0
        for t, old in before:
            if trace.value_of(t) is not old:
                t.copy_(where(skip, Tensor._traced(old, trace), t))
