"""flame.nn.utils.parametrize: a module's tensor computed from others by small modules, as
torch.nn.utils.parametrize.

    parametrize.register_parametrization(linear, "weight", Symmetric())
    linear.weight                                    # Symmetric()(linear.parametrizations.weight.original)
    linear.weight = w                                # original = Symmetric().right_inverse(w)

Registering moves the tensor to `module.parametrizations.<name>.original` (a ParametrizationList, a
ModuleList of the parametrizations) and gives the module's class a property `<name>` that computes
the tensor at each read; the module's class becomes a subclass `Parametrized<Class>` of its own.
When `right_inverse` returns a sequence, the tensors are `original0`, `original1`, ... and the first
parametrization takes them all. state_dict keys are PyTorch's (`parametrizations.weight.original`,
`parametrizations.weight.0.<buffer>`), so state_dicts move between torch and flame. Inside
@flame.compile the parametrization is traced at each read, its gradient reaching the originals."""

from __future__ import annotations

import copyreg
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from copy import deepcopy

from flame.errors import TraceError
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.tensor import Tensor
from flame.nn.module import Module, ModuleDict, ModuleList
from flame.nn.parameter import Parameter

__all__ = [
    "ParametrizationList",
    "cached",
    "is_parametrized",
    "register_parametrization",
    "remove_parametrizations",
    "transfer_parametrizations_and_params",
    "type_before_parametrizations",
]

_cache_depth = [0]
_cache: dict[tuple[int, str, int], Tensor] = {}


@contextmanager
def cached() -> Iterator[None]:
    """Within it, a parametrized tensor is computed once, at its first read, and reused (a weight read
    by every step of a recurrent loop), as torch's. Inside @flame.compile the cache holds the traced
    value of that trace alone."""
    _cache_depth[0] += 1
    try:
        yield
    finally:
        _cache_depth[0] -= 1
        if not _cache_depth[0]:
            _cache.clear()


def _register_parameter_or_buffer(module: Module, name: str, x: Tensor) -> None:
    if isinstance(x, Parameter):
        module.register_parameter(name, x)
    else:
        module.register_buffer(name, x)


def _maybe_set(dest: Tensor, src: Tensor) -> None:
    """dest takes src's values in place, as torch's `set_` (the same object stays bound, so optimizers
    holding it keep it): eagerly it shares src's buffer (any shape); inside @flame.compile it is a copy,
    so the shape must stay."""
    if dest.is_traced or src.is_traced or current_trace.get() is not None:
        if tuple(dest.shape) != tuple(src.shape):
            raise TraceError(
                f"parametrize: assigning a tensor of shape {list(src.shape)} to an original of shape "
                f"{list(dest.shape)} inside @flame.compile; a change of shape happens eagerly only\n"
                f"  at {user_location()}"
            )
        with no_grad():
            dest.copy_(src)
        return
    dest.data = src.detach()


def _right_inverse_at_registration(modules: Sequence[Module], original: Tensor):
    """original passed back through each parametrization's right_inverse (the last first); one without
    it, or raising NotImplementedError, passes it on unchanged."""
    with no_grad():
        new = original
        for module in reversed(modules):
            if hasattr(module, "right_inverse"):
                try:
                    new = module.right_inverse(new)
                except NotImplementedError:
                    pass
    if not isinstance(new, (Tensor, Sequence)):
        raise ValueError(
            f"'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). Got {type(new).__name__}"
        )
    return new


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, and the tensor(s) they start from:
    `original` (a Parameter when the tensor was one, else a buffer), or `original0`, `original1`, ...
    when the first right_inverse returns a sequence. Calling it computes the parametrized tensor."""

    def __init__(self, modules: Sequence[Module], original: Tensor, unsafe: bool = False) -> None:
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        shape, dtype = tuple(original.shape), original.dtype
        new = _right_inverse_at_registration(self, original)
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if original.dtype != new.dtype:
                raise ValueError(
                    "When `right_inverse` outputs one tensor, it may not change the dtype.\n"
                    f"original.dtype: {original.dtype}\nright_inverse(original).dtype: {new.dtype}"
                )
            with no_grad():
                _maybe_set(original, new)
            _register_parameter_or_buffer(self, "original", original)
        else:
            self._register_originals(new, original)
        if not self.unsafe:
            z = self()
            _check_same(z, shape, dtype, "Registering a parametrization", "unparametrized", "parametrized",
                        flag="`unsafe` flag")

    def _register_originals(self, new: Sequence, original: Tensor) -> None:
        for i, t in enumerate(new):
            if not isinstance(t, Tensor):
                raise ValueError(
                    "'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). "
                    f"Got element {i} of the sequence with type {type(t).__name__}."
                )
            t = t.detach()
            if isinstance(original, Parameter):
                t = Parameter(t, original.requires_grad)
            else:
                t.requires_grad_(original.requires_grad)
            _register_parameter_or_buffer(self, f"original{i}", t)

    def right_inverse(self, value: Tensor) -> None:
        """Set the originals so that the parametrized tensor is `value`: value passed back through
        every parametrization's right_inverse (the last first), without gradient; each original keeps
        its object and dtype."""
        with no_grad():
            for module in reversed(self):
                if not hasattr(module, "right_inverse"):
                    raise RuntimeError(f"parametrization {type(module).__name__} does not implement right_inverse.")
                value = module.right_inverse(value)
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(f"`right_inverse` should return a tensor. Got {type(value).__name__}")
                if value.dtype != self.original.dtype:
                    raise ValueError(
                        f"The tensor returned by `right_inverse` has dtype {value.dtype} while "
                        f"`original` has dtype {self.original.dtype}"
                    )
                _maybe_set(self.original, value)
                return
            if not isinstance(value, Sequence):
                raise ValueError(f"'right_inverse' must return a sequence of tensors. Got {type(value).__name__}.")
            if len(value) != self.ntensors:
                raise ValueError(
                    f"'right_inverse' must return a sequence of tensors of length {self.ntensors}. "
                    f"Got a sequence of length {len(value)}."
                )
            for i, t in enumerate(value):
                original_i = getattr(self, f"original{i}")
                if not isinstance(t, Tensor):
                    raise ValueError(
                        f"'right_inverse' must return a sequence of tensors. Got element {i} of "
                        f"type {type(t).__name__}."
                    )
                if original_i.dtype != t.dtype:
                    raise ValueError(
                        f"Tensor {i} returned by `right_inverse` has dtype {t.dtype} while "
                        f"`original{i}` has dtype {original_i.dtype}"
                    )
                _maybe_set(original_i, t)

    def forward(self) -> Tensor:
        """The parametrized tensor: the first parametrization on the original(s), each next one on the
        result."""
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in list(self)[1:]:
            x = module(x)
        return x


def _check_same(x, shape: tuple, dtype, what: str, before: str, after: str, flag: str = "the `unsafe` flag") -> None:
    """A parametrization's result keeps the tensor's shape and dtype (unless unsafe), as torch checks (its
    messages name `flag` as torch's do: "the `unsafe` flag", or "`unsafe` flag" on a first registration)."""
    if not isinstance(x, Tensor):
        raise ValueError(f"A parametrization must return a tensor. Got {type(x).__name__}.")
    if x.dtype != dtype:
        raise ValueError(
            f"{what} may not change the dtype of the tensor, unless {flag} is enabled.\n"
            f"{before} dtype: {dtype}\n{after} dtype: {x.dtype}"
        )
    if tuple(x.shape) != tuple(shape):
        raise ValueError(
            f"{what} may not change the shape of the tensor, unless {flag} is enabled.\n"
            f"{before} shape: {list(shape)}\n{after} shape: {list(x.shape)}"
        )


def _default_deepcopy(self, memo: dict):
    obj = memo.get(id(self))
    if obj is not None:
        return obj
    replica = self.__new__(self.__class__)
    memo[id(self)] = replica
    replica.__dict__ = deepcopy(self.__dict__, memo)
    for slot in copyreg._slotnames(self.__class__):
        if hasattr(self, slot):
            setattr(replica, slot, deepcopy(getattr(self, slot), memo))
    return replica


def _getstate(self):
    raise RuntimeError(
        "Serialization of parametrized modules is only supported through state_dict(): save "
        "module.state_dict() and load it into a module parametrized the same way"
    )


def _inject_new_class(module: Module) -> None:
    """module's class becomes `Parametrized<Class>`, a subclass of its own that holds the properties."""
    cls = module.__class__

    def __setattr__(self, name: str, value) -> None:
        # a Parameter or Module under a parametrized name would hide behind the property: refused, as torch's
        if is_parametrized(self, name) and isinstance(value, (Parameter, Module)):
            raise KeyError(f"attribute '{name}' already exists")
        cls.__setattr__(self, name, value)

    dct = {"__getstate__": _getstate, "__setattr__": __setattr__}
    if not hasattr(cls, "__deepcopy__"):
        dct["__deepcopy__"] = _default_deepcopy
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), dct)


def _inject_property(module: Module, tensor_name: str) -> None:
    """A property `tensor_name` on module's (injected) class: reading computes the parametrization
    (once within `cached()`), assigning runs its right_inverse."""
    if hasattr(module, tensor_name):
        raise AttributeError(f"Module already has an attribute named '{tensor_name}'")

    def get_parametrized(self) -> Tensor:
        parametrization = self.parametrizations[tensor_name]
        if not _cache_depth[0]:
            return parametrization()
        key = (id(self), tensor_name, id(current_trace.get()))
        tensor = _cache.get(key)
        if tensor is None:
            tensor = _cache[key] = parametrization()
        return tensor

    def set_original(self, value: Tensor) -> None:
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(get_parametrized, set_original))


def register_parametrization(
    module: Module, tensor_name: str, parametrization: Module, *, unsafe: bool = False
) -> Module:
    """Make `module.<tensor_name>` (a parameter or buffer) the result of `parametrization` applied to
    an original tensor, as torch's: the first registration moves the tensor to
    `module.parametrizations.<tensor_name>.original` (through `parametrization.right_inverse` when it
    has one; `original0`, `original1`, ... when that returns a sequence); a later one on the same name
    chains after the earlier ones. unsafe=True allows a change of shape or dtype. Returns module."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            _check_chained(module, tensor_name, parametrization)
        plist = module.parametrizations[tensor_name]
        plist.append(parametrization)
        plist.unsafe = plist.unsafe or unsafe
    elif tensor_name in module._buffers or tensor_name in module._parameters:
        original = getattr(module, tensor_name)
        if original is None:
            raise ValueError(
                f"Module '{type(module).__name__}' has its {tensor_name!r} set to None: nothing to parametrize"
            )
        plist = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_new_class(module)
            module.parametrizations = ModuleDict()
        _inject_property(module, tensor_name)
        module.parametrizations[tensor_name] = plist
    else:
        raise ValueError(
            f"Module '{module}' does not have a parameter, a buffer, or a "
            f"parametrized element with name '{tensor_name}'"
        )
    return module


def _check_chained(module: Module, tensor_name: str, parametrization: Module) -> None:
    """A parametrization chained after others keeps the tensor's shape and dtype, and so does its
    right_inverse (torch's checks)."""
    y = getattr(module, tensor_name)
    x = parametrization(y)
    _check_same(
        x,
        tuple(y.shape),
        y.dtype,
        "Registering a parametrization",
        f"module.{tensor_name}",
        f"parametrization(module.{tensor_name})",
    )
    if hasattr(parametrization, "right_inverse"):
        try:
            z = parametrization.right_inverse(x)
        except NotImplementedError:
            return
        if not isinstance(z, Tensor):
            raise ValueError(f"parametrization.right_inverse must return a tensor. Got: {type(z).__name__}")
        for what, want, got in (("dtype", y.dtype, z.dtype), ("shape", list(y.shape), list(z.shape))):
            if want != got:
                raise ValueError(
                    f"The tensor returned by parametrization.right_inverse must have the same {what} as "
                    f"module.{tensor_name}, unless the `unsafe` flag is enabled.\n"
                    f"module.{tensor_name}.{what}: {want}\nreturned {what}: {got}"
                )


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether `module` has a parametrization on `tensor_name` (on any tensor when None)."""
    parametrizations = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(parametrizations, ModuleDict):
        return False
    return len(parametrizations) > 0 if tensor_name is None else tensor_name in parametrizations


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True) -> Module:
    """Undo the parametrizations of `tensor_name`, as torch's: it becomes a plain parameter (buffer)
    again, holding the parametrized value (leave_parametrized=True, the original object taking it
    in place) or the original (False; refused when there are several originals). The module gets its
    class back when no parametrization is left. Returns module."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                t = getattr(module, tensor_name)
                _maybe_set(original, t)
    elif leave_parametrized:
        t = getattr(module, tensor_name)
        original = Parameter(t.detach()) if t.requires_grad else t.detach()
    else:
        raise ValueError(
            "Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is "
            "parametrized in terms of a sequence of tensors."
        )
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    _register_parameter_or_buffer(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module


def type_before_parametrizations(module: Module) -> type:
    """The module's class before any parametrization was registered on it."""
    return module.__class__.__bases__[0] if is_parametrized(module) else type(module)


def transfer_parametrizations_and_params(
    from_module: Module, to_module: Module, tensor_name: str | None = None
) -> Module:
    """Register from_module's parametrizations (of `tensor_name`, or all) on to_module and make it
    share their originals, as torch's. Returns to_module."""
    if not is_parametrized(from_module):
        return to_module
    names = list(from_module.parametrizations) if tensor_name is None else [tensor_name]
    for name in names:
        if not hasattr(to_module, name):
            setattr(to_module, name, Parameter(getattr(from_module, name).detach()))
        source = from_module.parametrizations[name]
        for p in source:
            register_parametrization(to_module, name, p)
        target = to_module.parametrizations[name]
        if source.is_tensor:
            _register_parameter_or_buffer(target, "original", source.original)
        else:
            for i in range(source.ntensors):
                _register_parameter_or_buffer(target, f"original{i}", getattr(source, f"original{i}"))
    return to_module
