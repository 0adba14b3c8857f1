"""Row kernels on the vector path (codegen/fused_rows.py): rows whose per-element inputs and outputs
walk the row contiguously are read and written by 16-byte vectors, read from global memory once when
they fit in registers, with the threads per row chosen from the registers a thread holds; other rows
keep the element-by-element schedule. Rendering and NVRTC compiles run here; (marked gpu) the kernels
match the reference executor for rows of several lengths and dtypes."""

from __future__ import annotations

import re

import numpy as np
import pytest

from flame.codegen import lower
from flame.codegen.nvrtc import compile_many
from flame.ir import Builder, Graph, TensorType, bf16, f16, f32, verify
from flame.passes.fuse import fuse

SHAPES = [(5, 7), (64, 3000), (16, 4096), (4, 32768), (3, 40000), (2, 600000), (2, 3, 520)]


def _softmax(shape, dtype, column: bool = False) -> Graph:
    """softmax over the last dim of a `dtype` input computed in f32, written back as `dtype`; with
    `column`, also the column sum of the result (a row kernel carries it)."""
    g = Graph("softmax_rows")
    b = Builder(g)
    x = g.add_input(TensorType(shape, dtype))
    h = b.cast(x, dtype=f32)
    last = len(shape) - 1
    e = b.exp(b.sub(h, b.reduce_max(h, axes=[last], keepdim=True)))
    y = b.cast(b.div(e, b.reduce_sum(e, axes=[last], keepdim=True)), dtype=dtype)
    g.outputs = [y] + ([b.reduce_sum(b.cast(y, dtype=f32), axes=list(range(last)))] if column else [])
    return verify(g)


def _row_kernel(g: Graph):
    (grp,) = [grp for grp in fuse(g).groups if grp.kind == "rows"]
    return lower(grp)[0]


def _threads(source: str) -> int:
    return int(re.search(r"// (\d+) threads per row", source).group(1))


@pytest.mark.parametrize("dtype", [f32, bf16])
def test_row_in_registers_is_read_once_by_vectors(dtype):
    k = _row_kernel(_softmax((64, 4096), dtype))
    V = 16 // dtype.itemsize
    assert f"registers, {V}-element vectors" in k.source
    fast = k.source.split("} else {")[0]  # the branch taken when every pointer is aligned
    assert len(re.findall(r"reinterpret_cast<const flame_vec<[^>]*>\*>\(in0", fast)) == 1  # one read of the row
    assert re.search(r"\*reinterpret_cast<flame_vec<[^>]*>\*>\(out0", fast)  # vector stores


def test_threads_per_row_follow_registers():
    """A lone f32 row of 4096 keeps 16 elements per thread (256 threads); column partials double a
    thread's registers, so that row takes 512 threads; a bf16 row of 512 is one warp."""
    assert _threads(_row_kernel(_softmax((64, 4096), f32)).source) == 256
    assert _threads(_row_kernel(_softmax((64, 4096), f32, column=True)).source) == 512
    assert _threads(_row_kernel(_softmax((64, 512), bf16)).source) == 32


def test_rows_that_do_not_vectorise_keep_the_element_schedule():
    k = _row_kernel(_softmax((5, 7), f32))
    assert "flame_vec" not in k.source and "(registers)" in k.source


def test_long_rows_stream_by_vectors():
    k = _row_kernel(_softmax((3, 40000), bf16))
    assert "(streamed, 8-element vectors)" in k.source and _threads(k.source) == 1024


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [f32, bf16, f16])
def test_row_kernels_compile(shape, dtype):
    kernels = [k for col in (False, True) for grp in fuse(_softmax(shape, dtype, col)).groups
               if len(grp.ops) > 1 for k in lower(grp)]
    assert len(compile_many([k.source for k in kernels], "sm_90")) == len(kernels)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [f32, bf16, f16])
@pytest.mark.parametrize("column", [False, True])
def test_gpu_row_kernels_match_reference(shape, dtype, column):
    from tests.codegen.test_fused import _gpu_check

    g = _softmax(shape, dtype, column)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 3
    tol = (2e-4, 2e-5) if dtype == f32 else (2e-2, 2e-3)
    _gpu_check(g, [x.astype(dtype.np_dtype)], *tol)
