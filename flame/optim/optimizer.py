"""The Optimizer base class. Two rules make one optimizer work both eagerly and inside @flame.compile:
- state (moments, step counters) is created EAGERLY at construction, as concrete tensors with role
  `state`, so a traced step finds it, lifts it to graph inputs and writes the updates back;
- every update is a `copy_` (a rebinding while tracing, a buffer write eagerly), and hyperparameters
  a scheduler may change enter a trace as `scalar` inputs read from the param group at every call,
  so changing group['lr'] never re-traces.
Choices made in Python (weight_decay == 0, nesterov, amsgrad) are fixed when the step is traced and
read through `option()`, which guards them: changing one re-traces with a RecompileWarning."""

from __future__ import annotations

import copy
import functools
import reprlib
import sys
import weakref
from collections.abc import Iterable
from contextlib import nullcontext
from itertools import chain
from typing import Any

from flame.checkpoint import as_tensor, copy_pairs
from flame.errors import (
    ArgumentError,
    ArgumentTypeError,
    CheckpointError,
    ConflictingOptionsError,
    FlameError,
    ShapeError,
    TraceError,
    UnsupportedError,
)
from flame.frontend.context import TRACING_HOOKS, current_trace, enable_grad, no_grad, pinned_location, user_location
from flame.frontend.creation import zeros
from flame.frontend.default_dtype import get_default_dtype
from flame.frontend.guards import value_key
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import DType, bf16, f16, f32, f64
from flame.nn.parameter import is_lazy
from flame.optim._step_hooks import (  # noqa: F401  (torch.optim.optimizer names the global hooks)
    add_hook,
    hooked_step,
    own_hooks,
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
    written_each_call,
)


class GroupLayoutError(CheckpointError, ValueError):
    """A saved optimizer state_dict has another number of parameter groups, or of parameters in a group,
    than the optimizer it is loaded into: a ValueError, as torch.optim's load_state_dict raises."""


def compute_dtype(p: Tensor) -> DType:
    """The dtype an update is computed in: f32 for half-precision parameters, else the parameter's."""
    return f32 if p.dtype in (f16, bf16) else p.dtype


def scalar_dtype() -> DType:
    """The dtype of torch.optim's scalar state (a saved step count, ASGD's eta and mu, NAdam's
    mu_product): f64 where the default floating dtype is f64, else f32, as torch.optim's."""
    return f64 if get_default_dtype() == f64 else f32


def _number(value: Any) -> float:
    """A hyperparameter as a Python float (a rate or beta held as a 0-d tensor read)."""
    return float(value.item()) if isinstance(value, Tensor) else float(value)


def _one_minus(getter) -> float:
    return 1 - _number(getter())


def state_tensor(like: Tensor, dtype: DType | None = None, shape: tuple[int, ...] | None = None) -> Tensor:
    """A zero tensor with role `state` (an optimizer moment or step counter)."""
    t = zeros(*(like.shape if shape is None else shape), dtype=dtype or like.dtype)
    t._role = "state"
    return t


class _RequiredParameter:
    """The default of an option a parameter group must give (torch.optim.optimizer.required): a custom
    optimizer's `def __init__(self, params, lr=required)`."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


class Optimizer:
    """Base class: param_groups (list of dicts, torch-shaped), state (param -> dict of tensors),
    zero_grad, step, state_dict / load_state_dict. Subclasses define `_init_state` and `_update`."""

    # torch.optim's keyword flags and their defaults; each optimizer takes those its torch namesake takes
    FLAG_DEFAULTS: dict[str, Any] = dict(
        maximize=False, foreach=None, capturable=False, differentiable=False, fused=None
    )
    torch_flags: tuple[str, ...] = ("maximize", "foreach", "capturable", "differentiable", "fused")

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], defaults: dict[str, Any], **flags):
        """torch.optim's keyword flags, those of `torch_flags` (the ones the torch namesake takes):
        maximize (ascend the objective) is honoured; foreach, fused and capturable are accepted and
        change nothing (a compiled step's updates are one fused kernel, replayed in a CUDA graph);
        differentiable=True (gradients through the update) is not supported. They live in the
        param_groups, as torch's."""
        unknown = [k for k in flags if k not in self.torch_flags]
        if unknown:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {unknown[0]!r}")
        if flags.get("fused") and flags.get("foreach"):
            raise ConflictingOptionsError(
                f"{type(self).__name__}: `fused` and `foreach` cannot be `True` together (as in PyTorch)\n"
                f"  at {user_location()}"
            )
        if flags.get("differentiable"):
            raise UnsupportedError(
                f"{type(self).__name__}: differentiable=True (gradients through the update) is not supported; "
                f"leave it False\n  at {user_location()}"
            )
        self.defaults = dict(defaults, **{k: flags.get(k, self.FLAG_DEFAULTS[k]) for k in self.torch_flags})
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Tensor]] = {}
        self._scalars: tuple[object, dict, dict] = (None, {}, {})  # trace, its scalar inputs, the values read
        _LIVE.add(self)
        self._serials: dict[int, int] = {}  # id(param) -> the order it joined this optimizer in
        self._made_for: dict[int, tuple] = {}  # id(param) -> (dtype, shape) of the param its state was made for
        if isinstance(params, Tensor):  # iterating it would optimize its rows, views that are not leaves
            raise ArgumentTypeError(
                f"{type(self).__name__}: params argument given to the optimizer should be an iterable of "
                f"Tensors or dicts, but got a Tensor {list(params.shape)} (pass [tensor])\n  at {user_location()}"
            )
        groups = list(params)
        if not groups:
            raise ArgumentError(f"{type(self).__name__} got an empty parameter list\n  at {user_location()}")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group of parameters (with its own hyperparameters); creates their state now. The group
        is a dict whose 'params' is a tensor or an ordered collection of them (a set is refused, as
        torch's refuses it: its order, which numbers the parameters in state_dict(), changes between
        runs, so a checkpoint would load each parameter's state into another one of its shape)."""
        if not isinstance(group, dict):
            raise ArgumentTypeError(f"param_group must be a dict, but got {type(group)}\n  at {user_location()}")
        group = dict(group)
        ps = group["params"]
        if isinstance(ps, set):
            raise ArgumentTypeError(
                f"{type(self).__name__}: optimizer parameters need to be organized in ordered collections, but "
                f"the ordering of tensors in sets will change between runs. Please use a list instead (got a "
                f"{type(ps).__name__} of {len(ps)} tensors)\n  at {user_location()}"
            )
        group["params"] = [ps] if isinstance(ps, Tensor) else list(ps)
        self._take_names(group)
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ArgumentError(f"parameter group didn't specify a value of required optimization parameter {k}"
                                    f"\n  at {user_location()}")
            group.setdefault(k, v)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, p in enumerate(group["params"]):
            if not isinstance(p, Tensor) or p.is_traced:
                raise ArgumentTypeError(
                    f"{type(self).__name__} can only optimize concrete flame Tensors, got {type(p).__name__}"
                    f"\n  at {user_location()}"
                )
            if not (p.is_leaf or p._retains_grad):
                raise ArgumentError(
                    f"{type(self).__name__}: can't optimize a non-leaf Tensor ({p.dtype}{list(p.shape)}, made by "
                    f"an op from tensors that require grad; optimize the tensors it was made from, or "
                    f"x.detach().requires_grad_())\n  at {user_location()}"
                )
            if is_lazy(p):
                raise FlameError(
                    f"{type(self).__name__}: a parameter is an nn.UninitializedParameter (a Lazy module's, "
                    f"before its first call): run one batch through the model before building the "
                    f"optimizer, whose state has the parameters' shapes\n  at {user_location()}"
                )
            if not p.dtype.is_float:
                raise FlameError(f"{type(self).__name__}: cannot optimize a {p.dtype} tensor")
            if id(p) in seen:
                where = ("twice in one parameter group (torch.optim warns and updates it twice; list each once, e.g. "
                         "through model.parameters(), which lists a tied weight once)"
                         if any(q is p for q in group["params"][:i]) else "in more than one parameter group")
                raise ArgumentError(f"{type(self).__name__}: a parameter ({p.dtype}{list(p.shape)}) appears "
                                    f"{where}\n  at {user_location()}")
            seen.add(id(p))
        self._check_group(group)
        self.param_groups.append(group)
        for p in group["params"]:
            self._serials[id(p)] = len(self._serials)
            self.state[p] = self._new_state(p, group)

    def __init_subclass__(cls, **kwargs):
        """A subclass's own step runs the step hooks too; one written outside flame (a torch-style
        optimizer of the user's) is also made right inside @flame.compile (flame/optim/_step_hooks.py)."""
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__:
            cls.step = hooked_step(cls.__dict__["step"], users=cls.__module__.partition(".")[0] != "flame")

    # ---- hooks, as torch.optim.Optimizer's ----------------------------------------------------------
    def register_step_pre_hook(self, hook):
        """hook(optimizer, args, kwargs) before each step(); it may return (new_args, new_kwargs)."""
        return add_hook(own_hooks(self, "_step_pre_hooks"), hook)

    def register_step_post_hook(self, hook):
        """hook(optimizer, args, kwargs) after each step()."""
        return add_hook(own_hooks(self, "_step_post_hooks"), hook)

    def register_state_dict_pre_hook(self, hook, prepend: bool = False):
        """hook(optimizer) before state_dict() makes the dict."""
        return add_hook(own_hooks(self, "_state_dict_pre_hooks"), hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend: bool = False):
        """hook(optimizer, state_dict) after state_dict(); a dict it returns is what state_dict() gives."""
        return add_hook(own_hooks(self, "_state_dict_post_hooks"), hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend: bool = False):
        """hook(optimizer, state_dict) before load_state_dict(); a dict it returns is what is loaded."""
        return add_hook(own_hooks(self, "_load_state_dict_pre_hooks"), hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend: bool = False):
        """hook(optimizer) after load_state_dict()."""
        return add_hook(own_hooks(self, "_load_state_dict_post_hooks"), hook, prepend)

    non_negative: tuple[str, ...] = ()  # the group options a subclass requires to be >= 0 (besides lr)
    # whether torch's namesake creates its state at construction (Adagrad), not at a parameter's first step:
    # then state_dict() lists a parameter that has not stepped yet, else it leaves it out, as torch's does
    state_at_construction: bool = False
    param_dtype_state: tuple[str, ...] = ()  # scalar state a load casts to its parameter's dtype (_retyped)

    def _take_names(self, group: dict[str, Any]) -> None:
        """Parameters given as (name, tensor) pairs (model.named_parameters(), as torch.optim takes them):
        the tensors in 'params', their names in 'param_names'; every group named, or none, as torch's."""
        named = [isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in group["params"]]
        if any(named):
            if not all(named):
                raise ArgumentError(f"{type(self).__name__}: all optimizer params should be with/without names. "
                                    f"Some param names are missing\n  at {user_location()}")
            group["param_names"] = [n for n, _ in group["params"]]
            group["params"] = [p for _, p in group["params"]]
        if self.param_groups and ("param_names" in self.param_groups[0]) != ("param_names" in group):
            which = "with" if "param_names" in group else "without"
            raise ArgumentError(f"{type(self).__name__}: all optimizer param groups should be with/without names. "
                                f"cannot add param group {which} names to the optimizer\n  at {user_location()}")

    # whether a NaN lr (or option of non_negative) is taken: torch's SGD checks `lr < 0` (false for NaN),
    # its other optimizers `not 0.0 <= lr`, which refuses NaN
    nan_accepted: bool = False

    def _check_group(self, group: dict[str, Any]) -> None:
        if isinstance(group["lr"], Tensor) and group["lr"].numel() != 1:
            raise ShapeError(f"{type(self).__name__}: Tensor lr must be 1-element, got shape "
                                f"{list(group['lr'].shape)}\n  at {user_location()}")
        for key in ("lr", *self.non_negative):
            value = group[key]
            if value < 0 if self.nan_accepted else not 0.0 <= value:
                what = "learning rate" if key == "lr" else key
                raise ArgumentError(
                    f"{type(self).__name__}: invalid {what} {value} (expected >= 0)\n  at {user_location()}"
                )

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {}

    def _new_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        """_init_state(p, group), noting the dtype and shape p had (see _outgrown)."""
        self._made_for[id(p)] = (p.dtype, p.shape)
        return self._init_state(p, group)

    def _remake_outgrown(self) -> None:
        """New state (concrete, even while a step is traced) for every parameter that _outgrown its own."""
        for group in self.param_groups:
            for p in group["params"]:
                if self._outgrown(p):
                    token = current_trace.set(None)
                    try:
                        self.state[p] = self._new_state(p, group)
                    finally:
                        current_trace.reset(token)

    def _outgrown(self, p: Tensor) -> bool:
        """Whether p's state was made for another dtype or shape of p (the model converted by .double() or
        .to(dtype), or p.data replaced, after the optimizer was made) and p has not stepped yet: torch.optim
        makes a parameter's state at its first step (Adagrad's at construction), from p as it is then."""
        made = self._made_for.get(id(p))
        if self.state_at_construction or made is None or made == (p.dtype, p.shape):
            return False
        token = current_trace.set(None)  # the concrete counter, read while a step is traced too
        try:
            fresh = _never_stepped(self.state[p])
        finally:
            current_trace.reset(token)
        if not fresh:  # state that has stepped stays, as torch's: not read again at every step
            self._made_for[id(p)] = (p.dtype, p.shape)
        return fresh

    def _update(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]) -> None:
        raise NotImplementedError

    def grad(self, p: Tensor, group: dict[str, Any], dtype: DType) -> Tensor:
        """p's gradient in the compute dtype, negated when the group maximizes."""
        g = p.grad.to(dtype)
        return -g if self.option(group, "maximize") else g

    def begin(
        self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor], decoupled: bool | str = False
    ) -> tuple[Tensor, Tensor]:
        """The start most updates share, as torch's: the step counter advanced; (x, g), the parameter and
        its gradient (grad()) in the compute dtype, with weight_decay applied: added to g as wd * x, or
        with `decoupled` (True, or the name of the group's bool that says so) x scaled by 1 - lr * wd."""
        cd = compute_dtype(p)
        x, g = p.to(cd), self.grad(p, group, cd)
        state["step"].copy_(state["step"] + 1)
        if self.option(group, "weight_decay", nonzero=True):
            wd = self.hyper(group, "weight_decay", cd)
            if decoupled is True or (isinstance(decoupled, str) and self.option(group, decoupled)):
                x = x * (1 - self.hyper(group, "lr", cd) * wd)
            else:
                g = g + x * wd
        return x, g

    # ---- hyperparameters ----------------------------------------------------------------------------
    def hyper(self, group: dict[str, Any], key: str, dtype: DType, index: int | None = None,
              one_minus: bool = False) -> Tensor | float:
        """group[key] (or group[key][index], for betas), or with one_minus 1 - that value computed in
        double precision (torch's Python float: Adam's 1 - beta2 is f32(0.001), where 1 - f32(0.999) would
        be 0.0009999871), rounded to dtype: eagerly a Python float, the value rounded to dtype as a trace
        reads it, so an update computes the same numbers eagerly and compiled; inside a trace a 0-d
        `scalar` graph input read from the group at every call (one input per trace, group, key, dtype)."""
        value = group[key] if index is None else group[key][index]
        trace = current_trace.get()
        if trace is None:
            value = 1 - _number(value) if one_minus else float(value)
            rounds = isinstance(dtype, DType) and dtype.is_float
            return float(dtype.np_dtype.type(value)) if rounds else value
        if isinstance(value, Tensor) and value.is_traced:  # set by the body from a traced value (an lr argument)
            return (1 - value.detach().to(f64)).to(dtype) if one_minus else value.detach().to(dtype)
        if self._scalars[0] is not trace:
            self._scalars = (trace, {}, {})
        cache = self._scalars[1]
        ck = (id(group), key, index, getattr(dtype, "name", dtype), one_minus)  # (equal dtypes have one name)
        self._scalars[2].setdefault((id(group), key), group[key])  # what the update used (_groups_written)
        out = cache.get(ck)
        if out is None:
            read = self._reader(group)
            getter = (lambda: read()[key]) if index is None else (lambda: read()[key][index])
            if one_minus:
                getter = functools.partial(_one_minus, getter)
            out = cache[ck] = trace.scalar(getter, dtype)
        return out

    def _reader(self, group: dict[str, Any]):
        """A function giving the group at group's place in param_groups at each call (a group dict or the
        list replaced between compiled steps is read, not the one traced), or group itself if it has none."""
        index = next((i for i, g in enumerate(self.param_groups) if g is group), None)
        return (lambda: group) if index is None else (lambda: self.param_groups[index])

    def option(self, group: dict[str, Any], key: str, nonzero: bool = False) -> bool:
        """bool(group[key]) (or group[key] != 0) for a choice the update makes in Python (nesterov,
        amsgrad, weight_decay != 0). Inside a trace the choice is a guard of the trace: changing it
        re-traces (with a flame.RecompileWarning) instead of replaying the other choice; changing a
        value hyper() reads (0.01 -> 0.02) does not."""
        trace = current_trace.get()
        if trace is None:
            return group[key] != 0 if nonzero else bool(group[key])
        index = next(i for i, g in enumerate(self.param_groups) if g is group)
        what = f"{type(self).__name__}.param_groups[{index}][{key!r}]" + (" != 0" if nonzero else "")
        if what in trace.python_reads:  # recorded by an earlier update: read now (group is param_groups[index])
            return group[key] != 0 if nonzero else bool(group[key])
        at = self._reader(group)
        read = (lambda: at()[key] != 0) if nonzero else (lambda: bool(at()[key]))
        return trace.read_python(what, read)

    def guard_groups(self) -> None:
        """Inside a trace, which parameters each group holds is a guard of the trace: add_param_group
        (or a group's params changed by hand) after a step was compiled re-traces it, instead of
        replaying an update and a zero_grad that leave the new parameters out."""
        trace = current_trace.get()
        if trace is not None:
            trace.read_python(f"the parameters of {type(self).__name__}.param_groups", self._group_layout)

    def _adopt_new_params(self) -> None:
        """State for a parameter put into a group by hand (`group['params'][0] = new_param`, an append),
        created when a step first meets it, as torch.optim creates state lazily, and the state an option
        set since the state was made needs (_missing_state: SGD's momentum_buffer once a scheduler such as
        OneCycleLR gives the group a momentum): concrete zeros even while a step is traced (as those made
        at construction), and state made again for a parameter whose dtype or shape changed before its first
        step (_remake_outgrown)."""
        self._remake_outgrown()
        for group in self.param_groups:
            for p in group["params"]:
                if id(p) not in self._serials and isinstance(p, Tensor) and not p.is_traced:
                    token = current_trace.set(None)
                    try:
                        self._serials[id(p)] = len(self._serials)
                        self.state[p] = self._new_state(p, group)
                    finally:
                        current_trace.reset(token)
                elif p.grad is not None and (missing := self._missing_state(p, group, self.state[p])):
                    token = current_trace.set(None)
                    try:
                        self.state[p].update(missing())
                    finally:
                        current_trace.reset(token)

    def _missing_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Tensor]):
        """None, or a function making the state tensors the group's options now need and `state` lacks
        (an option set after construction, as torch.optim would create them at this step)."""
        return None

    def _state_tensors(self) -> tuple:
        """The tensors the state dicts of the groups' parameters hold, in group order."""
        get = self.state.get
        return tuple(chain.from_iterable(get(p, _EMPTY).values() for g in self.param_groups for p in g["params"]))

    def _group_layout(self) -> tuple[tuple[int, ...], ...]:
        serial = self._serials.get  # None for a parameter put into a group by hand and not yet adopted
        return tuple(tuple(map(serial, map(id, g["params"]))) for g in self.param_groups)

    # ---- the public API ---------------------------------------------------------------------------
    def step(self, closure=None):
        """One update of every parameter that has a gradient. `closure` (re-evaluates the loss) is
        called first when given, with gradients enabled (under no_grad() too, as torch.optim's); its
        result is returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        self._adopt_new_params()
        self.guard_groups()
        trace = current_trace.get()
        if trace is not None:  # `opt.state[p]['exp_avg'] = new_tensor` re-traces, not updating the one bound
            trace.read_held(f"the state tensors of {type(self).__name__}.state", self._state_tensors)
        # flame's optimizers call no user code while updating: every op names the caller's line, found once
        pin = pinned_location() if type(self).__module__.partition(".")[0] == "flame" else nullcontext()
        with no_grad(), pin:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self._update(p, group, self.state[p])
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) every parameter's gradient; inside @flame.compile the result is written back."""
        self.guard_groups()
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        """{'state': {index: {name: tensor}}, 'param_groups': [{hyperparameters..., 'params': [index]}]},
        the layout of torch.optim; parameters are numbered in group order. Tensors share memory. The
        state-dict hooks run around it."""
        for hook in list(own_hooks(self, "_state_dict_pre_hooks").values()):
            hook(self)
        out = self._state_dict()
        for hook in list(own_hooks(self, "_state_dict_post_hooks").values()):
            out = hook(self, out) or out
        return out

    def _state_dict(self) -> dict[str, Any]:
        index = {}
        groups = []
        for g in self.param_groups:
            ids = []
            for p in g["params"]:
                index[id(p)] = len(index)
                ids.append(index[id(p)])
            groups.append({**{k: copy.deepcopy(v) for k, v in g.items() if k != "params"}, "params": ids})
        state = {
            index[id(p)]: self._saved_state(st)
            for p, st in self.state.items()
            if self.state_at_construction or not _never_stepped(st)
        }
        return {"state": state, "param_groups": groups}

    def _saved_state(self, state: dict[str, Tensor]) -> dict[str, Any]:
        """One parameter's state as state_dict() gives it (see _saved)."""
        return {k: _saved(k, v) for k, v in state.items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Copy saved state and hyperparameters into this optimizer IN PLACE (the same tensors and group
        dicts stay bound, so a compiled step keeps working without re-tracing). Raises
        flame.CheckpointError listing every problem; nothing is changed when it raises. The
        load-state-dict hooks run around it."""
        for hook in list(own_hooks(self, "_load_state_dict_pre_hooks").values()):
            state_dict = hook(self, state_dict) or state_dict
        self._remake_outgrown()  # loaded into the dtype and shape the parameter has now, as torch's casts
        self.apply_load(self.plan_load(state_dict), state_dict)
        for hook in list(own_hooks(self, "_load_state_dict_post_hooks").values()):
            hook(self)

    def plan_load(self, state_dict: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
        """Check a saved state_dict against this optimizer without changing anything; returns the
        (destination, source) tensor pairs to copy."""
        groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        if (
            not isinstance(groups, list)
            or not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups)
            or not isinstance(state_dict.get("state"), dict)
        ):
            raise CheckpointError(
                f"{type(self).__name__}.load_state_dict: expected a dict with 'state' and a "
                f"'param_groups' list of dicts with 'params' lists"
            )
        if len(groups) != len(self.param_groups) or any(
            len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)
        ):
            raise GroupLayoutError(
                f"{type(self).__name__}.load_state_dict: the saved parameter groups "
                f"({[len(g['params']) for g in groups]} parameters) do not match this "
                f"optimizer's ({[len(g['params']) for g in self.param_groups]})"
            )
        saved_state = {int(k): v for k, v in state_dict["state"].items()}
        errors, pairs = [], _Pairs()
        for g, (saved, mine) in enumerate(zip(groups, self.param_groups)):
            errors += [
                f"  param_groups.{g}.{k}: {why}"
                for k, v in saved.items()
                if k != "params"
                for why in [_hyper_problem(v, mine.get(k, _MISSING))]
                if why
            ]
        for saved, mine in zip(groups, self.param_groups):
            for i, p in zip(saved["params"], mine["params"]):
                own, theirs = self.state[p], saved_state.get(int(i), {})
                if not theirs and own:  # no saved state (torch's before the parameter's first step): start afresh
                    theirs = self._fresh_state(p, mine)
                    pairs.fresh.update(id(t) for t in own.values())
                if any(k not in own for k in theirs):  # state the saved options keep (momentum, amsgrad)
                    options = {k: v for k, v in saved.items() if k != "params"}
                    fresh = self._fresh_state(p, {**mine, **options})
                    added = {k: t for k, t in fresh.items() if k not in own and k in theirs}
                    pairs.added += [(p, k, t) for k, t in added.items()]
                    own = {**own, **added}
                for k, t in own.items():
                    if k not in theirs:
                        errors.append(f"  missing: state.{i}.{k}")
                        continue
                    src = as_tensor(theirs[k])
                    if tuple(src.shape) != tuple(t.shape):
                        errors.append(f"  mis-shaped: state.{i}.{k}: saved {list(src.shape)} vs {list(t.shape)}")
                    pairs.append((t, src))
                errors += [f"  unexpected: state.{i}.{k}" for k in theirs if k not in own]
        if errors:
            raise CheckpointError(
                f"{type(self).__name__}.load_state_dict: {len(errors)} problem(s)\n" + "\n".join(errors)
            )
        return pairs

    def _fresh_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        """The state a parameter starts with (concrete, even while a step is traced)."""
        token = current_trace.set(None)
        try:
            return self._init_state(p, group)
        finally:
            current_trace.reset(token)

    def apply_load(self, pairs: list[tuple[Tensor, Tensor]], state_dict: dict[str, Any]) -> None:
        """Second half of load_state_dict: copy the planned tensors and the groups' hyperparameters."""
        for p, k, t in getattr(pairs, "added", ()):
            self.state[p][k] = t
        copy_pairs(self._retyped(pairs))
        for saved, mine in zip(state_dict["param_groups"], self.param_groups):
            for k, v in saved.items():
                if k != "params":
                    mine[k] = tuple(v) if isinstance(mine.get(k), tuple) else v

    def _retyped(self, pairs: list[tuple[Tensor, Tensor]]) -> list[tuple[Tensor, Tensor]]:
        """pairs, where a destination named in `param_dtype_state` of a floating parameter of another dtype
        is replaced (in self.state) by a new state tensor of the parameter's dtype: torch's load_state_dict
        casts every state value but `step` to its floating parameter's dtype, and the update then computes
        in that dtype (NAdam's mu_product, ASGD's eta and mu become f64 for f64 parameters). State started
        afresh (plan_load's `fresh`) takes the dtype a first step gives it instead, as torch's made then."""
        new: dict[int, Tensor] = {}
        fresh = {id(d): s.dtype for d, s in pairs if id(d) in getattr(pairs, "fresh", ())}
        for p, st in self.state.items():
            if not p.dtype.is_float:
                continue
            for k in self.param_dtype_state:
                t = st.get(k)
                want = fresh.get(id(t), p.dtype) if t is not None else None
                if t is not None and t.dtype != want:
                    st[k] = new[id(t)] = state_tensor(p, want, tuple(t.shape))
        return [(new.get(id(dst), dst), src) for dst, src in pairs]

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(g.items()) if k != "params"]
        return "\n".join(lines + [")"])


Optimizer.step = hooked_step(Optimizer.step, users=False)  # type: ignore[method-assign]

_MISSING = object()
_EMPTY: dict = {}
_LIVE: weakref.WeakSet = weakref.WeakSet()  # the optimizers made so far (a trace watches their groups)


def _watch_groups(tracing: bool) -> None:
    """Installed in frontend.context.TRACING_HOOKS: as a body starts to be traced, the options of every
    optimizer's groups are noted; when it returns, _groups_written sees what it set."""
    trace = current_trace.get()
    if tracing and trace is not None:
        before = [(opt, g, {k: v for k, v in g.items() if k != "params"}) for opt in list(_LIVE)
                  for g in opt.param_groups]
        trace.after_body.append(functools.partial(_groups_written, trace, before))
    elif trace is not None:  # an option the body set to a traced tensor (`g['lr'] = lr`, lr an argument): a
        for opt in list(_LIVE):  # concrete tensor the step writes at each call, as the groups hold after it
            for g in opt.param_groups:
                for k, v in g.items():
                    if k != "params" and isinstance(v, Tensor) and v.is_traced:
                        g[k] = written_each_call(None, v)


TRACING_HOOKS.append(_watch_groups)


def _groups_written(trace: Any, before: list) -> None:
    """An option the traced body set in a group (`g['lr'] = lr` for a warm-up): set again before each
    replay, as the body set it before the update read it; one it set after the update used it (a rate
    decayed after opt.step()) would change once, not at every call, and raises a TraceError."""
    for opt, g, old in before:
        for k, v in g.items():
            if k == "params" or k in old and (old[k] is v or value_key(old[k]) == value_key(v)):
                continue
            used = opt._scalars[2].get((id(g), k), _MISSING) if opt._scalars[0] is trace else _MISSING
            if used is not _MISSING and value_key(used) != value_key(v):
                raise TraceError(
                    f"{type(opt).__name__}.param_groups[{next(i for i, x in enumerate(opt.param_groups) if x is g)}]"
                    f"[{k!r}] was set inside "
                    f"@flame.compile after the update used it ({used!r} -> {v!r}): the compiled step runs its "
                    f"Python only when traced, so it would change once, not at every call; set it outside the "
                    f"compiled step (it is read at every call), or before the step uses it"
                )
            trace.before_run.append(functools.partial(g.__setitem__, k, v))
_FLOAT_MAX = sys.float_info.max


def _hyper_problem(saved: Any, mine: Any) -> str:
    """'' if a saved hyperparameter can replace this optimizer's value (same kind: a finite number for
    a number, a bool for a bool, a tuple of numbers of the same length for a tuple; a key this optimizer
    lacks must hold plain data), else what is wrong."""

    def number(v) -> bool:  # a finite float, or an int a float holds (not 10**400)
        return isinstance(v, (int, float)) and not isinstance(v, bool) and -_FLOAT_MAX <= v <= _FLOAT_MAX

    if mine is _MISSING:  # a key a scheduler adds (initial_lr), as PyTorch keeps it: plain data only
        plain = (
            saved is None
            or isinstance(saved, (bool, str))
            or number(saved)
            or (isinstance(saved, (tuple, list)) and all(number(x) for x in saved))
            or (isinstance(saved, list) and all(isinstance(x, str) for x in saved))  # param_names
        )
        return "" if plain else f"saved {_quote(saved)} is not a number, bool, string or list of numbers or names"

    if isinstance(mine, bool) or mine is None:  # torch's foreach and fused are None or a bool
        ok = isinstance(saved, bool) or saved is None or (mine is None and number(saved))
    elif isinstance(mine, (int, float)):
        ok = number(saved)
    elif isinstance(mine, list) and all(isinstance(x, str) for x in mine):  # param_names
        ok = isinstance(saved, list) and len(saved) == len(mine) and all(isinstance(x, str) for x in saved)
    elif isinstance(mine, (tuple, list)):
        ok = (  # a None where this optimizer may hold one (Adafactor's eps1)
            isinstance(saved, (tuple, list))
            and len(saved) == len(mine)
            and all(number(x) or (x is None and (m is None or number(m))) for x, m in zip(saved, mine))
        )
    else:
        ok = type(saved) is type(mine)
    return "" if ok else f"saved {_quote(saved)} cannot replace {mine!r}"


def _quote(v: Any) -> str:
    """A saved value as an error quotes it: shortened, and an int too long to print described."""
    if isinstance(v, int) and v.bit_length() > 4096:
        return f"an int of {v.bit_length()} bits"
    return reprlib.repr(v)


class _Pairs(list):
    """plan_load's (destination, source) pairs; `fresh`: the ids of the destinations of parameters the
    saved state_dict holds no state for, which start afresh; `added`: (parameter, name, tensor) of the
    state the saved options keep and this optimizer's options do not (a saved SGD momentum_buffer loaded
    into an SGD made without momentum), which apply_load puts into the state."""

    def __init__(self):
        super().__init__()
        self.fresh: set[int] = set()
        self.added: list[tuple[Tensor, str, Tensor]] = []



def _never_stepped(state: dict[str, Any]) -> bool:
    """Whether a parameter's state is as made before its first step (its step counter at 0): torch.optim
    keeps no state for such a parameter."""
    step = state.get("step")
    return isinstance(step, Tensor) and step.ndim == 0 and step.item() == 0


def _saved(key: str, value: Tensor) -> Tensor:
    """A state tensor as state_dict() gives it: shared with the optimizer, except a step count, which is
    a copy in scalar_dtype() as torch.optim's (flame counts in the parameter's dtype; loading converts back)."""
    if key == "step" and value.ndim == 0 and value.dtype != scalar_dtype() and value.dtype.is_float:
        return value.detach().to(scalar_dtype())
    return value.detach()
