"""Fused kernels (codegen/fused.py): every kernel the fusion pass makes for the composites, a whole
training step (f32, f16, bf16) and random graphs compiles with NVRTC for sm_80 and sm_90 (no GPU
needed); sources name their ops; and (marked gpu) fused plans on the GPU match the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from flame.codegen import lower
from flame.codegen.nvrtc import compile_many
from flame.ir import Builder, Graph, TensorType, bf16, f16, f32, verify
from flame.passes.fuse import fuse
from flame.passes.pipeline import run_pipeline
from flame.plan.build import to_plan
from flame.plan.steps import KernelLaunch
from flame.runtime.reference import run_graph
from tests.passes.conftest import random_array
from tests.passes.fuse_cases import (
    COMPOSITES,
    composite,
    cross_entropy,
    cross_entropy_bf16,
    layer_norm_params,
    mlp_adamw,
    multi_adamw,
    square_bf16,
)
from tests.passes.test_random_graphs import graphs

ARCHS = ("sm_80", "sm_90")


def fused_kernels(g: Graph) -> list:
    return [k for grp in fuse(g).groups if len(grp.ops) > 1 and grp.kind != "matmul" for k in lower(grp)]


def _compile(kernels) -> None:
    for arch in ARCHS:
        assert len(compile_many([k.source for k in kernels], arch)) == len(kernels)


def _graphs():
    out = {f"{n}_{d}": composite(n, d == "bwd")[0] for n in sorted(COMPOSITES) for d in ("fwd", "bwd")}
    out["cross_entropy_fwd"] = cross_entropy()[0]
    out["cross_entropy_bwd"] = cross_entropy(True)[0]
    out["layer_norm_params_bwd"] = layer_norm_params()[0]
    out["cross_entropy_bf16_bwd"] = cross_entropy_bf16()[0]
    out["square_bf16_bwd"] = square_bf16()[0]
    for dt in ("f32", "f16", "bf16"):
        out[f"mlp_adamw_{dt}"] = mlp_adamw(dtype=dt)[0]
    out["multi_adamw_bf16"] = multi_adamw()[0]
    return out


@pytest.mark.parametrize("name", sorted(_graphs()))
def test_fused_kernels_compile(name):
    kernels = fused_kernels(_graphs()[name])
    assert kernels
    for k in kernels:
        assert k.source.startswith("// flame fused kernel (")
        assert k.name.startswith(("fused_", "reduce_")) and k.n_outputs >= 1
    _compile(kernels)


def test_bf16_cross_entropy_plan_compiles():
    """Every kernel of the bf16 cross-entropy's plan on the CUDA target (the row kernel reading bf16
    logits and writing the bf16 gradient, the bf16 gather) compiles."""
    from flame.runtime.backend import capabilities

    target = capabilities("cuda")
    plan = to_plan(fuse(cross_entropy_bf16(vocab=3000)[0], target), target=target)
    _compile([s for s in plan.steps if isinstance(s, KernelLaunch)])


@pytest.mark.parametrize("dt", [f32, f16, bf16], ids=lambda d: d.name)
def test_low_precision_rows_and_vector_paths_compile(dt):
    g = Graph("rows")
    b = Builder(g)
    x, y = g.add_input(TensorType((64, 3000), dt)), g.add_input(TensorType((64, 3000), dt))
    s = b.add(x, y)
    m = b.reduce_max(s, axes=[1], keepdim=True)
    e = b.exp(b.sub(s, m))
    g.outputs = [b.div(e, b.reduce_sum(e, axes=[1], keepdim=True)), b.exp(b.mul(b.mul(x, y), 2.0))]
    ks = fused_kernels(verify(g))
    assert len(ks) == 2 and any("flame_vec<" in k.source.split("extern")[1] for k in ks)
    _compile(ks)
    big = Graph("streamed")
    b = Builder(big)
    x = big.add_input(TensorType((2, 40000), dt))
    big.outputs = [b.mul(x, b.rsqrt(b.reduce_mean(b.mul(x, x), axes=[1], keepdim=True)))]
    ks = fused_kernels(verify(big))
    assert "streamed" in ks[0].source
    _compile(ks)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=graphs())
def test_random_graph_kernels_compile(g):
    ks = fused_kernels(run_pipeline(g))
    if ks:
        _compile(ks)


def test_scalar_kernel_that_absorbed_a_whole_tensor_sum_is_a_rows_kernel():
    """Found by the random-graph test: 0-d work fed by a whole-tensor sum fuses into one kernel that the
    fusion pass must record as rows (codegen lowers by kind), not elementwise."""
    g = Graph("scalar_sum")
    a = g.add_input(TensorType((), f16))
    x = g.add_input(TensorType((2, 1, 3), f32))
    b = Builder(g)
    r = b.add(b.reshape(a, shape=[1]), b.reshape(a, shape=[1]))
    t = b.reduce_sum(b.reduce_sum(b.cast(x, dtype=f16), axes=[1], keepdim=True), axes=[0, 1, 2], keepdim=False)
    u = b.add(b.add(t, t), t)
    g.outputs = [b.add(b.reshape(b.add(u, u), shape=[1]), b.add(r, r))]
    verify(g)
    fused = fuse(run_pipeline(g))
    (grp,) = [grp for grp in fused.groups if any(op.name == "reduce_sum" for op in grp.ops) and len(grp.ops) > 1]
    assert grp.kind == "rows"
    _compile(fused_kernels(run_pipeline(g)))


def _gpu_check(g: Graph, inputs, rtol=2e-4, atol=2e-5):
    import cupy

    from flame.runtime.cuda import CompiledPlan

    fused = fuse(g)
    plan = to_plan(fused)
    assert any(isinstance(s, KernelLaunch) and s.n_outputs >= 1 for s in plan.steps)
    want = run_graph(g, inputs)
    got = CompiledPlan(plan)([cupy.asarray(a.copy()) for a in inputs])
    for w, h in zip(want, got):
        np.testing.assert_allclose(cupy.asnumpy(h).astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(_graphs()))
def test_gpu_fused_matches_reference(name):
    from tests.passes.fuse_cases import build  # noqa: F401  (graphs come with their inputs below)

    if name.startswith("mlp_adamw"):
        dt = name.rsplit("_", 1)[1]
        g, inputs, _ = mlp_adamw(dtype=dt)
        tol = {"f32": (2e-4, 2e-5), "f16": (2e-2, 2e-2), "bf16": (1e-1, 1e-1)}[dt]
        _gpu_check(g, inputs, *tol)
        return
    if name == "multi_adamw_bf16":
        _gpu_check(*multi_adamw(), 1e-2, 1e-2)
        return
    if name.startswith("cross_entropy") and "bf16" not in name:
        g, inputs = cross_entropy(name.endswith("bwd"))
    elif name == "layer_norm_params_bwd":
        g, inputs = layer_norm_params()
    elif name.endswith("bf16_bwd"):  # bf16 logits / matmul results: bf16 rounding of the gradients
        g, inputs = (cross_entropy_bf16 if name.startswith("cross") else square_bf16)()
        _gpu_check(g, inputs, 2e-2, 2e-2)
        return
    else:
        base, d = name.rsplit("_", 1)
        g, inputs = composite(base, d == "bwd")
    _gpu_check(g, inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(64, 3000), (3, 20000), (1000, 7)])
def test_gpu_rows_sizes(shape):
    g = Graph("sizes")
    b = Builder(g)
    x = g.add_input(TensorType(shape, f32))
    m = b.reduce_max(x, axes=[1], keepdim=True)
    e = b.exp(b.sub(x, m))
    g.outputs = [b.div(e, b.reduce_sum(e, axes=[1], keepdim=True)), b.mul(x, 2.0)]
    _gpu_check(verify(g), [random_array(v.type, np.random.default_rng(0)) * 0 + np.random.default_rng(1)
                           .standard_normal(v.shape).astype(np.float32) for v in g.inputs])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(64, 3000), (3, 20000), (1000, 7), (2, 3, 50), (8192, 512)])
def test_gpu_column_reductions_in_row_kernels(shape):
    """Column sums/means carried by a row kernel (registers, streamed, warp-per-row, 3-d) match the
    reference; with more rows than partial slots, each slot folds many rows."""
    g = Graph("columns")
    b = Builder(g)
    x, dy = g.add_input(TensorType(shape, f32)), g.add_input(TensorType(shape, f32))
    lead = list(range(len(shape) - 1))
    y = b.mul(x, b.rsqrt(b.reduce_mean(b.mul(x, x), axes=[len(shape) - 1], keepdim=True)))
    g.outputs = [y, b.reduce_sum(b.mul(y, dy), axes=lead), b.reduce_mean(dy, axes=lead, keepdim=True)]
    rng = np.random.default_rng(0)
    # atol: the reference sums up to 8192 unit-sized terms row by row in f32 (error ~ n * eps)
    _gpu_check(verify(g), [rng.standard_normal(shape).astype(np.float32) for _ in range(2)], 1e-4, 2e-3)


def _norm_apply() -> Graph:
    """A BatchNorm's normalisation over channels-last [N, H, W, C] with its per-channel rsqrt (and an f32
    value of it for the backward) computed in the same kernel and written as [1, 1, 1, C] results."""
    g = Graph("norm_apply")
    x = g.add_input(TensorType((4, 6, 6, 16), bf16))
    var, w = (g.add_input(TensorType((1, 1, 1, 16), bf16)) for _ in range(2))
    b = Builder(g)
    r = b.rsqrt(b.add(var, b.full(shape=(), value=1e-5, dtype="bf16")))
    g.outputs = [b.relu(b.mul(b.mul(x, r), w)), r, b.mul(b.cast(r, dtype=f32), b.cast(r, dtype=f32))]
    return g


def test_per_channel_results_keep_the_vector_path():
    """The [1, 1, 1, C] results are written element by element under their broadcast guard from the
    vector loop; they no longer hold the kernel to 2-byte loads (resnet_block_train's BatchNorm
    kernels ran at 43% of copy so on an H100), and the f32 one does not halve the vector width."""
    (grp,) = fuse(_norm_apply()).groups
    (k,) = lower(grp)
    src = k.source
    assert "8 elements per 16-byte access" in src and "if (c0 == 0) out0[c1]" in src, src
    assert "if (c0 == 0) out2[c1]" in src
    compile_many([k.source], "sm_90")


@pytest.mark.gpu
def test_gpu_per_channel_results_from_the_vector_path_match_the_reference():
    g = _norm_apply()
    rng = np.random.default_rng(5)
    x, var, w = (rng.standard_normal(v.shape).astype(np.float32) for v in g.inputs)
    inputs = [a.astype(v.dtype.np_dtype) for a, v in zip((x, np.abs(var) + 0.5, w), g.inputs)]
    _gpu_check(g, inputs, rtol=2e-2, atol=2e-2)


def _sibling_group():
    """One elementwise kernel of tanh(h) and h * dy (independent, both reading h whole), exp(z) and
    w + s (s a 0-d input, shared with nothing else of that shape), as the fusion pass makes of a
    GELU recomputed beside its gradient: (graph, group)."""
    from flame.ir.graph import FusionGroup, Kind

    g = Graph("siblings")
    b = Builder(g)
    h, dy, z, w = (g.add_input(TensorType((64, 96), bf16)) for _ in range(4))
    s = g.add_input(TensorType((), bf16))
    g.outputs = [b.tanh(h), b.mul(h, dy), b.exp(z), b.add(w, s), b.sub(z, s)]
    g = verify(g)
    return g, FusionGroup(tuple(g.ops), Kind.ELEMENTWISE, "test", tuple(g.outputs))


def test_parts_reading_one_value_in_common_are_one_segment():
    """A GELU recomputed beside its gradient reads the pre-activation once: parts of an elementwise
    kernel over one domain that read a value of that shape in common run as one segment; a part
    sharing only a 0-d value, or nothing, keeps its own."""
    from flame.codegen.fused import prepare

    g, grp = _sibling_group()
    _, segs, _, _ = prepare(grp)
    assert sorted(sorted(op.name for op in seg) for seg in segs) == [["add"], ["exp", "sub"], ["mul", "tanh"]]
    (k,) = lower(grp)
    assert "_x3_" in k.name and "tanh mul over [64, 96]" in k.source  # three segments, h's two parts as one
    _compile([k])


@pytest.mark.gpu
def test_gpu_parts_reading_one_value_in_common_match_the_reference():
    import cupy

    from flame.codegen import nvrtc
    from flame.codegen.fused import group_inputs

    r = np.random.default_rng(3)
    g, grp = _sibling_group()
    inputs = [random_array(v.type, r) for v in g.inputs]
    want = run_graph(g, inputs)
    (k,) = lower(grp)
    mod = cupy.cuda.function.Module()
    mod.load(nvrtc.compile_cubin(k.source, nvrtc.device_arch()))
    fn = mod.get_function(k.name)
    ins = [cupy.asarray(inputs[g.inputs.index(v)].view(np.uint16)) for v in group_inputs(grp)]  # bf16 bits
    outs = [cupy.empty(v.shape, np.uint16) for v in grp.outputs]
    fn((k.grid,), (k.block,), (*ins, *outs))
    for v, o in zip(grp.outputs, outs):
        got = cupy.asnumpy(o).view(want[0].dtype).astype(np.float64)
        np.testing.assert_allclose(got, want[g.outputs.index(v)].astype(np.float64), rtol=1e-2, atol=1e-2)


def _norm_of_an_empty_slice(lib, x):
    """The 2-norm of an empty slice of x, and its gradient: the backward pads a zero-size gradient
    into x's shape, a rows kernel whose reductions (over the empty row) nothing it stores reads."""
    n = x[:0].norm(2.0, (0,))
    n.backward()
    return n


@pytest.mark.parametrize("shape", [(1,), (3,)])
def test_a_row_kernel_with_a_reduction_nothing_stores_reads_renders_and_compiles(shape, cuda_target):
    import torch

    import flame

    a = np.linspace(-1.0, 1.0, math.prod(shape)).reshape(shape).astype(np.float32)
    tx = torch.tensor(a, requires_grad=True)
    want = _norm_of_an_empty_slice(torch, tx)
    step = flame.compile(lambda x: _norm_of_an_empty_slice(flame, x))
    for run in (lambda x: _norm_of_an_empty_slice(flame, x), step):  # eager, then compiled
        x = flame.tensor(a, requires_grad=True)
        np.testing.assert_array_equal(run(x).numpy(), want.detach().numpy())
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    kernels = [k for k in step._last.plan.kernels() if k.source.startswith("// flame fused kernel (")]
    assert kernels
    _compile(kernels)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1,), (3,)])
def test_gpu_a_row_kernel_with_a_reduction_nothing_stores_reads_matches_torch(shape):
    import torch

    import flame

    a = np.linspace(-1.0, 1.0, math.prod(shape)).reshape(shape).astype(np.float32)
    tx = torch.tensor(a, requires_grad=True)
    want = _norm_of_an_empty_slice(torch, tx)
    x = flame.tensor(a, requires_grad=True)
    got = flame.compile(lambda x: _norm_of_an_empty_slice(flame, x))(x)
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
