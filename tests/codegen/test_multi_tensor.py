"""Multi-tensor updates (the horizontal kernels of codegen/fused.py): each segment on its own range of
blocks, every tensor read contiguously and vectorised, scalar work spread one segment per block, and
(from the matmul VJP) weight gradients that arrive in the weights' layout. The structure is checked on
the rendered CUDA (no GPU needed), the kernels compile with NVRTC, and (marked gpu) a step whose
segments share a capped grid matches the reference executor."""

from __future__ import annotations

import re

import numpy as np
import pytest

from flame.codegen import lower
from flame.codegen.fused import segment_blocks
from flame.codegen.nvrtc import compile_many
from flame.ir import Graph
from flame.ir.indexmap import is_view
from flame.passes.fuse import fuse
from tests.passes.fuse_cases import GPT_SHAPES, mlp_adamw, multi_adamw

_RANGE = re.compile(r"segment (\d+) on blocks \[(\d+), (\d+)\): (.*)")


def _horizontal(g: Graph) -> list:
    """The kernels of g's groups with several segments (name suffix _xN)."""
    kernels = [k for grp in fuse(g).groups if len(grp.ops) > 1 and grp.kind != "matmul" for k in lower(grp)]
    return [k for k in kernels if re.search(r"_x\d+_[0-9a-f]{8}$", k.name)]


def _segments(source: str) -> list[str]:
    """The source of each segment of a kernel with a block table."""
    return re.split(r"\n  (?:else )?if \(blockIdx\.x < ", source)[1:]


def test_segment_blocks_fill_the_grid_in_proportion():
    assert segment_blocks([3, 1, 0], 8192) == [3, 1, 1]  # a segment always has a block
    assert segment_blocks([20000], 8192) == [8192]  # one segment: the capped grid, grid-stride
    got = segment_blocks([12000, 6000, 1, 1], 8192)
    assert got[0] == 2 * got[1] and got[2:] == [1, 1] and sum(got) <= 8192


def test_segments_run_side_by_side_on_their_own_blocks():
    kernels = _horizontal(multi_adamw()[0])
    assert len(kernels) == 2  # the bias corrections (0-d, f32) and the update of all 16 tensors
    for k in kernels:
        n = int(re.search(r"_x(\d+)_", k.name).group(1))
        ranges = [tuple(map(int, m.groups()[:3])) for m in _RANGE.finditer(k.source)]
        assert [r[0] for r in ranges] == list(range(n))
        assert ranges[0][1] == 0 and ranges[-1][2] == k.grid  # contiguous, covering the grid
        assert all(a[2] == b[1] and a[1] < a[2] for a, b in zip(ranges, ranges[1:]))
        assert "gridDim.x" not in k.source  # a segment strides over its own blocks only


def test_scalar_work_is_one_segment_per_block():
    (scalars,) = [k for k in _horizontal(multi_adamw()[0]) if "_f32_x" in k.name]
    whats = [m.group(4) for m in _RANGE.finditer(scalars.source)]
    assert whats and all(w.endswith("over []") for w in whats) and scalars.grid == len(whats)
    assert "powf" in scalars.source  # the bias corrections 1 - beta**t live here, not per element


def test_update_reads_every_tensor_contiguously_and_vectorised():
    (update,) = [k for k in _horizontal(multi_adamw()[0]) if "_bf16_x" in k.name]
    segs = _segments(update.source)
    assert len(segs) == len(GPT_SHAPES)
    for seg in segs:
        assert "% " not in seg.split("aligned")[-1] and " c0 " not in seg  # no coordinate decomposition
        assert "vector path: 8 elements per 16-byte access" in seg  # bf16x8 loads and stores
        hoisted = re.findall(r"const float s\d+ = (in\d+\[0\]);", seg)
        assert hoisted and len(hoisted) == len(set(hoisted))  # each scalar loaded once per thread


def test_weight_gradients_arrive_in_the_weights_layout():
    """x @ w.T: the gradient of w comes out of one GEMM as [out, in] (its operand transposes are
    cuBLASLt flags), so the update reads it contiguously: no permute left in the update kernel."""
    g, _, _ = mlp_adamw(dtype="bf16")
    fused = fuse(g)
    index = {i for i, r in enumerate(fused.roles) if r == "param"}
    params = [fused.inputs[i] for i in index]
    new_params = {fused.outputs[o] for o, i in fused.aliases.items() if i in index}
    (update,) = [grp for grp in fused.groups if new_params & set(grp.outputs)]
    assert not [op for op in update.ops if op.name == "permute"]
    inside = {op.out for op in update.ops}
    read = {v for op in update.ops for v in op.inputs if v not in inside and v.producer is not None}
    grads = [v for v in read if v.producer.name == "matmul"]
    weights = sorted(tuple(p.shape) for p in params if len(p.shape) == 2)
    assert sorted(tuple(v.shape) for v in grads) == weights
    assert not any(is_view(v.producer) and v.producer.name == "permute" for v in read)


def test_multi_tensor_kernels_compile():
    kernels = _horizontal(multi_adamw()[0]) + _horizontal(mlp_adamw(dtype="bf16")[0])
    for arch in ("sm_80", "sm_90"):
        assert len(compile_many([k.source for k in kernels], arch)) == len(kernels)


@pytest.mark.gpu
def test_gpu_multi_tensor_adamw_over_a_capped_grid_matches_reference():
    """4 tensors of 4M elements want more than the grid cap's blocks: every segment gets its share and
    strides over it; odd sizes take the scalar tails."""
    from tests.codegen.test_fused import _gpu_check

    shapes = [(4096, 1024)] * 4 + [(1000,), (3, 5), (17,), (768, 3), (1,)]
    g, inputs = multi_adamw(shapes)
    (update,) = [k for k in _horizontal(g) if "_bf16_x" in k.name]
    assert update.grid <= 8192 + len(shapes)
    _gpu_check(g, inputs, 1e-2, 1e-2)
    assert np.isfinite(inputs[0].astype(np.float32)).all()
