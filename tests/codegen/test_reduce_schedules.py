"""Reduction schedules (ARCHITECTURE.md "Reduction schedules"):
rows that fit a block, rows split across blocks (a whole-tensor
reduction is one row), and columns in their own kernel. Each shape below picks one schedule; the
fused plan must equal the unfused plan and the reference bit for bit (CPU), every kernel compiles
with NVRTC, and (marked gpu) every schedule matches NumPy on the GPU."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flame
from flame.codegen import lower
from flame.codegen.kernel import DEFAULT_CONFIG
from flame.codegen.nvrtc import compile_many
from flame.codegen.rows_columns import FOLD_COLS, FOLD_PHASES
from flame.ir import Builder, Graph, TensorType, bf16, f32, verify
from flame.passes.fuse import fuse
from flame.plan.build import to_plan
from flame.plan.steps import KernelLaunch
from flame.target import DEFAULT_TARGET
from tests.passes.fuse_cases import build
from tests.passes.test_fuse import check_fused


def _sum_squares(shape, dt=f32) -> Graph:
    """Row sums of x*x (prologue only) and 2x (a per-element result of the prologue's shape)."""
    g = Graph("sum_squares")
    b = Builder(g)
    x = g.add_input(TensorType(shape, dt))
    axes = list(range(len(shape)))[-1:] if len(shape) > 1 else [0]
    sq = b.mul(x, x)
    g.outputs = [b.reduce_sum(sq, axes=axes), b.mul(sq, 3.0)]
    return verify(g)


def _mean_all(shape, dt=f32) -> Graph:
    g = Graph("mean_all")
    b = Builder(g)
    x = g.add_input(TensorType(shape, dt))
    axes = list(range(len(shape)))
    g.outputs = [b.reduce_mean(b.mul(x, x), axes=axes), b.reduce_max(x, axes=axes)]
    return verify(g)


def _softmax(shape, dt=f32) -> Graph:
    g = Graph("softmax")
    b = Builder(g)
    x = g.add_input(TensorType(shape, dt))
    m = b.reduce_max(x, axes=[len(shape) - 1], keepdim=True)
    e = b.exp(b.sub(x, m))
    g.outputs = [b.div(e, b.reduce_sum(e, axes=[len(shape) - 1], keepdim=True))]
    return verify(g)


def _layer_norm(shape, dt=f32) -> Graph:
    g = Graph("layer_norm")
    b = Builder(g)
    x = g.add_input(TensorType(shape, dt))
    d = b.sub(x, b.reduce_mean(x, axes=[len(shape) - 1], keepdim=True))
    var = b.reduce_mean(b.mul(d, d), axes=[len(shape) - 1], keepdim=True)
    g.outputs = [b.mul(d, b.rsqrt(b.add(var, 1e-5)))]
    return verify(g)


def _columns(shape, dt=f32) -> Graph:
    g = Graph("columns")
    b = Builder(g)
    x = g.add_input(TensorType(shape, dt))
    g.outputs = [b.reduce_sum(x, axes=list(range(len(shape) - 1)))]
    return verify(g)


# (graph, shape, dtype, the schedule it must pick: kernel-name fragments of its launches)
CASES = {  # a single-op reduction is lowered by codegen/reduce.py: "rows"/"cols", "final" when split
    "rows_block": (_sum_squares, (512, 3000), f32, ["reduce_sum_rows_f32_"]),
    "rows_split": (_sum_squares, (4, 1 << 18), f32, ["reduce_sum_rows_f32_split_", "_split_fold_"]),
    "rows_split_bf16": (_sum_squares, (4, 300000), bf16, ["_rows_bf16_split_", "_split_fold_"]),
    # a max of an input runs staged (prepare_fusion.stage_reductions): its rows' maxima, then theirs
    "whole_tensor": (_mean_all, (1000, 1100), f32, ["_split_", "_split_fold_", "reduce_max_f32_1000x1100_rows",
                                                    "reduce_max_f32_1000_rows"]),
    "softmax_block": (_softmax, (300, 4096), f32, ["reduce_softmax_rows_"]),
    "softmax_split": (_softmax, (16, 1 << 16), f32, ["reduce_max_f32_16x65536_rows", "_final_", "_split_",
                                                     "_split_fold_", "div_"]),
    "layer_norm_split": (_layer_norm, (8, 1 << 17), f32, ["reduce_mean_f32_8x131072_rows", "_final_", "_split_",
                                                          "_split_fold_", "fused_"]),
    "columns": (_columns, (4096, 512), f32, ["_cols_", "_final_"]),
    "columns_unsplit": (_columns, (64, 8192), f32, ["_cols_"]),
    "columns_split_bf16": (_columns, (65536, 64), bf16, ["_cols_", "_final_"]),
    "columns_3d": (_columns, (8, 1024, 520), bf16, ["_cols_", "_final_"]),
}


def _inputs(g: Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(np.float32).astype(v.dtype.np_dtype) for v in g.inputs]


def _kernels(g: Graph) -> list:
    return [s for s in to_plan(g).steps if isinstance(s, KernelLaunch)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_fused_equals_unfused_and_reference(name):
    make, shape, dt, picks = CASES[name]
    g = make(shape, dt)
    fused = check_fused(g, _inputs(g))
    names = [k.name for k in _kernels(fused)]
    assert len(names) == len(picks) and all(p in n for p, n in zip(picks, names)), names


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_kernels_compile(name):
    make, shape, dt, _ = CASES[name]
    fused = fuse(make(shape, dt))
    sources = [k.source for grp in fused.groups for k in lower(grp)]
    assert len(compile_many(sources, "sm_90")) == len(sources)


def test_split_softmax_records_why():
    fused = fuse(_softmax((16, 1 << 16)))
    assert any(grp.reason.startswith("split: 16 row(s) of 65536") for grp in fused.groups)
    assert not any(grp.reason.startswith("split") for grp in fuse(_softmax((300, 4096))).groups)


def loss_and_grad(shape) -> tuple[Graph, list[np.ndarray]]:
    """The GPT step's loss `(y.float() ** 2).mean()` of a bf16 y and its gradient dy, traced."""
    y = flame.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32)).to(flame.bfloat16)
    y.requires_grad_(True)

    def loss_step():
        loss = (y.float() ** 2).mean()
        loss.backward()
        return loss, y.grad

    return build(loss_step)


def test_loss_and_gradient_pick_the_split_schedule():
    g, _ = loss_and_grad((8, 1024, 1024))
    fused = fuse(g)
    (rows,) = [grp for grp in fused.groups if grp.kind == "rows"]
    assert len(rows.outputs) == 2 and {v.shape for v in rows.outputs} == {(), (8, 1024, 1024)}
    main, fold = lower(rows)
    assert "_split_" in main.name and main.grid >= 4 * DEFAULT_TARGET.sm_count and main.block == 256
    assert "_fold_" in fold.name and main.scratch == fold.scratch > 0


def test_loss_and_gradient_small_equals_reference():
    g, inputs = loss_and_grad((4, 512, 1024))
    check_fused(g, inputs)


def _gpu_check(g: Graph, inputs, rtol, atol):
    import cupy

    from flame.runtime.cuda import CompiledPlan
    from flame.runtime.reference import run_graph

    want = run_graph(g, inputs)
    got = CompiledPlan(to_plan(fuse(g)))([cupy.asarray(a.copy()) for a in inputs])
    for w, h in zip(want, got):
        np.testing.assert_allclose(cupy.asnumpy(h).astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_schedule_matches_reference(name):
    make, shape, dt, _ = CASES[name]
    g = make(shape, dt)
    tol = (2e-2, 2e-2) if dt == bf16 else (1e-4, 1e-3)
    _gpu_check(g, _inputs(g), *tol)


@pytest.mark.gpu
def test_gpu_loss_and_gradient():
    g, inputs = loss_and_grad((8, 1024, 1024))
    _gpu_check(g, inputs, 1e-4, 1e-6)


def layer_norm_fwd_bwd(shape, dt: str = "bf16") -> tuple[Graph, list[np.ndarray]]:
    """LayerNorm forward and backward (x, weight and bias gradients) of the GPT step, traced: the
    backward is one row kernel whose weight/bias gradients are column reductions over its rows."""
    import flame.nn.functional as F

    rng = np.random.default_rng(0)
    C = shape[-1]
    np_dt = flame.ir.dtype_of(dt).np_dtype

    def step(x, w, b, dy):
        def loss(x, w, b):
            return (F.layer_norm(x, C, w, b) * dy).sum()

        return (F.layer_norm(x, C, w, b), *flame.grad(loss, (0, 1, 2))(x, w, b))

    arrays = [rng.standard_normal(shape), 1 + 0.1 * rng.standard_normal(C), rng.standard_normal(C),
              rng.standard_normal(shape)]
    return build(step, *(a.astype(np.float32).astype(np_dt) for a in arrays))


def _column_kernels(shape):
    g, _ = layer_norm_fwd_bwd(shape)
    (ks,) = [ks for grp in fuse(g).groups if grp.kind == "rows" and len(ks := lower(grp)) == 2]
    return ks


@pytest.mark.parametrize("shape, block", [((8, 1024, 768), 512), ((1026, 768), 128), ((8, 100, 200), 256)])
def test_layer_norm_backward_column_schedule(shape, block):
    """Rows of <= 128 threads carrying the weight/bias gradients run 4 per 512-thread block when the
    row count lets every block's rows stay real (else one per block); the grid fills the GPU and
    no more (one partial per block); the fold kernel takes 32 columns x 32 runs per block; all compile."""
    main, fold = _column_kernels(shape)
    rows, C = math.prod(shape[:-1]), shape[-1]
    assert main.block == block and "_fold_" in fold.name and main.scratch == fold.scratch
    cap = DEFAULT_TARGET.sm_count * max(1, DEFAULT_CONFIG.column_threads // block)
    assert main.grid == min(-(-rows // (block // (32 if C <= 256 else 128))), cap)
    assert fold.block == FOLD_COLS * FOLD_PHASES == 1024 and fold.grid == -(-C // FOLD_COLS)
    assert main.scratch == 2 * -(-main.grid * C * 4 // 256) * 256  # two f32 column partials per block
    assert len(compile_many([main.source, fold.source], "sm_90")) == 2


@pytest.mark.parametrize("shape", [(4, 64, 768), (130, 768), (8, 100, 200)])
def test_layer_norm_backward_equals_reference(shape):
    g, inputs = layer_norm_fwd_bwd(shape)
    check_fused(g, inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(8, 1024, 768), (1026, 768), (8, 100, 200), (3, 7, 3000)])
@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_gpu_layer_norm_backward_matches_reference(shape, dt):
    g, inputs = layer_norm_fwd_bwd(shape, dt)
    tol = (5e-2, 5e-2) if dt == "bf16" else (1e-3, 2e-3)
    _gpu_check(g, inputs, *tol)
