"""permute kernels (codegen/transpose.py): which kernel each permute gets, every kind x dtype compiled
by NVRTC (no GPU needed), the reference executor's permutes, and (marked gpu) every kernel bit for bit
against NumPy on odd shapes, aligned and not."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.scripts.transpose import CASES, permute_op
from flame.codegen import lower, single
from flame.codegen.nvrtc import compile_cubin
from flame.codegen.transpose import _bank_cost, _padding, as_transpose
from flame.codegen.views import of_map
from flame.ir import Builder, Graph, TensorType, f32
from flame.ir.indexmap import permute_map
from flame.runtime.reference import run_graph

DTYPES = ("f32", "f16", "bf16", "i64", "bool", "f8e4m3", "f8e5m2")  # FP8: the backward's transposed GEMM operands
SHAPES = [  # (input shape, perm): tiled (odd extents, batches, 2-d, 4-d), runs, thin (general copy)
    ((3, 1000, 77), (0, 2, 1)),
    ((2, 40, 96), (0, 2, 1)),
    ((130, 9), (1, 0)),
    ((70, 129), (1, 0)),
    ((4, 16, 8, 32), (0, 3, 1, 2)),
    ((4, 8, 16, 24), (0, 2, 3, 1)),
    ((5, 9, 11, 13), (3, 1, 2, 0)),
    ((2, 3, 16, 64), (0, 2, 1, 3)),
    ((2, 3, 16, 6), (0, 2, 1, 3)),
    ((2, 3, 4), (2, 0, 1)),
]


def _kernel(shape, perm, dtype):
    (k,) = lower(single(permute_op(shape, perm, dtype)))
    return k


def test_the_innermost_dim_moving_makes_a_tiled_transpose():
    assert "_tiled_" in _kernel((64, 128, 64, 64), (0, 2, 3, 1), "bf16").name
    assert "_tiled_" in _kernel((3, 1000, 77), (0, 2, 1), "f32").name
    runs = _kernel((8, 16, 1024, 64), (0, 2, 1, 3), "bf16")
    assert "_tiled_" not in runs.name and "flame_vec<__nv_bfloat16, 8>" in runs.source  # 16-byte runs
    assert "_tiled_" not in _kernel((2, 3, 4), (2, 0, 1), "f32").name  # too thin for a tile


def test_collapsed_transpose_of_nchw_to_nhwc():
    op = permute_op((64, 128, 64, 64), (0, 2, 3, 1), "f32")
    t = as_transpose(op.out.shape, of_map(permute_map(op), op.inputs[0].shape))
    assert (t.batch, t.ni, t.out_i, t.nj, t.in_j) == (((64, 128 * 4096, 128 * 4096),), 4096, 128, 128, 4096)


@pytest.mark.parametrize("tile,size,vr,vw", [(64, 2, 8, 8), (64, 2, 1, 1), (32, 4, 1, 1), (32, 8, 2, 2)])
def test_padding_makes_the_write_phase_conflict_free(tile, size, vr, vw):
    row = tile + _padding(tile, size, vr, vw)
    tw = tile // vw
    loads = [[((t % tw) * vw + e) * row * size + (t // tw) * size for t in range(32)] for e in range(vw)]
    assert _bank_cost(loads, size) == vw * max(1, size // 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_permute_kernels_compile(dtype):
    for shape, perm in SHAPES:
        k = _kernel(shape, perm, dtype)
        for arch in ("sm_80", "sm_90"):
            assert compile_cubin(k.source, arch)


def test_bench_cases_compile():
    for shape, perm, dtype in CASES:
        assert compile_cubin(_kernel(shape, perm, dtype).source, "sm_90")


def test_reference_executor_permutes():
    g = Graph("permute")
    x = g.add_input(TensorType((3, 5, 7, 2), f32))
    g.outputs = [Builder(g).permute(x, perm=[0, 3, 1, 2])]
    a = np.random.default_rng(0).standard_normal((3, 5, 7, 2)).astype(np.float32)
    (got,) = run_graph(g, [a])
    np.testing.assert_array_equal(got, np.transpose(a, (0, 3, 1, 2)))


@pytest.mark.parametrize("dtype", ["f8e4m3", "bool"])
def test_one_byte_tiles_move_words_where_whole_blocks_fit(monkeypatch, dtype):
    """1-byte transposes whose extents take 4-element reads and 16-byte writes fill their tile with packed
    words (Config.byte_words); odd extents, 2-byte elements and FLAME_BYTE_WORDS=0 keep the byte tile."""
    assert "tilew[" in _kernel((64, 128, 4096), (0, 2, 1), dtype).source
    assert "tilew[" in _kernel((4096, 11008), (1, 0), dtype).source
    assert "tilew[" not in _kernel((7, 1000, 1001), (0, 2, 1), dtype).source
    assert "tilew[" not in _kernel((3, 1000, 72), (0, 2, 1), dtype).source  # rows of 1000 bytes: no 16-byte writes
    assert "tilew[" not in _kernel((64, 128, 4096), (0, 2, 1), "bf16").source  # 2-byte results
    monkeypatch.setenv("FLAME_BYTE_WORDS", "0")
    assert "tilew[" not in _kernel((64, 128, 4096), (0, 2, 1), dtype).source


GPU_SHAPES = SHAPES + [((64, 128, 4096), (0, 2, 1)), ((7, 1000, 1001), (0, 2, 1)), ((4096, 1104), (1, 0)),
                      ((3, 200, 144), (0, 2, 1)), ((3, 144, 200), (0, 2, 1))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0, 1])  # 1: the buffers one element past 16-byte alignment (scalar path)
def test_gpu_permute_kernels_are_exact(dtype, offset):
    from benchmarks.scripts.transpose import check

    for shape, perm in GPU_SHAPES:
        assert check(_kernel(shape, perm, dtype), shape, perm, dtype, offset) == "exact", (shape, perm)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bool", "f8e4m3"])
def test_gpu_byte_tiles_without_words_are_exact(monkeypatch, dtype):
    from benchmarks.scripts.transpose import check

    monkeypatch.setenv("FLAME_BYTE_WORDS", "0")
    for shape, perm in GPU_SHAPES:
        assert check(_kernel(shape, perm, dtype), shape, perm, dtype, 0) == "exact", (shape, perm)
