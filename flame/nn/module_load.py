"""load_state_dict's walk over a module tree, torch's: each module's `_load_from_state_dict` (which a
subclass may override, to rename or convert the entries of an older checkpoint) sees its own part of a
copy of the state_dict, its metadata (`version`), and appends to the missing keys, unexpected keys and
error messages. The default one (`load_own`) runs the module's load_state_dict pre-hooks, matches its
parameters, persistent buffers and extra state, and records the copies; they are made by the caller once
every module has been checked, so a load that raises changes nothing (an override that copies by itself
copies at once, as in torch)."""

from __future__ import annotations

import contextvars
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from flame.checkpoint import as_tensor
from flame.errors import CheckpointError
from flame.frontend.context import no_grad
from flame.frontend.tensor import Tensor
from flame.nn.module_state import EXTRA_STATE, ExtraStateSlot, IncompatibleKeys, mismatch_message
from flame.nn.parameter import is_lazy

MISSHAPED = "mis-shaped: "  # how an error message of a shape that does not fit begins

# the (destination, source) pairs of the load being planned; None outside one (the copy happens at once)
_planned: contextvars.ContextVar[list | None] = contextvars.ContextVar("planned_load", default=None)


def _record(dst: Any, src: Any) -> None:
    planned = _planned.get()
    if planned is not None:
        planned.append((dst, src))
        return
    with no_grad():
        dst.copy_(src)


def _describe(t: Tensor) -> str:
    return f"{t.dtype}{list(t.shape)}"


def load_own(module, state_dict: Mapping, prefix: str, local_metadata: dict, strict: bool,
             missing_keys: list, unexpected_keys: list, error_msgs: list, takes_extra: bool) -> None:
    """Module._load_from_state_dict: this module's entries of state_dict (those under `prefix`), as torch's;
    takes_extra: the module defines set_extra_state, so it loads a `_extra_state` entry."""
    for hook in list(module.__dict__.get("_load_state_dict_pre_hooks", {}).values()):
        hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
    local = {name: p for name, p in module._parameters.items() if p is not None}
    local.update((name, b) for name, b in module._buffers.items()
                 if b is not None and name not in module._non_persistent)
    for name, dst in local.items():
        key = prefix + name
        if key not in state_dict:
            if strict:
                missing_keys.append(key)
            continue
        try:
            src = as_tensor(state_dict[key])
        except (CheckpointError, TypeError, ValueError) as e:
            error_msgs.append(f"{key}: the checkpoint holds {type(state_dict[key]).__name__}, not a tensor ({e})")
            continue
        if not is_lazy(dst) and len(dst.shape) == 0 and tuple(src.shape) == (1,):
            src = src.reshape(())  # a 0-d tensor saved as one element, as torch's load takes it
        if not is_lazy(dst) and tuple(src.shape) != tuple(dst.shape):
            error_msgs.append(f"{MISSHAPED}{key}: checkpoint {_describe(src)} vs model {_describe(dst)}")
            continue
        _record(dst, src)
    extra_key = prefix + EXTRA_STATE
    if takes_extra:
        if extra_key in state_dict:
            _record(ExtraStateSlot(module), state_dict[extra_key])
        elif strict:
            missing_keys.append(extra_key)
    elif strict and extra_key in state_dict:
        unexpected_keys.append(extra_key)
    if strict:
        for key in state_dict:
            if key.startswith(prefix) and key != extra_key:
                first, *rest = key[len(prefix):].split(".", 1)
                if (first not in module._modules) if rest else (first not in local):
                    unexpected_keys.append(key)


def plan(root, state_dict: Mapping, strict: bool, assign: bool = False) -> tuple[list, IncompatibleKeys]:
    """Walk root's tree as torch's load_state_dict does, without copying what the default
    _load_from_state_dict matches: the (destination, source) pairs and the incompatible keys. Raises
    flame.CheckpointError listing every missing, unexpected and mis-shaped entry and every error message
    (mis-shaped entries and messages always; missing and unexpected keys when strict)."""
    metadata = getattr(state_dict, "_metadata", None)
    state_dict = OrderedDict(state_dict)  # a copy the modules may change
    if metadata is not None:
        state_dict._metadata = metadata
    missing, unexpected, errors, pairs = [], [], [], []

    def load(module, local_state_dict, prefix: str) -> None:
        local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
        if assign:
            local_metadata["assign_to_params_buffers"] = assign
        module._load_from_state_dict(local_state_dict, prefix, local_metadata, True, missing, unexpected, errors)
        for name, child in module._modules.items():
            if child is not None:
                child_prefix = prefix + name + "."
                load(child, {k: v for k, v in local_state_dict.items() if k.startswith(child_prefix)},
                     child_prefix)

    token = _planned.set(pairs)
    try:
        load(root, state_dict, "")
    finally:
        _planned.reset(token)
    if errors or (strict and (missing or unexpected)):
        misshaped = [e[len(MISSHAPED):] for e in errors if e.startswith(MISSHAPED)]
        others = [e for e in errors if not e.startswith(MISSHAPED)]
        raise CheckpointError(mismatch_message(type(root).__name__, missing, unexpected, misshaped, strict, others))
    return pairs, IncompatibleKeys(missing, unexpected)
