"""flame.nn.Module and the containers: a tree of modules owning Parameters and buffers, with the
PyTorch API people know (parameters, named_modules, state_dict, train/eval, ...)."""

from __future__ import annotations

import functools
import types
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from flame.checkpoint import copy_pairs
from flame.errors import ArgumentTypeError, CheckpointError
from flame.frontend.compile import compile as compile_function
from flame.frontend.context import TRACING_HOOKS, current_trace, user_location
from flame.frontend.guards import is_plain, users_function
from flame.frontend.tensor import Tensor
from flame.nn import module_hooks, module_load
from flame.nn.module_convert import ModuleConversion
from flame.nn.module_hooks import ModuleHooks
from flame.nn.module_lookup import ModuleLookup, check_new_name
from flame.nn.module_repr import module_list_repr, module_repr
from flame.nn.module_state import (
    EXTRA_STATE,
    ExtraStateSlot,
    IncompatibleKeys,
    mismatch_message,
    not_a_state_dict,
)
from flame.nn.parameter import Buffer, Parameter, buffer_persistent


def _reading_getattribute(self, name: str) -> Any:
    """Module.__getattribute__ while a body is traced: a plain value read from a module's own
    attribute (`self.eps`, `self.scale`, `self.p`) or its class's (`scale = 2.0` in the class body)
    becomes a guard of the trace, so a call after it changed traces again (with a
    flame.RecompileWarning) instead of replaying the value baked in; a method of the user's fetched
    (forward) has the globals it reads guarded."""
    value = object.__getattribute__(self, name)
    if name.startswith("__"):
        return value
    if is_plain(value):
        trace = current_trace.get()
        if trace is not None and (name in object.__getattribute__(self, "__dict__")
                                  or _class_attribute(type(self), name) is value):  # `scale = 2.0` in the class
            trace.read_attribute(self, name, value)
    elif isinstance(value, _FUNCTIONS) or (isinstance(value, Tensor) and not value.is_traced):
        # a function held by the module (self.act = F.gelu) or a plain tensor attribute, by identity
        trace = current_trace.get()
        if trace is not None and name in (d := object.__getattribute__(self, "__dict__")):
            trace.read_part(self, f"attribute {name!r}", d, name)
    elif name == "_modules":  # the children, as a container's forward or indexing reads them
        trace = current_trace.get()
        if trace is not None:
            trace.read_part(self, "submodules", value, None)
    elif type(value) is types.MethodType and users_function(value.__func__):  # forward, self.helper
        trace = current_trace.get()
        if trace is not None:
            trace.read_function(value.__func__, self)
    return value


def _class_attribute(cls: type, name: str) -> Any:
    """What cls's body (or a base class's) binds to name, found as attribute lookup finds it; where none
    does, this function itself (which no plain value is)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _class_attribute


_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, functools.partial)


def _watch_attributes(tracing: bool) -> None:
    """Installed in frontend.context.TRACING_HOOKS: modules watch their attribute reads only while a
    body is traced (no cost to eager code)."""
    if tracing:
        Module.__getattribute__ = _reading_getattribute
    elif "__getattribute__" in Module.__dict__:
        del Module.__getattribute__


TRACING_HOOKS.append(_watch_attributes)


class Module(ModuleHooks, ModuleLookup, ModuleConversion):
    """Base class of every layer. Assigning a Parameter, a Module or (via register_buffer) a Tensor to
    an attribute registers it, so parameters() and state_dict() find it. Hooks: nn/module_hooks.py."""

    _version: int = 1  # the version state_dict's metadata records, which _load_from_state_dict reads

    @property
    def training(self) -> bool:
        """True in training mode, False after eval(). Read while @flame.compile traces (Dropout reads
        it), the mode becomes a guard of that trace: a call after train()/eval() changed it traces
        again (or reuses the trace made in that mode), with a flame.RecompileWarning."""
        mode = self.__dict__.get("_training", True)
        trace = current_trace.get()
        if trace is not None:
            trace.read_mode(self, mode)
        return mode

    @training.setter
    def training(self, mode: bool) -> None:
        now = self.__dict__.get("_training", True)
        if bool(mode) is not now and (trace := current_trace.get()) is not None:
            trace.write_mode(self, now)  # a compiled call switches it again as the body did
        self.__dict__["_training"] = bool(mode)

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- attribute registration -------------------------------------------------------------------
    def _check_init(self, name: str) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {name!r} before Module.__init__() was called (call "
                f"super().__init__() first in {type(self).__name__}.__init__)"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        params, bufs, mods = (self.__dict__.get(k) for k in ("_parameters", "_buffers", "_modules"))
        if isinstance(value, Parameter):
            self._check_init(name)
            self._forget(name, keep="_parameters")
            params[name] = value
        elif isinstance(value, Module):
            self._check_init(name)
            self._forget(name, keep="_modules")
            mods[name] = value
        elif isinstance(value, Buffer):
            self._check_init(name)
            self.__dict__.pop(name, None)  # a plain attribute of that name gives way, as in torch
            self.register_buffer(name, value, persistent=buffer_persistent(value))
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__} as parameter {name!r} of "
                    f"{type(self).__name__} (expected nn.Parameter or None)"
                )
            params[name] = None
        elif mods is not None and name in mods:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__} as child module {name!r} (expected nn.Module or None)"
                )
            mods[name] = None
        elif bufs is not None and name in bufs:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as buffer {name!r} (expected a Tensor or None)")
            bufs[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: str = "") -> None:
        """Unregister `name` everywhere but the registry `keep`, where a new value replaces the old one
        in its place (a replaced child keeps its position in a Sequential, as in PyTorch)."""
        self.__dict__.pop(name, None)
        for k in ("_parameters", "_buffers", "_modules"):
            if k != keep:
                self.__dict__[k].pop(name, None)
        self._non_persistent.discard(name)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for k in ("_parameters", "_buffers", "_modules"):
            if k in d and name in d[k]:
                value = d[k][name]
                trace = current_trace.get()
                # a child (self.fc), a parameter or a buffer read: the trace holds while it is the same
                # object (`self.scale = new_tensor` between steps is another input, not the one bound)
                if trace is not None and not (isinstance(value, Tensor) and value.is_traced):
                    trace.read_part(self, f"attribute {name!r}", d[k], name)
                return value
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for k in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(k, {}):
                del self.__dict__[k][name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        """The attributes, parameters, buffers and children, without names that start with a digit (a
        Sequential's "0", "1", ... are no identifiers), as torch's."""
        names = set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules)
        return sorted(n for n in names if not n[:1].isdigit())

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        self._check_init(name)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter({name!r}): expected nn.Parameter or None, got {type(param).__name__}")
        check_new_name(self, "parameter", name, "_parameters")
        self._forget(name, keep="_parameters")  # a name registered again keeps its place, as torch's
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """A non-trainable tensor saved in state_dict (unless persistent=False), e.g. running statistics.
        Inside @flame.compile it becomes a `state` input, so in-place updates are written back."""
        self._check_init(name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer({name!r}): expected a Tensor or None, got {type(tensor).__name__}")
        check_new_name(self, "buffer", name, "_buffers")
        self._forget(name, keep="_buffers")
        if tensor is not None and tensor._role is None:
            tensor._role = "state"
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise ArgumentTypeError(f"{type(module).__name__} is not a Module subclass (add_module({name!r}) of "
                                    f"{type(self).__name__})\n  at {user_location()}")
        self._check_init(name)
        check_new_name(self, "module", name, "_modules")
        self._forget(name, keep="_modules")
        self._modules[name] = module

    register_module = add_module

    # ---- walking the tree -------------------------------------------------------------------------
    def named_modules(
        self, prefix: str = "", memo: set | None = None, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """(dotted name, module) for this module and every one below it, depth first; a module
        reached twice is given once unless remove_duplicate=False (as PyTorch's)."""
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(f"{prefix}.{name}" if prefix else name, memo, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def _named_members(
        self, kind: str, prefix: str, recurse: bool, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        seen = set()
        mods = self.named_modules(prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mp, m in mods:
            for name, t in m.__dict__[kind].items():
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (f"{mp}.{name}" if mp else name), t

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) for every parameter, each shared parameter once unless
        remove_duplicate=False."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer) for every buffer, each shared one once unless remove_duplicate=False."""
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn: Callable[[Module], None]) -> Module:
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- modes ------------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode here and below. A @flame.compile'd function that read the mode (Dropout
        does) keeps one trace per mode: switching re-traces once, with a flame.RecompileWarning."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():  # each child's own train(), which a subclass may override, as torch's
            m.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.zero_()

    # ---- calling ----------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function '
                                  f"(define forward() in its class)\n  at {user_location()}")

    def __call__(self, *args, **kwargs):
        """forward(*args, **kwargs), with the module's and the global hooks around it (nn/module_hooks.py);
        after compile(), the compiled call (outside another compiled function)."""
        compiled = self.__dict__.get("_compiled_call")
        if compiled is not None and current_trace.get() is None:
            return compiled(*args, **kwargs)
        return module_hooks.call(self, args, kwargs)

    def compile(self, *args, **kwargs) -> None:
        """Compile this module's calls in place, as torch's Module.compile: from now on `module(...)`
        (its hooks included) is traced once per input signature by flame.compile and replayed, and a
        backward() after it runs through the compiled graph. The arguments are flame.compile's
        (name=, memory_budget=, activation_budget=, dynamic=, cache_limit=). Inside another compiled
        function the call is traced into that function, as torch inlines it."""
        kwargs.setdefault("name", type(self).__name__)
        call = compile_function(lambda *a, **k: module_hooks.call(self, a, k), *args, **kwargs)
        object.__setattr__(self, "_compiled_call", call)

    # ---- state_dict -------------------------------------------------------------------------------
    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "",
                   keep_vars: bool = False) -> OrderedDict[str, Any]:
        """Name -> tensor for every parameter and persistent buffer, each name `prefix` followed by its
        dotted path (prefix is used as given: "model." gives "model.weight"). The tensors share memory
        with the module (detached unless keep_vars). As torch's: each module's _save_to_state_dict writes
        its own entries (a module that defines get_extra_state adds what it returns under
        `<its name>._extra_state`), each child's state_dict its part, into `destination` (a new
        OrderedDict whose `_metadata` holds each module's {"version": _version}, by default)."""
        if args:  # torch's deprecated positional form: (destination, prefix, keep_vars)
            warnings.warn("Positional args are being deprecated, use kwargs instead. Refer to "
                          "https://pytorch.org/docs/main/generated/torch.nn.Module.html#torch.nn.Module.state_dict"
                          " for details.", FutureWarning, stacklevel=2)
            destination = args[0] if destination is None else destination
            prefix = args[1] if len(args) > 1 and prefix == "" else prefix
            keep_vars = args[2] if len(args) > 2 and keep_vars is False else keep_vars
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        module_hooks.state_dict_pre(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, child in self._modules.items():
            if child is not None:
                child.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        module_hooks.state_dict_post(self, destination, prefix, local_metadata)
        return destination

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        """Put this module's own entries (not its children's) in destination under prefix, as torch's:
        its parameters, persistent buffers and extra state. Override it to save something else."""
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                destination[prefix + name] = b if keep_vars else b.detach()
        if type(self).get_extra_state is not Module.get_extra_state:
            destination[prefix + EXTRA_STATE] = self.get_extra_state()

    def get_extra_state(self) -> Any:
        """What state_dict keeps of this module besides its parameters and buffers: define it (and
        set_extra_state) in a subclass, as in torch. The base class has none."""
        raise RuntimeError(f"{type(self).__name__}.get_extra_state(): define it in the subclass whose state_dict keeps "
                           f"extra state (state_dict calls it only where it is defined)")

    def set_extra_state(self, state: Any) -> None:
        """Take back what get_extra_state returned (load_state_dict calls it with the `_extra_state`
        entry); define it in a subclass, as in torch."""
        raise RuntimeError(f"{type(self).__name__}.set_extra_state(): define it in the subclass that loads extra "
                           f"state (load_state_dict calls it only where it is defined)")

    def load_state_dict(
        self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False
    ) -> IncompatibleKeys:
        """Copy tensors into this module's parameters and buffers (in place: the same objects stay
        bound, so optimizers and compiled steps see the new values; each keeps its dtype). Raises
        flame.CheckpointError (a RuntimeError, as PyTorch's) listing every missing, unexpected and
        mis-shaped entry; nothing is changed when it raises. With strict=False, missing and unexpected
        keys are returned instead (shapes must still fit). assign=True binds the loaded tensors
        themselves instead, as PyTorch's (their dtype; a parameter keeps its requires_grad; an optimizer
        made before holds the old ones). A path is refused (flame.ArgumentTypeError, a TypeError as in
        PyTorch): load the file first. Each module's _load_from_state_dict takes its part, as torch's
        (nn/module_load.py). Where a module has load_state_dict post-hooks
        (register_load_state_dict_post_hook), the tensors are copied first, the hooks may change the
        incompatible keys, and strict then judges the keys they leave, as torch's."""
        if not isinstance(state_dict, Mapping):
            raise ArgumentTypeError(not_a_state_dict(type(self).__name__, state_dict))
        post = module_hooks.load_post_hooked(self)
        pairs, keys = self.plan_load(state_dict, strict and not post, assign)
        if assign:
            self._assign(pairs)
        else:
            copy_pairs(pairs)
        if post:
            module_hooks.load_post(post, keys)
            if strict and (keys.missing_keys or keys.unexpected_keys):
                raise CheckpointError(mismatch_message(type(self).__name__, keys.missing_keys,
                                                        keys.unexpected_keys, [], True))
        return keys

    def _assign(self, pairs: list) -> None:
        """load_state_dict(assign=True): each destination's slot in its module takes the source tensor
        itself, as torch's (a Parameter stays that object, with the destination's requires_grad)."""
        slots = {}
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for name, t in store.items():
                    if t is not None:
                        slots.setdefault(id(t), []).append((store, name))
        for dst, src in pairs:
            if isinstance(dst, ExtraStateSlot):
                dst.copy_(src)
            for store, name in slots.get(id(dst), []):
                store[name] = _assigned(dst, src)

    def plan_load(
        self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False
    ) -> tuple[list, IncompatibleKeys]:
        """Check state_dict against this module, changing nothing but what a module's own
        _load_from_state_dict changes by itself: (destination, source) pairs to copy, and the skipped
        keys. Raises flame.CheckpointError as load_state_dict does."""
        return module_load.plan(self, state_dict, strict, assign)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        """Take this module's own entries of state_dict (those under prefix), as torch's: runs its
        load_state_dict pre-hooks, matches its parameters, persistent buffers and extra state, and appends
        to the lists what is missing, unexpected or wrong. Override it to convert an older checkpoint
        (local_metadata["version"] is the saving module's _version, where the state_dict has metadata)
        and call it through super()."""
        module_load.load_own(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                             error_msgs, type(self).set_extra_state is not Module.set_extra_state)

    # ---- printing ---------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return module_repr(self)


def _assigned(dst: Tensor, src: Tensor) -> Tensor:
    """What load_state_dict(assign=True) binds where dst was: src, made a Parameter with dst's
    requires_grad where dst is one (as torch's); a buffer src becomes a `state` input, as register_buffer's."""
    if isinstance(dst, Parameter):
        if not isinstance(src, Parameter):
            return Parameter(src.detach(), requires_grad=dst.requires_grad)
        src.requires_grad = dst.requires_grad
        return src
    if src._role is None:
        src._role = "state"
    return src


class _ModuleSequence(Module):
    """The list protocol of Sequential and ModuleList over modules registered as "0", "1", ...,
    PyTorch's: negative indices, insert and del renumber, a replaced entry keeps its place."""

    def _index(self, i: int) -> str:
        n = len(self._modules)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for {type(self).__name__} of length {n}")
        return list(self._modules)[i % n]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __setitem__(self, i: int, module: Module) -> None:
        setattr(self, self._index(i), module)

    def __delitem__(self, i: int | slice) -> None:
        keys = list(self._modules)[i] if isinstance(i, slice) else [self._index(i)]
        for k in keys:
            del self._modules[k]
        self._renumber()

    def _renumber(self) -> None:
        items = list(self._modules.values())
        self._modules.clear()
        for j, m in enumerate(items):
            self._modules[str(j)] = m

    def append(self, module: Module):
        """Add a module at the end."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]):
        """Add each module at the end."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Put a module before position index (negative counts from the end), as list.insert."""
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError(f"index {index} is out of range for {type(self).__name__} of length {n}")
        items = list(self._modules.values())
        items.insert(index + n if index < 0 else index, module)
        self._modules.clear()
        for j, m in enumerate(items):
            self.add_module(str(j), m)

    def pop(self, i: int = -1) -> Module:
        """Remove and return the module at position i."""
        m = self[i]
        del self[i]
        return m

    def __iadd__(self, modules: Iterable[Module]):
        return self.extend(modules)


class Sequential(_ModuleSequence):
    """Modules applied one after another: Sequential(a, b, c)(x) == c(b(a(x)))."""

    def __init__(self, *modules: Module | OrderedDict):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (dict, OrderedDict)):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def insert(self, index: int, module: Module) -> Sequential:
        """Put a module before position index, as list.insert; returns this Sequential, as torch's."""
        super().insert(index, module)
        return self

    def __getitem__(self, i: int | slice):
        if isinstance(i, slice):  # the entries keep their names, as PyTorch's
            return Sequential(OrderedDict(list(self._modules.items())[i]))
        return self._modules[self._index(i)]

    def __add__(self, other: Sequential) -> Sequential:
        """A new Sequential of this one's modules then other's, as torch's (only a Sequential adds)."""
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return Sequential(*self, *other)

    def __iadd__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return self.extend(list(other))

    def __mul__(self, times: int) -> Sequential:
        """A new Sequential holding this one's modules `times` times over (the same module objects)."""
        if not isinstance(times, int):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(times)}")
        if times <= 0:
            raise ValueError(f"Non-positive multiplication factor {times} for {type(self)}")
        return Sequential(*(list(self) * times))

    __rmul__ = __mul__


class ModuleList(_ModuleSequence):
    """A list of modules, registered so their parameters are found."""

    def __init__(self, modules: Iterable[Module] = ()):
        super().__init__()
        for m in modules:
            self.append(m)

    def __getitem__(self, i: int | slice):
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        return self._modules[self._index(i)]

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        """A new ModuleList of this one's modules then other's, as torch's."""
        return ModuleList([*self, *other])

    def __repr__(self) -> str:
        return module_list_repr(self)


class _Registry(Module):
    """The dict protocol over one of a module's registries (`_store`: "_modules" or "_parameters"),
    whose entries `_add(key, value)` registers: ModuleDict and ParameterDict."""

    _store = "_modules"

    @property
    def _entries(self) -> dict:
        return self.__dict__[self._store]

    def _add(self, key: str, value: Any) -> None:
        raise NotImplementedError

    def __getitem__(self, key: str):
        return self._entries[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._add(key, value)

    def __delitem__(self, key: str) -> None:
        del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def keys(self):
        return self._entries.keys()

    def values(self):
        return self._entries.values()

    def items(self):
        return self._entries.items()

    def pop(self, key: str):
        return self._entries.pop(key)

    def clear(self) -> None:
        self._entries.clear()

    def update(self, entries: Any) -> None:
        """Add or replace entries from a mapping or (key, value) pairs."""
        for key, value in entries.items() if hasattr(entries, "items") else entries:
            self[key] = value


class ModuleDict(_Registry):
    """An ordered dict of modules, registered so their parameters are found (torch.nn.ModuleDict)."""

    def __init__(self, modules: Any = None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def _add(self, key: str, module: Module) -> None:
        self.add_module(key, module)
