"""What runs around an optimizer's step, as torch.optim's: the step pre- and post-hooks (an optimizer's
own and the global ones of register_optimizer_step_pre_hook / _post_hook), and, for an optimizer class
written by the user (a torch-style `step` that reads `group['lr']` as a Python number and creates its
state lazily, `if len(state) == 0: state['buf'] = zeros_like(p)`), what makes that step right inside
@flame.compile:

- the groups' options, the plain values its state holds (a Python `state['step'] += 1`) and its own
  plain attributes (`self.counter % self.k` of a Lookahead) are guards of the trace: a learning rate a
  scheduler changed, or a step count the body advanced, re-traces (with a flame.RecompileWarning)
  instead of replaying the values baked in when it was traced;
- the state tensors are held (by identity, as flame's own optimizers' are): one replaced between
  calls re-traces;
- a tensor the step stored into its state while traced (made in the step, so it would outlive the trace
  holding no values) becomes a concrete state tensor that the compiled step writes at every call: the
  one the key held before if it has the same shape and dtype (`state['buf'] = buf * m + g` updates it),
  else a new one (the first call's lazily created state), so each call continues from the last."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from itertools import chain
from typing import Any

from flame.frontend.context import current_trace, no_grad
from flame.frontend.creation import zeros
from flame.frontend.guards import is_plain, value_key
from flame.frontend.hooks import RemovableHandle
from flame.frontend.tensor import Tensor

__all__ = ["register_optimizer_step_post_hook", "register_optimizer_step_pre_hook"]

_GLOBAL_PRE: OrderedDict = OrderedDict()
_GLOBAL_POST: OrderedDict = OrderedDict()


def add_hook(hooks: OrderedDict, hook: Callable, prepend: bool = False) -> RemovableHandle:
    """hooks[new id] = hook (first with prepend); the handle removes it."""
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def register_optimizer_step_pre_hook(hook: Callable) -> RemovableHandle:
    """hook(optimizer, args, kwargs) before every optimizer's step (torch.optim.optimizer's); it may
    return (new_args, new_kwargs)."""
    return add_hook(_GLOBAL_PRE, hook)


def register_optimizer_step_post_hook(hook: Callable) -> RemovableHandle:
    """hook(optimizer, args, kwargs) after every optimizer's step (torch.optim.optimizer's)."""
    return add_hook(_GLOBAL_POST, hook)


def own_hooks(opt: Any, name: str) -> OrderedDict:
    """The optimizer's hook dict `name`, made on first use (a subclass may skip Optimizer.__init__'s)."""
    hooks = opt.__dict__.get(name)
    if hooks is None:
        hooks = opt.__dict__[name] = OrderedDict()
    return hooks


def hooked_step(step: Callable, users: bool) -> Callable:
    """step wrapped with the hooks (once per call: a subclass's step calling super().step() runs them
    once) and, for a user's optimizer class (`users`), the guards and state lifting of a traced step."""

    @functools.wraps(step)
    def run(self, *args, **kwargs):
        if self.__dict__.get("_in_step"):
            return step(self, *args, **kwargs)
        args = (self, *args)
        for hook in chain(_GLOBAL_PRE.values(), own_hooks(self, "_step_pre_hooks").values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, new_kwargs), but got "
                                       f"{result}.")
                args, kwargs = result
        self._opt_called = True  # an LR scheduler stepped before the first optimizer step warns (torch's)
        self._in_step = True
        try:
            trace = current_trace.get()
            out = step(*args, **kwargs) if trace is None or not users else _traced(self, step, args, kwargs, trace)
        finally:
            self._in_step = False
        for hook in chain(own_hooks(self, "_step_post_hooks").values(), _GLOBAL_POST.values()):
            hook(self, args, kwargs)
        return out

    return run


def _options(opt: Any) -> tuple:
    return tuple(tuple((k, value_key(v)) for k, v in g.items() if k != "params") for g in opt.param_groups)


def _state_dicts(opt: Any) -> list[dict]:
    return [st for st in opt.state.values() if isinstance(st, dict)]


def _plain_state(opt: Any) -> tuple:
    return tuple(tuple((k, value_key(v)) for k, v in st.items() if not isinstance(v, Tensor) and is_plain(v))
                 for st in _state_dicts(opt))


def _plain_attributes(opt: Any) -> tuple:
    """The optimizer's own plain attributes (a step counter of a Lookahead written by the user), less the
    flags of the step running and of a step taken."""
    flags = ("_in_step", "_opt_called")
    return tuple((k, value_key(v)) for k, v in vars(opt).items() if k not in flags and is_plain(v))


def _state_tensors(opt: Any) -> tuple:
    return tuple(v for st in _state_dicts(opt) for v in st.values() if isinstance(v, Tensor))


def _traced(opt: Any, step: Callable, args: tuple, kwargs: dict, trace: Any) -> Any:
    """A user's step while a body is traced: what it reads of the groups and the state is guarded, and
    the tensors it leaves in the state are concrete ones the compiled step writes."""
    name = type(opt).__name__
    trace.read_python(f"the options of {name}.param_groups", functools.partial(_options, opt))
    trace.read_python(f"the plain values of {name}.state", functools.partial(_plain_state, opt))
    trace.read_held(f"the state tensors of {name}.state", functools.partial(_state_tensors, opt))
    trace.read_python(f"the plain attributes of {name}", functools.partial(_plain_attributes, opt))
    before = {(id(st), k): v for st in _state_dicts(opt) for k, v in st.items()
              if isinstance(v, Tensor) and not v.is_traced}
    out = step(*args, **kwargs)
    for st in _state_dicts(opt):
        for k, v in list(st.items()):
            if isinstance(v, Tensor) and v.is_traced:
                st[k] = written_each_call(before.get((id(st), k)), v)
    return out


def written_each_call(old: Tensor | None, new: Tensor) -> Tensor:
    """A concrete tensor written with traced `new` at every call: `old` where it can hold it, else zeros
    made outside the trace (as flame's optimizers make state for a parameter they meet in a traced step)."""
    if old is None or old.shape != new.shape or old.dtype != new.dtype:
        token = current_trace.set(None)
        try:
            old = zeros(*new.shape, dtype=new.dtype)
        finally:
            current_trace.reset(token)
        old._role = "state"
    with no_grad():
        old.copy_(new.detach())
    return old
