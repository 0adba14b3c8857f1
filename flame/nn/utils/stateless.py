"""Calling a module with other tensors in place of its parameters and buffers, as
torch.nn.utils.stateless (flame.func.functional_call is the current spelling, as torch.func's).

The given tensors are put into the modules' `_parameters` / `_buffers` for the call and the originals
put back afterwards, even when the call raises; the module's forward reads them as its own, so
gradients reach the given tensors, eagerly and inside @flame.compile (where they are usually the
compiled function's arguments)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from flame.frontend.tensor import Tensor

__all__ = ["functional_call"]

_MISSING: Any = object()


def _untie_named_tensors_map(module, parameters_and_buffers: dict[str, Tensor]) -> dict[str, Tensor]:
    """The given map with every name tied to a given one (the same tensor under several names in the
    module) mapped to the given tensor too; two different tensors given for one tied tensor raise."""
    named: dict[str, Tensor] = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    names_of: dict[int, set[str]] = {}
    for name, t in named.items():
        names_of.setdefault(id(t), set()).add(name)
    tied = {name: names for names in names_of.values() if len(names) > 1 for name in names}
    given = {name for name in parameters_and_buffers if name in tied}
    for name in given:
        names = tied[name]
        if len(names & given) > 1 and len({id(parameters_and_buffers[n]) for n in names & given}) != 1:
            raise ValueError(
                f"functional_call got multiple values for keys {sorted(names)}, which are tied. "
                f"Consider using tie_weights=False"
            )
    untied = dict(parameters_and_buffers)
    for name in given:
        for other in tied[name]:
            untied[other] = parameters_and_buffers[name]
    return untied


def _owner(module, name: str):
    """(the submodule holding dotted `name`, its last part)."""
    *path, attr = name.split(".")
    for i, part in enumerate(path):
        if not hasattr(module, part):
            raise AttributeError(f"{type(module).__name__} has no attribute `{part}`")
        sub = getattr(module, part)
        if not hasattr(sub, "_parameters"):
            raise TypeError(f"submodule `{'.'.join(path[: i + 1])}`: {sub} is not an instance of flame.nn.Module")
        module = sub
    return module, attr


def _swap(module, name: str, tensor: Any) -> Any:
    """Put `tensor` (or _MISSING: remove) where `name` is; return what was there (_MISSING if nothing)."""
    if tensor is not _MISSING and tensor is not None and not isinstance(tensor, Tensor):
        raise TypeError(f"{tensor} is not an instance of flame.Tensor")
    owner, attr = _owner(module, name)
    for store in (owner._parameters, owner._buffers):
        if attr in store:
            orig = getattr(owner, attr)  # read as the module's own (a trace guards the module's tensor)
            if tensor is _MISSING:
                del store[attr]
            else:
                store[attr] = tensor
            return orig
    orig = getattr(owner, attr) if hasattr(owner, attr) else _MISSING
    if orig is not _MISSING and orig is not None and not isinstance(orig, Tensor):
        raise TypeError(f"attribute `{attr}`: {orig} is not an instance of flame.Tensor")
    if tensor is not _MISSING:
        object.__setattr__(owner, attr, tensor)
    elif orig is not _MISSING:
        object.__delattr__(owner, attr)
    return orig


def _check_keys(module, keys: dict[str, Tensor]) -> None:
    """strict=True: the given names must be exactly the module's parameters and buffers."""
    names = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    names += [n for n, _ in module.named_buffers(remove_duplicate=False)]
    unexpected = sorted(set(keys) - set(names))
    missing = sorted(set(names) - set(keys))
    msgs = []
    if unexpected:
        msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
    if missing:
        msgs.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
    if msgs:
        raise RuntimeError("Error(s) in reparametrizing for {}:\n\t{}".format(type(module).__name__, "\n\t".join(msgs)))


@contextlib.contextmanager
def _reparametrize_module(
    module, parameters_and_buffers: dict[str, Tensor], tie_weights: bool = False, strict: bool = False
) -> Iterator[None]:
    """The module with the given tensors in place of its own for the duration; afterwards the given
    map holds what the call left in those places (a module that rebinds a buffer, as torch's)."""
    untied = _untie_named_tensors_map(module, parameters_and_buffers) if tie_weights else parameters_and_buffers
    if strict:
        _check_keys(module, untied)
    orig: dict[str, Any] = {}
    try:
        for name, t in untied.items():
            orig[name] = _swap(module, name, t)
        yield
    finally:
        new = {name: _swap(module, name, t) for name, t in orig.items()}
        parameters_and_buffers.update({k: new[k] for k in parameters_and_buffers if k in new})


def _functional_call(
    module,
    parameters_and_buffers: dict[str, Tensor],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    kwargs = {} if kwargs is None else kwargs
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    with _reparametrize_module(module, parameters_and_buffers, tie_weights=tie_weights, strict=strict):
        return module(*args, **kwargs)


def functional_call(
    module,
    parameters_and_buffers: dict[str, Tensor],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """module(*args, **kwargs) with the named tensors of `parameters_and_buffers` in place of the
    module's parameters and buffers (deprecated in torch 2.0 for torch.func.functional_call, which
    flame.func.functional_call is; this one warns as torch's does)."""
    warnings.warn(
        "`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will be removed in a "
        "future version of PyTorch. Please use `torch.func.functional_call` instead which is a drop-in "
        "replacement.",
        FutureWarning,
        stacklevel=2,
    )
    return _functional_call(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict)
