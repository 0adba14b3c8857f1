"""torch.utils.checkpoint's module path: `from flame.utils.checkpoint import checkpoint,
checkpoint_sequential` and `import flame.utils.checkpoint` work as torch's, and the module itself is
callable, so `flame.utils.checkpoint(fn, *args)` stays activation checkpointing (flame/utils/_checkpoint.py)."""

from __future__ import annotations

import sys
import types
from typing import Any

from flame.utils._checkpoint import checkpoint, checkpoint_policies, tag

__all__ = ["checkpoint", "checkpoint_policies", "checkpoint_sequential", "tag"]


def checkpoint_sequential(functions: Any, segments: int, input: Any, use_reentrant: bool | None = None,  # noqa: A002
                          **kwargs: Any) -> Any:
    """torch's: `functions` (an nn.Sequential or a list of modules and functions, run in order) split
    into `segments` runs of len // segments; every run but the last is checkpointed (flame.utils.checkpoint),
    the last (with the remainder) runs as it is."""
    if hasattr(functions, "children"):
        functions = list(functions.children())
    functions = list(functions)
    if not isinstance(segments, int) or segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be a positive int, got {segments!r}")

    def run(start: int, end: int):
        def forward(x):
            for f in functions[start : end + 1]:
                x = f(x)
            return x

        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant, **kwargs)
    return run(end + 1, len(functions) - 1)(input)


class _Callable(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return checkpoint(*args, **kwargs)


sys.modules[__name__].__class__ = _Callable
