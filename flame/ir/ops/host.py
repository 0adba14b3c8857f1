"""Host memory: a forward value the backward reads, kept in pinned host memory between the two
instead of on the device (offloading, chosen by the activation-budget solver:
passes/activation_budget.py). Both ops are the identity on values, so the IR stays pure:

  offload(x) -> h   h holds x's bytes in host memory (the remat pass puts it after x's last forward use)
  reload(h)  -> y   y holds them on the device again (before the first backward use)

They carry the `library` trait "host": each is one copy step of its own in the plan
(plan.steps.HostCopy), run on the GPU on a side stream so the transfers overlap compute, and by the
reference executor as a NumPy copy. They appear only after autodiff, so they have no VJP."""

from __future__ import annotations

import numpy as np

from flame.ir.registry import OpDef, register

_WHY = "host copies are placed after autodiff by the remat pass; they are never differentiated"


def _same(types):
    return types[0]


def _copy(x):
    return np.array(x, copy=True)


OFFLOAD = register(
    OpDef(
        "offload",
        "library",
        1,
        _same,
        _copy,
        nondiff=_WHY,
        library="host",
        doc="x's bytes, copied to pinned host memory",
    )
)
RELOAD = register(
    OpDef(
        "reload",
        "library",
        1,
        _same,
        _copy,
        nondiff=_WHY,
        library="host",
        doc="a host value's bytes, copied back to device memory",
    )
)
