"""Activation checkpointing: torch.utils.checkpoint.checkpoint's interface over flame's remat pass, with
JAX's checkpoint policies (which results of the region the backward keeps instead of recomputing)."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from typing import Any

from flame.errors import ArgumentError, ArgumentTypeError
from flame.frontend.context import checkpoint_args, checkpoint_saves, current_trace, in_checkpoint, no_grad
from flame.frontend.counted_writes import RegionArgs
from flame.frontend.dispatch import record_versions
from flame.frontend.tensor import Tensor
from flame.ir import registry
from flame.ir.graph import CheckpointLoc

_REGIONS = itertools.count()  # printed graphs renumber regions in order, so the ids never show


class Policy:
    """Which results of a checkpoint region the backward keeps (the others it recomputes):
    `saves(op_name)` for each op recorded in the region, `names` the flame.tag names it keeps."""

    def __init__(self, name: str, saves: Callable[[str], bool], names: frozenset[str] = frozenset()):
        self.name, self.saves, self.names = name, saves, names

    def __repr__(self) -> str:
        return self.name


def _matmul(name: str) -> bool:
    return registry.get(name).category == "matmul"


class checkpoint_policies:  # noqa: N801 (JAX's name: jax.checkpoint_policies)
    """The policies flame.utils.checkpoint(..., policy=...) takes, as JAX names them; the strings
    "save_nothing" and "save_matmuls" name the first two."""

    nothing_saveable = Policy("save_nothing", lambda name: False)
    dots_saveable = Policy("save_matmuls", _matmul)

    @staticmethod
    def save_only_these_names(*names: str) -> Policy:
        """Keep the values tagged (flame.tag) with one of `names`; recompute the rest."""
        for n in names:
            if not isinstance(n, str):
                raise ArgumentTypeError(f"save_only_these_names: names must be strings; got {type(n).__name__} {n!r}")
        return Policy(f"save_only_these_names{tuple(names)!r}", lambda name: False, frozenset(names))


_NAMED = {"save_nothing": checkpoint_policies.nothing_saveable, "save_matmuls": checkpoint_policies.dots_saveable}


def _policy(policy: Any) -> Policy:
    if policy is None:
        return checkpoint_policies.nothing_saveable
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str) and policy in _NAMED:
        return _NAMED[policy]
    raise (ArgumentError if isinstance(policy, str) else ArgumentTypeError)(
        f"flame.utils.checkpoint: policy must be None, 'save_nothing', 'save_matmuls' or a "
        f"flame.utils.checkpoint_policies policy (save_only_these_names(...)); got {type(policy).__name__} {policy!r}")


_POLICY = {}  # region id -> its Policy (flame.tag asks which names the region it is in saves)


def checkpoint(function: Callable, *args: Any, use_reentrant: bool | None = None, context_fn: Any = None,
               determinism_check: str = "default", debug: bool = False, preserve_rng_state: bool = True,
               policy: Any = None, **kwargs: Any) -> Any:
    """function(*args, **kwargs), with its activations recomputed by the backward instead of kept.

    Inside @flame.compile every op the call records is marked (the IR prints `checkpoint N` after its
    type) and the remat pass (passes/remat.py) recomputes, right before the backward needs them, the
    marked results the backward reads, matmuls and attention included: only the region's inputs and
    the results it hands back (those read outside the region) are kept, as in PyTorch. Random draws
    inside the region repeat exactly (they are counter-based), so preserve_rng_state holds by
    construction. Eagerly the result and the gradients are the same; eager
    backward() recomputes the whole forward graph anyway. use_reentrant=True (torch's default when it
    is not given, with torch's warning) is torch's reentrant variant: keyword arguments for the
    function, context_fn and debug are ValueErrors, and when no tensor argument requires grad the
    result records no gradient (torch's warning; the parameters the function reads get none).
    context_fn, determinism_check and debug are otherwise accepted and ignored.

    policy (JAX's checkpoint policies): None or "save_nothing" (checkpoint_policies.nothing_saveable)
    recomputes everything; "save_matmuls" (dots_saveable) keeps the matmuls' results and recomputes the
    rest; checkpoint_policies.save_only_these_names("a", ...) keeps the values tagged with those names
    (`flame.tag(x, "a")`). Kept results print as `checkpoint N saved`; gradients are the same either way."""
    chosen = _policy(policy)
    if use_reentrant is None:  # torch's default: its warning, then the reentrant variant
        warnings.warn("flame.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Without "
                      "it the reentrant variant runs, as torch's does; use_reentrant=False is recommended (the "
                      "reentrant one gives the parameters no gradient when no tensor argument requires grad)",
                      UserWarning, stacklevel=2)
        use_reentrant = True
    if use_reentrant and not _reentrant_records(args, kwargs, context_fn, debug):
        with no_grad():  # torch's reentrant checkpoint is a Function of its tensor arguments alone
            return function(*args)
    outer = in_checkpoint.get()  # a checkpoint inside another is part of the outer region (and policy)
    region = next(_REGIONS) if outer is None else outer
    token = in_checkpoint.set(region)
    saves = checkpoint_saves.set(chosen.saves if outer is None else checkpoint_saves.get())
    saved = checkpoint_args.set(_saved_args(region, args, use_reentrant) if outer is None else checkpoint_args.get())
    if outer is None:
        _POLICY[region] = chosen
    try:
        return function(*args, **kwargs)
    finally:
        checkpoint_args.reset(saved)
        checkpoint_saves.reset(saves)
        in_checkpoint.reset(token)
        if outer is None:
            _POLICY.pop(region, None)


def _saved_args(region: int, args: tuple, reentrant: bool) -> RegionArgs | None:
    """What torch's checkpoint saves of the region: its tensor arguments, whose counted writes before the
    backward recomputes it raise there (counted_writes.py). Eagerly the tensors with their versions (the
    nodes recorded in the region keep them), while tracing their values, kept by the trace."""
    tensors = tuple(a for a in args if isinstance(a, Tensor))
    trace = current_trace.get()
    if trace is None:
        return RegionArgs(tensors, record_versions(tensors), reentrant)
    trace.checkpoint_args[region] = RegionArgs(tuple(trace.value_of(a) for a in tensors), (), reentrant)
    return None


def _reentrant_records(args: tuple, kwargs: dict, context_fn: Any, debug: bool) -> bool:
    """torch's checks of a use_reentrant=True call (keyword arguments for the function, context_fn and
    debug are ValueErrors), and whether its result records a gradient: only when a tensor argument
    requires grad (torch warns otherwise, and the parameters the function reads get no gradient)."""
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if context_fn is not None or debug:
        raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
    trace = current_trace.get()
    wants = (lambda a: a.requires_grad) if trace is None else trace.requires_grad
    if any(isinstance(a, Tensor) and wants(a) for a in args):
        return True
    warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", UserWarning, stacklevel=3)
    return False


def tag(x: Tensor, name: str) -> Tensor:
    """x, named `name` for a checkpoint policy (checkpoint_policies.save_only_these_names): inside
    flame.utils.checkpoint under @flame.compile, the op that computed x is kept for the backward when
    the region's policy saves `name`. Anywhere else it changes nothing (JAX's checkpoint_name)."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"flame.tag: name must be a string; got {type(name).__name__} {name!r}")
    if not isinstance(x, Tensor):
        raise ArgumentTypeError(f"flame.tag: x must be a flame Tensor; got {type(x).__name__}")
    trace, region = current_trace.get(), in_checkpoint.get()
    if trace is None or region is None or name not in _POLICY.get(region, checkpoint_policies.nothing_saveable).names:
        return x
    op = trace.value_of(x).producer
    if op is not None and isinstance(op.loc, CheckpointLoc) and op.loc.region == region:
        op.loc = CheckpointLoc(str(op.loc), region, True)
    return x

