"""Module hooks with PyTorch's semantics: forward pre-hooks and forward hooks (a module's own, and the
global ones every module runs), full backward hooks and backward pre-hooks, and the handles that
remove them. `Module.__call__` runs them in torch's order: global then the module's forward
pre-hooks, the backward hooks' watch on the inputs, forward(), global then the module's forward
hooks, the backward hooks' watch on the outputs.

Backward hooks see the gradients of one call: the call's tensor inputs and outputs pass through an
identity op (`x * 1`), whose gradient is the module's alone, and a group hook (frontend/hooks.py
`GroupHook`) on them runs the backward pre-hooks on grad_output and the full backward hooks on
(grad_input, grad_output) when backward reaches them: eagerly with concrete gradients, inside
@flame.compile traced into the backward graph (a backward hook must then compute with flame ops and
return the gradients; returning None is a flame.TraceError, as for Tensor.register_hook). Forward
hooks inside @flame.compile run while the step is traced, on traced tensors."""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable

from flame.errors import AutogradError, FlameError
from flame.frontend.context import current_trace, grad_enabled, user_location, user_stacklevel
from flame.frontend.creation import zeros
from flame.frontend.hooks import GroupHook, RemovableHandle, call_hook, check_traced_result, hooks_state, seen
from flame.frontend.tensor import Tensor

_KINDS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_global: dict[str, OrderedDict] = {k: OrderedDict() for k in _KINDS}
_global_with_kwargs: OrderedDict = OrderedDict()  # ids of global forward hooks called with kwargs
_global_always: OrderedDict = OrderedDict()  # ids of global forward hooks run even when forward raises


def _add(hooks: OrderedDict, hook: Callable, prepend: bool, *extra: OrderedDict) -> RemovableHandle:
    if not callable(hook):
        raise FlameError(f"a hook must be callable, got {type(hook).__name__}\n  at {user_location()}")
    handle = RemovableHandle(hooks, *extra)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    seen(handle)
    return handle


def register_module_forward_pre_hook(hook: Callable) -> RemovableHandle:
    """hook(module, args) -> None or new args, before the forward of every module (before its own)."""
    return _add(_global["_forward_pre_hooks"], hook, False)


def register_module_forward_hook(
    hook: Callable, *, with_kwargs: bool = False, always_call: bool = False
) -> RemovableHandle:
    """hook(module, args, output) (with_kwargs: hook(module, args, kwargs, output)) -> None or a new
    output, after the forward of every module (before its own forward hooks)."""
    handle = _add(_global["_forward_hooks"], hook, False, _global_with_kwargs, _global_always)
    if with_kwargs:
        _global_with_kwargs[handle.id] = True
    if always_call:
        _global_always[handle.id] = True
    return handle


def register_module_full_backward_pre_hook(hook: Callable) -> RemovableHandle:
    """hook(module, grad_output) -> None or new grad_output, for every module (before its own)."""
    return _add(_global["_backward_pre_hooks"], hook, False)


def register_module_full_backward_hook(hook: Callable) -> RemovableHandle:
    """hook(module, grad_input, grad_output) -> None or new grad_input, for every module."""
    return _add(_global["_backward_hooks"], hook, False)


class ModuleHooks:
    """Module's hook registration (torch.nn.Module's names and arguments); Module inherits it."""

    def _hook_dict(self, kind: str) -> OrderedDict:
        return self.__dict__.setdefault(kind, OrderedDict())

    def register_forward_pre_hook(
        self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """hook(module, args) -> None or new args (a non-tuple is made a 1-tuple), run before forward();
        with_kwargs=True: hook(module, args, kwargs) -> None or (new args, new kwargs). prepend: run it
        before the hooks registered so far."""
        kw = self._hook_dict("_forward_pre_hooks_with_kwargs")
        handle = _add(self._hook_dict("_forward_pre_hooks"), hook, prepend, kw)
        if with_kwargs:
            kw[handle.id] = True
        return handle

    def register_forward_hook(
        self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False, always_call: bool = False
    ) -> RemovableHandle:
        """hook(module, args, output) -> None or a new output, run after forward(); with_kwargs=True:
        hook(module, args, kwargs, output). always_call: run it also when forward() raises."""
        kw, always = self._hook_dict("_forward_hooks_with_kwargs"), self._hook_dict("_forward_hooks_always_called")
        handle = _add(self._hook_dict("_forward_hooks"), hook, prepend, kw, always)
        if with_kwargs:
            kw[handle.id] = True
        if always_call:
            always[handle.id] = True
        return handle

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """hook(module, grad_output) -> None or new grad_output (one per tensor output), run when the
        gradients of the module's outputs are computed, before they flow into the module."""
        return _add(self._hook_dict("_backward_pre_hooks"), hook, prepend)

    def register_load_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
        error_msgs) -> None, run by load_state_dict before it matches the keys, as torch's: it may rename,
        add or remove entries of state_dict (a copy of the one given) under `prefix` (this module's
        dotted name and a dot); a message appended to error_msgs makes load_state_dict raise."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def _register_load_state_dict_pre_hook(self, hook: Callable, with_module: bool = False) -> RemovableHandle:
        """As register_load_state_dict_pre_hook; without with_module the hook is called without the
        module first (torch's private form)."""
        if not callable(hook):
            raise FlameError(f"a hook must be callable, got {type(hook).__name__}\n  at {user_location()}")
        if with_module:
            module, user_hook = self, hook

            def hook(*args):
                return user_hook(module, *args)

        hooks = self._hook_dict("_load_state_dict_pre_hooks")
        handle = RemovableHandle(hooks)  # not seen by compiled steps: it runs in load_state_dict alone
        hooks[handle.id] = hook
        return handle

    def register_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """hook(module, prefix, keep_vars) -> None, run by state_dict before it takes this module's
        entries (prefix: the module's dotted name and a dot), as torch's."""
        return _add(self._hook_dict("_state_dict_pre_hooks"), _callable(hook), False)

    def register_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """hook(module, state_dict, prefix, local_metadata) -> None, run by state_dict once it holds this
        module's entries and its submodules'; it may change state_dict in place (a returned value is
        torch's RuntimeError)."""
        return _add(self._hook_dict("_state_dict_hooks"), _callable(hook), False)

    def register_load_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """hook(module, incompatible_keys) -> None, run by load_state_dict after the load, as torch's: it
        may change incompatible_keys.missing_keys / unexpected_keys in place, which strict=True then
        judges (so a hook that clears them avoids the error; the load has happened by then)."""
        return _add(self._hook_dict("_load_state_dict_post_hooks"), _callable(hook), False)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """hook(module, grad_input, grad_output) -> None or new grad_input (one per tensor input; None
        where the input needs no gradient), run when the gradients of the module's inputs are computed."""
        return _add(self._hook_dict("_backward_hooks"), hook, prepend)


def _callable(hook):
    if not callable(hook):
        raise FlameError(f"a hook must be callable, got {type(hook).__name__}\n  at {user_location()}")
    return hook


def state_dict_pre(module, prefix: str, keep_vars: bool) -> None:
    """module's state_dict pre-hooks (register_state_dict_pre_hook)."""
    for hook in list(module.__dict__.get("_state_dict_pre_hooks", {}).values()):
        hook(module, prefix, keep_vars)


def state_dict_post(module, state_dict, prefix: str, local_metadata: dict) -> None:
    """module's state_dict post-hooks (register_state_dict_post_hook), with torch's local metadata."""
    for hook in list(module.__dict__.get("_state_dict_hooks", {}).values()):
        if hook(module, state_dict, prefix, local_metadata) is not None:
            raise RuntimeError("state_dict post-hook must return None")


def load_post_hooked(root) -> list:
    """The modules under root (root last, each once) with load_state_dict post-hooks."""
    return [m for m in reversed(list(root.modules())) if m.__dict__.get("_load_state_dict_post_hooks")]


def load_post(modules: list, keys) -> None:
    """Run the load_state_dict post-hooks of `modules` with the load's incompatible keys."""
    for m in modules:
        for hook in list(m.__dict__["_load_state_dict_post_hooks"].values()):
            if hook(m, keys) is not None:
                raise RuntimeError("load_state_dict post-hooks should return None: they may change "
                                   "incompatible_keys in place")


def call(module, args: tuple, kwargs: dict):
    """module(*args, **kwargs): forward() with the hooks around it, in torch's order."""
    trace = current_trace.get()
    d = module.__dict__
    if trace is not None:
        trace.guard(hooks_state, "the hooks registered on leaf tensors and modules")
        # a forward set on the instance (module.forward = f) after the trace is another program
        trace.read_part(module, "forward", d, "forward")
    if not (any(_global.values()) or any(d.get(k) for k in _KINDS)):
        return module.forward(*args, **kwargs)
    hooks = [*_global["_forward_hooks"].items(), *d.get("_forward_hooks", {}).items()]
    kw = {**_global_with_kwargs, **d.get("_forward_hooks_with_kwargs", {})}
    called: set = set()
    try:  # as torch's: the always_call forward hooks not yet run run when a hook or forward() raises
        for hook_id, hook in (*_global["_forward_pre_hooks"].items(), *d.get("_forward_pre_hooks", {}).items()):
            with_kwargs = hook_id in d.get("_forward_pre_hooks_with_kwargs", {})
            args, kwargs = _pre_hook(module, hook, with_kwargs, args, kwargs)
        full = [*_global["_backward_hooks"].values(), *d.get("_backward_hooks", {}).values()]
        pre = [*_global["_backward_pre_hooks"].values(), *d.get("_backward_pre_hooks", {}).values()]
        watch = _BackwardCall(module, full, pre) if full or pre else None
        if watch is not None:
            args = watch.wrap_inputs(args)
        result = module.forward(*args, **kwargs)
        for hook_id, hook in hooks:
            called.add(hook_id)
            got = _forward_hook(module, hook, hook_id in kw, args, kwargs, result)
            result = result if got is None else got
    except Exception:
        always = {**_global_always, **d.get("_forward_hooks_always_called", {})}
        for hook_id, hook in hooks:
            if hook_id in always and hook_id not in called:
                try:
                    _forward_hook(module, hook, hook_id in kw, args, kwargs, None)
                except Exception as e:  # torch's: the first error is the one raised
                    warnings.warn(
                        "module forward hook with ``always_call=True`` raised an exception that was silenced as "
                        f"another error was raised in forward: {e}",
                        stacklevel=user_stacklevel(),
                    )
        raise
    return watch.wrap_outputs(result) if watch is not None else result


def _pre_hook(module, hook: Callable, with_kwargs: bool, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if with_kwargs:
        got = call_hook(hook, module, args, kwargs)
        if got is None:
            return args, kwargs
        if not (isinstance(got, tuple) and len(got) == 2):
            raise FlameError(
                f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got "
                f"{got!r}\n  at {user_location()}"
            )
        return tuple(got[0]) if isinstance(got[0], (tuple, list)) else (got[0],), dict(got[1])
    got = call_hook(hook, module, args)
    if got is None:
        return args, kwargs
    return (got if isinstance(got, tuple) else (got,)), kwargs


def _forward_hook(module, hook: Callable, with_kwargs: bool, args: tuple, kwargs: dict, result):
    return call_hook(hook, module, args, kwargs, result) if with_kwargs else call_hook(hook, module, args, result)


def _wants_grad(t) -> bool:
    """A tensor backward would give a gradient: requires grad (while tracing, computed from one that does)."""
    return isinstance(t, Tensor) and t.dtype.is_float and (t.requires_grad or not t.is_leaf)


def _identity(t: Tensor) -> Tensor:
    return t * 1


class _BackwardCall:
    """The backward hooks of one module call: the identities its tensor inputs and outputs pass
    through and the group hooks on them (torch's BackwardHook)."""

    def __init__(self, module, full: list, pre: list):
        self.module, self.full, self.pre = module, full, pre
        self.n_inputs, self.input_pos, self.grad_outputs, self.input_meta = 0, None, None, []
        self.n_outputs, self.output_pos = 0, None

    def _wrap(self, values: tuple, on_grads: Callable) -> tuple[tuple, list[int] | None]:
        """values with each tensor that wants a gradient passed through an identity carrying a group hook;
        the positions (in values) of those, or None when none does. The hooks see one gradient per value,
        None where a value is not a tensor or gets no gradient (torch's BackwardHook)."""
        pos = [i for i, v in enumerate(values) if _wants_grad(v)]
        if not pos or not grad_enabled.get():
            return values, None
        new = list(values)
        for i in pos:
            new[i] = _identity(values[i])
        GroupHook([new[i] for i in pos], on_grads)
        return tuple(new), pos

    def wrap_inputs(self, args: tuple) -> tuple:
        self.n_inputs = len(args)
        wrapped, self.input_pos = self._wrap(args, self._on_inputs)
        # the full hooks see zeros for a tensor input without a gradient (one that needs none, or that the
        # backward does not reach), as torch's (its BackwardHookFunction materializes them)
        self.input_meta = [(a.shape, a.dtype) if isinstance(a, Tensor) else None for a in args]
        return wrapped

    def wrap_outputs(self, result):
        one = isinstance(result, Tensor)
        if not one and not isinstance(result, tuple):
            return result
        values = (result,) if one else result
        self.n_outputs = len(values)
        values, self.output_pos = self._wrap(values, self._on_outputs)
        return values[0] if one else values

    def _on_outputs(self, grads: tuple) -> tuple:
        gout = [None] * self.n_outputs
        for k, g in zip(self.output_pos, grads):
            gout[k] = g
        gout = tuple(gout)
        for hook in self.pre:
            got = call_hook(hook, self.module, gout)
            check_traced_result(hook, got, "grad_output")
            if got is not None:
                gout = _same_count(hook, got, len(gout), "grad_output")
        self.grad_outputs = gout
        if self.input_pos is None:  # no input wants a gradient: the full hooks run now, on Nones
            if self.full:
                warnings.warn(_NO_INPUT_GRAD, UserWarning, stacklevel=user_stacklevel())
            for hook in self.full:
                got = call_hook(hook, self.module, (None,) * self.n_inputs, gout)
                check_traced_result(hook, got, "grad_input")
                if got is not None and not all(g is None for g in got):
                    raise AutogradError(
                        f"{_name(hook)}: backward hook for a module where no input requires "
                        f"gradient should always return None or None for all gradients"
                    )
        return tuple(gout[k] for k in self.output_pos)

    def _on_inputs(self, grads: tuple) -> tuple:
        if self.grad_outputs is None:  # the gradient reached the inputs through no output (torch's: no hook)
            return grads
        gin = [None] * self.n_inputs
        for k, g in zip(self.input_pos, grads):
            gin[k] = g
        gin = tuple(g if g is not None or meta is None else zeros(*meta[0], dtype=meta[1])
                    for g, meta in zip(gin, self.input_meta))
        for hook in self.full:
            got = call_hook(hook, self.module, gin, self.grad_outputs)
            check_traced_result(hook, got, "grad_input")
            if got is not None:
                gin = _same_count(hook, got, len(gin), "grad_input")
        self.grad_outputs = None
        return tuple(gin[k] for k in self.input_pos)


_NO_INPUT_GRAD = (
    "Full backward hook is firing when gradients are computed with respect to module outputs since no inputs "
    "require gradients. See https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
    "#torch.nn.Module.register_full_backward_hook for more details."
)


def _name(hook: Callable) -> str:
    return getattr(hook, "__qualname__", type(hook).__name__)


def _same_count(hook: Callable, got, n: int, what: str) -> tuple:
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    if len(got) != n:
        raise AutogradError(
            f"{_name(hook)}: backward hook returned an invalid number of {what}, got {len(got)}, but expected {n}"
        )
    return got
