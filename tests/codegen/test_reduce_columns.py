"""Column reductions (codegen/reduce.py, the innermost dim kept): the schedule fits few outputs
(16 lanes x 8 bf16 for 128 channels, the other threads split the rows), every shape class renders
and compiles with NVRTC for every reduction, the plan through the reference executor matches NumPy in
float64, and (marked gpu) the kernels match NumPy and repeat bit for bit."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from flame.codegen import lower
from flame.codegen.lower import single
from flame.codegen.nvrtc import compile_many
from flame.ir import Builder, Graph, TensorType, dtype_of, verify
from flame.plan.build import to_plan
from flame.plan.steps import KernelLaunch
from flame.runtime.reference import run_graph
from tests.passes.test_fuse import check_fused

# name -> (shape, dtype, reduced axes): the shape classes a training step makes
SHAPES = {
    "bn_nhwc": ((64, 64, 64, 128), "bf16", (0, 1, 2)),  # BatchNorm statistics of channels-last data
    "wide": ((32768, 4096), "bf16", (0,)),
    "gpt": ((8192, 768), "bf16", (0,)),
    "c64_f32": ((4096, 64), "f32", (0,)),
    "c3_f32": ((1000, 3), "f32", (0,)),
    "c256": ((65536, 256), "bf16", (0,)),
    "c512_f32": ((16384, 512), "f32", (0,)),
    "first_middle": ((64, 4096, 128), "bf16", (0, 1)),
    "middle": ((64, 4096, 128), "bf16", (1,)),  # two kept groups
    "two_reduced_groups": ((16, 6, 50, 40), "f32", (0, 2)),
    "c6_f16_odd_rows": ((300001, 6), "f16", (0,)),  # 4-byte loads
    "c31_odd_rows": ((4097, 31), "f32", (0,)),  # no vector loads
    "c5_bf16": ((2049, 5), "bf16", (0,)),
    "c2": ((70000, 2), "f32", (0,)),
}
SMALL = {  # the same classes at sizes the reference executor runs quickly (still split into chunks)
    "bn_nhwc": ((4, 32, 32, 128), "bf16", (0, 1, 2)),
    "wide": ((2048, 1024), "bf16", (0,)),
    "c64_f32": ((4096, 64), "f32", (0,)),
    "c3_f32": ((1000, 3), "f32", (0,)),
    "first_middle": ((8, 1024, 128), "bf16", (0, 1)),
    "middle": ((4, 2048, 40), "bf16", (1,)),
    "two_reduced_groups": ((16, 6, 50, 40), "f32", (0, 2)),
    "c6_f16_odd_rows": ((30001, 6), "f16", (0,)),
    "c31_odd_rows": ((4097, 31), "f32", (0,)),
    "c5_bf16": ((2049, 5), "bf16", (0,)),
}
OPS = ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "argmax")


def _graph(shape, dt: str, axes, name: str) -> Graph:
    g = Graph(name)
    b = Builder(g)
    x = g.add_input(TensorType(shape, dtype_of(dt)))
    g.outputs = [b.argmax(x, axis=axes[0]) if name == "argmax" else getattr(b, name)(x, axes=list(axes))]
    return verify(g)


def _cases(table):
    return [(k, op) for k in sorted(table) for op in OPS if op != "argmax" or len(table[k][2]) == 1]


def _kernels(shape, dt, axes, name):
    return lower(single(_graph(shape, dt, axes, name).ops[-1]))


def _inputs(shape, dt: str, seed: int = 0) -> list[np.ndarray]:
    x = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    return [x.astype(dtype_of(dt).np_dtype)]


def _numpy(x: np.ndarray, axes, name: str) -> np.ndarray:
    x = x.astype(np.float64)
    if name == "argmax":
        return np.argmax(x, axis=axes[0])
    return {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min}[name](
        x, axis=tuple(axes)
    )


def _check(got: np.ndarray, want: np.ndarray, shape, dt: str, axes, name: str) -> None:
    """Sums: f32 accumulation (about sqrt(R) roundings of elements ~1) plus the output's one rounding;
    max/min/argmax are exact."""
    got = np.asarray(got).astype(np.float64)
    if name not in ("reduce_sum", "reduce_mean"):
        np.testing.assert_array_equal(got, want)
        return
    R = math.prod(shape[a] for a in axes)
    rtol = {"bf16": 8e-3, "f16": 1e-3, "f32": 1e-5}[dt]
    atol = 1e-5 * math.sqrt(R) / (R if name == "reduce_mean" else 1)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _comment(kernel) -> str:
    return kernel.source.split("\n")[2]


def test_few_outputs_fill_the_block():
    """128 bf16 channels: 16 lanes x 8 per tile (not 32 lanes, half idle), 16 thread rows; ~8 blocks
    per SM of whole 8-load batches; the 1024 x 128 partials folded by 16 blocks of 2 lanes x 4."""
    main, fold = _kernels((64, 64, 64, 128), "bf16", (0, 1, 2), "reduce_sum")
    assert "tiles of 128 consecutive outputs: 16 lane(s) x 8" in main.source
    assert "16\n  // thread rows" in main.source and "8 loads in flight" in main.source
    assert "in 1024 chunks of 256" in _comment(main) and main.grid == 1024 and main.block == 256
    assert main.scratch == fold.scratch == 1024 * 128 * 4
    assert "tiles of 8 consecutive outputs: 2 lane(s) x 4" in fold.source and fold.grid == 16


def test_many_outputs_keep_full_warps():
    main, fold = _kernels((32768, 4096), "bf16", (0,), "reduce_sum")
    assert "32 lane(s) x 8" in main.source and "in 64 chunks of 512" in _comment(main)
    assert main.grid == 16 * 64 and fold.grid == 128 and "8 lane(s) x 4" in fold.source


@pytest.mark.parametrize(
    "shape, dt, lanes, V",
    [((1000, 3), "f32", 4, 1), ((4097, 31), "f32", 32, 1), ((300001, 6), "f16", 4, 2), ((100, 12), "bf16", 4, 4)],
)
def test_vectors_fit_the_innermost_dim(shape, dt, lanes, V):
    (main, *_) = _kernels(shape, dt, (0,), "reduce_sum")
    assert f"{lanes} lane(s) x {V} (coalesced {V * dtype_of(dt).itemsize}-byte loads)" in main.source


def test_argmax_loads_one_at_a_time():
    main, fold = _kernels((65536, 64), "f32", (0,), "argmax")
    assert "x 1 (coalesced 4-byte loads)" in main.source
    assert re.search(r"w\[j\]\.i = reinterpret_cast<const long long\*>", fold.source)  # the partials' indices


@pytest.mark.parametrize("key", sorted(SHAPES))
def test_columns_compile(key):
    shape, dt, axes = SHAPES[key]
    sources = [k.source for name in OPS if name != "argmax" or len(axes) == 1 for k in _kernels(shape, dt, axes, name)]
    assert "_cols_" in _kernels(shape, dt, axes, "reduce_sum")[0].name
    assert len(compile_many(sources, "sm_90")) == len(sources)


@pytest.mark.parametrize("key, name", _cases(SMALL))
def test_reference_matches_numpy(key, name):
    shape, dt, axes = SMALL[key]
    g = _graph(shape, dt, axes, name)
    inputs = _inputs(shape, dt)
    check_fused(g, inputs)
    assert any("_cols_" in s.name for s in to_plan(g).steps if isinstance(s, KernelLaunch))
    (got,) = run_graph(g, inputs)
    _check(got, _numpy(inputs[0], axes, name), shape, dt, axes, name)


@pytest.mark.gpu
@pytest.mark.parametrize("key, name", _cases(SHAPES))
def test_gpu_columns_match_numpy_and_repeat(key, name):
    """The compiled plan on the GPU vs NumPy in float64, twice: bit-identical results."""
    import cupy

    from flame.passes.fuse import fuse
    from flame.runtime.cuda import CompiledPlan

    shape, dt, axes = SHAPES[key]
    g = _graph(shape, dt, axes, name)
    inputs = _inputs(shape, dt, seed=len(key))
    run = CompiledPlan(to_plan(fuse(g)))
    first = cupy.asnumpy(run([cupy.asarray(a.copy()) for a in inputs])[0])
    again = cupy.asnumpy(run([cupy.asarray(a.copy()) for a in inputs])[0])
    _check(first, _numpy(inputs[0], axes, name), shape, dt, axes, name)
    np.testing.assert_array_equal(first.view(np.uint8), again.view(np.uint8))
