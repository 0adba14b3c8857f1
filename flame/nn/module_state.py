"""What state_dict and load_state_dict share besides the Module: the match of a loaded dict against a
module's entries (missing, unexpected and mis-shaped keys, flame.CheckpointError listing them all), the
incompatible keys returned, the `_extra_state` entry of a module that defines get_extra_state /
set_extra_state, and the error for what is not a state_dict."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from flame.checkpoint import as_tensor
from flame.errors import CheckpointError
from flame.frontend.context import user_location
from flame.frontend.tensor import Tensor

EXTRA_STATE = "_extra_state"  # the state_dict key of a module's get_extra_state(), as torch's


class ExtraStateSlot:
    """load_state_dict's destination for a module's extra state: copy_ hands the entry to its
    set_extra_state (after the checks, in state_dict order, as every tensor is copied)."""

    __slots__ = ("module",)

    def __init__(self, module):
        self.module = module

    def copy_(self, state: Any) -> None:
        self.module.set_extra_state(state)


class IncompatibleKeys(NamedTuple):
    """What load_state_dict(strict=False) skipped; it prints as torch's _IncompatibleKeys."""

    missing_keys: list[str]
    unexpected_keys: list[str]

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return f"_IncompatibleKeys(missing_keys={self.missing_keys!r}, unexpected_keys={self.unexpected_keys!r})"


def _describe(t: Any) -> str:
    if isinstance(t, Tensor):
        return f"{t.dtype}{list(t.shape)}"
    a = np.asarray(t)
    return f"{a.dtype}{list(a.shape)}"


def not_a_state_dict(owner: str, value: Any) -> str:
    """Why load_state_dict cannot take `value`, and for a path what loads it."""
    head = f"{owner}.load_state_dict: expected a state_dict (a mapping of names to tensors), got"
    if isinstance(value, (str, bytes, os.PathLike)):
        return (
            f"{head} the path {value!r}; load the file first: model.load_state_dict(flame.load(path)) for a "
            f"safetensors file (flame.save's or PyTorch's), or flame.checkpoint.load_checkpoint(path, model, "
            f"optimizer) for one written by flame.checkpoint.save_checkpoint"
        )
    return f"{head} {type(value).__name__}"


def match_state(
    own: dict[str, Tensor], state_dict: dict[str, Any], strict: bool, owner: str
) -> tuple[list, IncompatibleKeys]:
    """Match a loaded name -> tensor dict against `own` (name -> destination tensor): the
    (destination, source) pairs to copy and the skipped keys. Raises flame.CheckpointError listing
    every missing, unexpected and mis-shaped entry (mis-shaped always; the others when strict)."""
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    misshaped, pairs = [], []
    for k, t in own.items():
        if k not in state_dict:
            continue
        if isinstance(t, ExtraStateSlot):
            pairs.append((t, state_dict[k]))
            continue
        src = as_tensor(state_dict[k])
        if tuple(src.shape) != tuple(t.shape):
            misshaped.append(f"{k}: checkpoint {_describe(src)} vs model {_describe(t)}")
        else:
            pairs.append((t, src))
    if misshaped or (strict and (missing or unexpected)):
        raise CheckpointError(mismatch_message(owner, missing, unexpected, misshaped, strict))
    return pairs, IncompatibleKeys(missing, unexpected)


def mismatch_message(
    owner: str, missing: list, unexpected: list, misshaped: list, strict: bool, errors: list = ()
) -> str:
    """load_state_dict's error: the counts, then each missing and unexpected key (when strict), each
    mis-shaped entry and each other error message (a load_state_dict pre-hook's)."""
    counts = [
        f"{len(x)} {w}"
        for x, w in ((missing, "missing"), (unexpected, "unexpected"), (misshaped, "mis-shaped"), (errors, "error"))
        if x and (strict or w in ("mis-shaped", "error"))
    ]
    lines = [f"load_state_dict into {owner}: " + ", ".join(counts)]
    if strict and missing:
        lines.append("  missing: " + ", ".join(missing))
    if strict and unexpected:
        lines.append("  unexpected: " + ", ".join(unexpected))
    for m in misshaped:
        lines.append("  mis-shaped: " + m)
    for m in errors:
        lines.append("  " + m)
    lines.append(f"  at {user_location()}")
    return "\n".join(lines)


