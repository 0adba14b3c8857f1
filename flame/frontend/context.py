"""Per-context state of the frontend: the trace being recorded, the no_grad flag and whether ops are
being recorded inside flame.utils.checkpoint. All are ContextVars (not module globals), so threads
and nested calls never see each other's state."""

from __future__ import annotations

import linecache
import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar

_FLAME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
current_trace: ContextVar = ContextVar("flame_trace", default=None)
grad_enabled: ContextVar[bool] = ContextVar("flame_grad_enabled", default=True)
# the flame.utils.checkpoint region ops are being recorded in (its number), or None
in_checkpoint: ContextVar[int | None] = ContextVar("flame_in_checkpoint", default=None)
# the policy of the flame.utils.checkpoint region being recorded: op -> whether its result is kept
checkpoint_saves: ContextVar = ContextVar("flame_checkpoint_saves", default=None)


def user_location() -> str | None:
    """`file.py:LINE  source` of the innermost caller outside the flame package."""
    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if not os.path.abspath(path).startswith(_FLAME_DIR + os.sep) and "contextlib" not in path:
            src = linecache.getline(path, f.f_lineno).strip()
            return f"{os.path.basename(path)}:{f.f_lineno}" + (f"  {src}" if src else "")
        f = f.f_back
    return None


def user_stacklevel() -> int:
    """The `stacklevel` that makes warnings.warn, called by the caller of this function, point at the
    innermost frame outside the flame package (the user's line)."""
    level, f = 1, sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_FLAME_DIR + os.sep):
        level, f = level + 1, f.f_back
    return level


@contextmanager
def no_grad():
    """Operations inside record no gradient history (eager) — like torch.no_grad()."""
    token = grad_enabled.set(False)
    try:
        yield
    finally:
        grad_enabled.reset(token)


@contextmanager
def enable_grad():
    """Record gradient history again inside a no_grad block (torch.enable_grad); also a decorator."""
    token = grad_enabled.set(True)
    try:
        yield
    finally:
        grad_enabled.reset(token)


@contextmanager
def set_grad_enabled(mode: bool):
    """Turn gradient recording on or off for the block (torch.set_grad_enabled)."""
    token = grad_enabled.set(bool(mode))
    try:
        yield
    finally:
        grad_enabled.reset(token)


@contextmanager
def inference_mode(mode: bool = True):
    """torch.inference_mode: no gradient history, like no_grad (flame has no further inference-only
    savings to make: eager ops keep no autograd bookkeeping when gradients are off)."""
    token = grad_enabled.set(not mode)
    try:
        yield
    finally:
        grad_enabled.reset(token)


def is_grad_enabled() -> bool:
    return grad_enabled.get()


# called with True as @flame.compile starts running a function's body to trace it and with False when
# it ends: a higher layer registers what it watches only then (nn.Module's attribute reads)
TRACING_HOOKS: list = []


@contextmanager
def tracing_hooks():
    """The block runs a body being traced: TRACING_HOOKS are told on entry and on exit."""
    for hook in TRACING_HOOKS:
        hook(True)
    try:
        yield
    finally:
        for hook in TRACING_HOOKS:
            hook(False)
