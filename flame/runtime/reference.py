"""The NumPy reference executor: runs any graph op by op with each op's reference implementation.
It is the test oracle and the executor on machines without a GPU."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flame.errors import FlameError
from flame.ir.dtypes import bf16, f16
from flame.ir.graph import Graph, Op
from flame.ir.registry import REGISTRY

_LOW = (f16.np_dtype, bf16.np_dtype)


def check_inputs(g: Graph, arrays: Sequence) -> None:
    if len(arrays) != len(g.inputs):
        raise FlameError(f"graph {g.name} takes {len(g.inputs)} inputs, got {len(arrays)}")
    for i, (v, a) in enumerate(zip(g.inputs, arrays)):
        if tuple(a.shape) != v.type.shape or a.dtype != v.type.dtype.np_dtype:
            raise FlameError(f"graph {g.name}: input {i} should be {v.type}, got "
                             f"{a.dtype}{list(a.shape)}")


def run_op(op: Op, args: Sequence[np.ndarray]) -> np.ndarray:
    """One op on NumPy arrays; f16/bf16 inputs compute in f32 where the op says so (as on the GPU)."""
    opdef = REGISTRY[op.name]
    if opdef.compute_f32:
        args = [a.astype(np.float32) if a.dtype in _LOW else a for a in args]
    with np.errstate(all="ignore"):
        out = opdef.ref(*args, **op.attrs)
    out = np.asarray(out).astype(op.out.type.dtype.np_dtype, copy=False)
    if out.shape != op.out.type.shape:
        raise FlameError(f"reference of {op.name} returned shape {out.shape}, expected {op.out.type}")
    return out


def run_graph(g: Graph, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Interpret g on NumPy arrays; returns one array per graph output."""
    check_inputs(g, arrays)
    env = dict(zip(g.inputs, arrays))
    for op in g.ops:
        env[op.out] = run_op(op, [env[v] for v in op.inputs])
    return [env[v] for v in g.outputs]


class ReferenceExecutor:
    """Executor interface (shared with runtime.cuda): arrays in and out, graphs compiled to callables."""

    name = "reference"

    def asarray(self, data, dtype=None) -> np.ndarray:
        return np.asarray(data, dtype=dtype)

    def to_numpy(self, a) -> np.ndarray:
        return np.asarray(a)

    def compile(self, g: Graph):
        return lambda arrays: run_graph(g, arrays)
