"""Activation checkpointing: torch.utils.checkpoint.checkpoint's interface over flame's remat pass."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from flame.frontend.context import in_checkpoint

_REGIONS = itertools.count()  # printed graphs renumber regions in order, so the ids never show


def checkpoint(function: Callable, *args: Any, use_reentrant: bool | None = None, context_fn: Any = None,
               determinism_check: str = "default", debug: bool = False, preserve_rng_state: bool = True,
               **kwargs: Any) -> Any:
    """function(*args, **kwargs), with its activations recomputed by the backward instead of kept.

    Inside @flame.compile every op the call records is marked (the IR prints `checkpoint N` after its
    type) and the remat pass (passes/remat.py) recomputes, right before the backward needs them, the
    marked results the backward reads, matmuls and attention included: only the region's inputs and
    the results it hands back (those read outside the region) are kept, as in PyTorch. Random draws
    inside the region repeat exactly (they are counter-based), so preserve_rng_state holds by
    construction. Eagerly the result and the gradients are the same; eager
    backward() recomputes the whole forward graph anyway. use_reentrant, context_fn,
    determinism_check and debug are accepted for compatibility and ignored."""
    outer = in_checkpoint.get()  # a checkpoint inside another is part of the outer region
    token = in_checkpoint.set(next(_REGIONS) if outer is None else outer)
    try:
        return function(*args, **kwargs)
    finally:
        in_checkpoint.reset(token)


checkpoint.checkpoint = checkpoint  # torch.utils.checkpoint.checkpoint(...) spelled flame.utils.checkpoint.checkpoint
