"""Per-context state of the frontend: the trace being recorded, the no_grad flag and whether ops are
being recorded inside flame.utils.checkpoint. All are ContextVars (not module globals), so threads
and nested calls never see each other's state."""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar

_FLAME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
current_trace: ContextVar = ContextVar("flame_trace", default=None)
grad_enabled: ContextVar[bool] = ContextVar("flame_grad_enabled", default=True)
# inside torch.inference_mode(): the tensors made there are inference tensors (Tensor.is_inference)
inference_enabled: ContextVar[bool] = ContextVar("flame_inference_enabled", default=False)
# the flame.utils.checkpoint region ops are being recorded in (its number), or None
in_checkpoint: ContextVar[int | None] = ContextVar("flame_in_checkpoint", default=None)
# the policy of the flame.utils.checkpoint region being recorded: op -> whether its result is kept
checkpoint_saves: ContextVar = ContextVar("flame_checkpoint_saves", default=None)
# eagerly, the tensor arguments of the flame.utils.checkpoint region being recorded, as torch's checkpoint
# saves them (counted_writes.RegionArgs), or None
checkpoint_args: ContextVar = ContextVar("flame_checkpoint_args", default=None)
# a callable told of every op dispatch.apply runs, as (op, inputs, attributes, result), or None: forward
# AD's record of the ops that carry tangents where no gradient history is kept (autograd/forward_ad.py)
op_recorder: ContextVar = ContextVar("flame_op_recorder", default=None)
# a callable told of every in-place write before it is made, as (tensor written, its new value, the op's
# name), or None: vmap's checks of writes into tensors it does not map over (func/_vmap.py)
write_hook: ContextVar = ContextVar("flame_write_hook", default=None)
# forward AD's handler of a user autograd Function's call while a dual level is entered, as
# (Function class, arguments, result, jvp or None) -> result, or None (autograd/forward_ad.py)
function_jvp: ContextVar = ContextVar("flame_function_jvp", default=None)
# the torch.func transforms being run, innermost last ("grad", "vmap"): a user autograd Function called
# inside one needs setup_context, and inside a vmap a vmap rule, as torch's (frontend/custom_function.py)
func_transforms: ContextVar[tuple[str, ...]] = ContextVar("flame_func_transforms", default=())
# a callable told of each tensor made with another's shape (zeros_like, new_zeros ...), as (that tensor,
# the new one), or None: vmap's batched tensors, which such a tensor is one of as in torch (func/_vmap.py)
like_hook: ContextVar = ContextVar("flame_like_hook", default=None)


def made_like(source, out):
    """out, a tensor made with source's shape, told to like_hook."""
    hook = like_hook.get()
    if hook is not None:
        hook(source, out)
    return out


_FLAME_FILES: dict[str, bool] = {}  # absolute source path -> whether it is a file of the flame package


def _flame_file(path: str) -> bool:
    """Source file `path` (a code object's) is in the flame package: an absolute path is asked once
    (a relative one depends on the working directory, so it is resolved every time)."""
    known = _FLAME_FILES.get(path)
    if known is not None:
        return known
    inside = os.path.abspath(path).startswith(_FLAME_DIR + os.sep)
    if os.path.isabs(path) and len(_FLAME_FILES) < 4096:
        _FLAME_FILES[path] = inside
    return inside


_SKIPPED: dict[str, bool] = {}  # absolute source path -> whether user_location passes over its frames
# (path, line) -> (the linecache entry the text was read from, the text): the text is made again when
# linecache reads the file anew (linecache.checkcache after an edit)
_TEXTS: dict[tuple[str, int], tuple] = {}


def _skipped(path: str) -> bool:
    """Whether user_location passes over a frame of source file `path`: flame's own and contextlib's."""
    known = _SKIPPED.get(path)
    if known is None:
        known = _flame_file(path) or "contextlib" in path
        if os.path.isabs(path) and len(_SKIPPED) < 4096:
            _SKIPPED[path] = known
    return known


# (the user's line,) while flame's own code that calls no user function runs (an optimizer's update of
# every parameter, pinned_location): user_location's answer there, found once instead of once per op
_pinned: ContextVar[tuple | None] = ContextVar("flame_pinned_location", default=None)


@contextmanager
def pinned_location():
    """A block of flame's own code that calls no user code: inside it user_location() gives the line it
    gives where the block begins (every frame a walk from inside would pass over is flame's), found once."""
    token = _pinned.set((user_location(),))
    try:
        yield
    finally:
        _pinned.reset(token)


def user_location() -> str | None:
    """`file.py:LINE  source` of the innermost caller outside the flame package."""
    pinned = _pinned.get()
    if pinned is not None:
        return pinned[0]
    f = sys._getframe(1)
    skipped = _SKIPPED.get
    while f is not None:
        path = f.f_code.co_filename
        known = skipped(path)
        if not (_skipped(path) if known is None else known):
            return _text(path, f.f_lineno)
        f = f.f_back
    return None


def _text(path: str, line: int) -> str:
    """`file.py:LINE  source` of line `line` of `path`, as linecache holds the file now."""
    lines = linecache.getlines(path)  # (reads the file into linecache's cache the first time)
    known = _TEXTS.get((path, line))
    if known is not None and known[0] is lines:
        return known[1]
    src = lines[line - 1].strip() if 1 <= line <= len(lines) else ""
    text = f"{os.path.basename(path)}:{line}" + (f"  {src}" if src else "")
    if len(_TEXTS) >= 65536:
        _TEXTS.clear()
    _TEXTS[(path, line)] = (lines, text)
    return text


def user_stacklevel() -> int:
    """The `stacklevel` that makes warnings.warn, called by the caller of this function, point at the
    innermost frame outside the flame package (the user's line)."""
    level, f = 1, sys._getframe(1)
    while f is not None and _flame_file(f.f_code.co_filename):
        level, f = level + 1, f.f_back
    return level


class _GradMode:
    """A block (or, as a decorator, a function's body) with gradient recording set to a mode, as torch's
    grad-mode managers: `with flame.no_grad():`, `@flame.no_grad()` and the bare `@flame.no_grad`."""

    _mode = False

    def __new__(cls, *args, **kwargs):
        if cls is not set_grad_enabled and len(args) == 1 and not kwargs and callable(args[0]):
            return cls()(args[0])  # the bare decorator, `@flame.no_grad`
        return super().__new__(cls)

    def __init__(self) -> None:
        self._tokens: list = []

    def __enter__(self) -> None:
        self._tokens.append(grad_enabled.set(self._mode))

    def __exit__(self, *exc) -> bool:
        grad_enabled.reset(self._tokens.pop())
        return False

    def clone(self) -> _GradMode:
        """A fresh manager of the same mode (a decorated function enters its own on each call)."""
        return type(self)()

    def __call__(self, fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"{type(self).__name__}() decorates a function, got {type(fn).__name__}")

        if inspect.isgeneratorfunction(fn):
            return self._wrap_generator(fn)

        @functools.wraps(fn)
        def run(*args, **kwargs):
            with self.clone():
                return fn(*args, **kwargs)

        return run

    def _wrap_generator(self, fn: Callable) -> Callable:
        """A decorated generator runs each of its steps in the mode (torch's), not only its creation."""

        @functools.wraps(fn)
        def run(*args, **kwargs):
            gen = fn(*args, **kwargs)
            try:
                with self.clone():
                    value = next(gen)
                while True:
                    sent = yield value
                    with self.clone():
                        value = gen.send(sent)
            except StopIteration as stop:
                return stop.value

        return run


class no_grad(_GradMode):
    """Operations inside record no gradient history (eager) — like torch.no_grad(); also a decorator."""

    _mode = False


class enable_grad(_GradMode):
    """Record gradient history again inside a no_grad block (torch.enable_grad); also a decorator."""

    _mode = True


class inference_mode(_GradMode):
    """torch.inference_mode: no gradient history, like no_grad (flame has no further inference-only
    savings to make: eager ops keep no autograd bookkeeping when gradients are off); also a decorator.
    inference_mode(False) turns gradient recording on, as torch's."""

    def __init__(self, mode: bool = True) -> None:
        super().__init__()
        self._on = bool(mode)
        self._mode = not mode

    def __enter__(self) -> None:
        super().__enter__()
        self._tokens.append(inference_enabled.set(self._on))

    def __exit__(self, *exc) -> bool:
        inference_enabled.reset(self._tokens.pop())
        return super().__exit__(*exc)

    def clone(self) -> inference_mode:
        return inference_mode(self._on)


def is_inference_mode_enabled() -> bool:
    """Whether an inference_mode() block (not turned off by inference_mode(False)) is running, as
    torch.is_inference_mode_enabled (no_grad alone does not enable it)."""
    return inference_enabled.get()


class set_grad_enabled(_GradMode):
    """Turn gradient recording on or off (torch.set_grad_enabled): for a `with` block, for a decorated
    function's body, or, called on its own, from here on."""

    def __init__(self, mode: bool) -> None:
        super().__init__()
        self._mode = bool(mode)
        self._prev = grad_enabled.get()
        grad_enabled.set(self._mode)  # torch's: the call itself sets the mode

    def __enter__(self) -> None:
        self._tokens.append(grad_enabled.set(self._mode))

    def __exit__(self, *exc) -> bool:
        grad_enabled.reset(self._tokens.pop())
        grad_enabled.set(self._prev)
        return False

    def clone(self) -> set_grad_enabled:
        fresh = _GradMode.__new__(set_grad_enabled)
        _GradMode.__init__(fresh)
        fresh._mode, fresh._prev = self._mode, grad_enabled.get()
        return fresh

    def __call__(self, fn: Callable) -> Callable:
        grad_enabled.set(self._prev)  # decorating does not change the mode outside the function
        return super().__call__(fn)


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


@contextmanager
def in_transform(kind: str):
    """Run the block as inside a torch.func transform of `kind` ("grad" or "vmap": func_transforms)."""
    token = func_transforms.set((*func_transforms.get(), kind))
    try:
        yield
    finally:
        func_transforms.reset(token)
