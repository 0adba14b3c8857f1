"""f16/bf16 addmm, baddbmm and a 2-D linear whose input is not a bias vector added with alpha = beta = 1 (a
full matrix, a row, a column, a scalar, a batch; any alpha and beta) round ONCE as PyTorch does: alpha *
the f32 product + beta * the input, in f32, then one rounding. With beta = 0 the input is not read (its
NaN does not reach the result). Gradients are torch's formulas rounded as torch rounds them: the gradient
GEMM rounded, then scaled by alpha and rounded; the input's gradient scaled by beta and rounded, then
summed over its broadcast dims. A 3-D input to linear with a 2-D bias rounds twice, as torch's matmul and
add do.

Inputs are small integers: every product and partial sum is exact in f32 and alpha and beta are exact
binary fractions, so the results are decided by rounding alone and must be torch's bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F
from tests.nn.test_linear_rounding import DTYPES, _bits, _f, _t

SCALES = [(1, 1), (0.375, -1.5), (2, 0.5), (0.5, 0)]
INPUTS = [(8, 24), (24,), (8, 1), (1, 24), ()]


def _ints(rng, shape, bound=40):
    return rng.integers(-bound, bound, shape).astype(np.float32)


def _twice(a, b, c, alpha, beta, dt):
    """What rounding the product first gives: round(alpha * round(a @ b)) + round(beta * c), rounded."""
    p = (torch.tensor(a) @ torch.tensor(b)).to(DTYPES[dt]).float()
    p = (p * alpha).to(DTYPES[dt]).float()
    s = (torch.tensor(c) * beta).to(DTYPES[dt]).float()
    return (p + s).to(DTYPES[dt]).float().numpy()


def _check(fn, tfn, arrays, dt, compiled, names):
    """fn's value and the gradients of its inputs against tfn's (torch's) bits, for the cotangent arrays[-1]."""
    fs = [_f(a, dt, True) for a in arrays[:-1]]
    ts = [_t(a, dt, True) for a in arrays[:-1]]

    def step(*xs):
        y = fn(*xs[:-1])
        y.backward(xs[-1])
        return y

    y = (flame.compile(step) if compiled else step)(*fs, _f(arrays[-1], dt))
    want = tfn(*ts)
    want.backward(_t(arrays[-1], dt))
    assert y.dtype == getattr(flame, dt)
    np.testing.assert_array_equal(_bits(y), _bits(want), err_msg="value")
    for got, ref, what in zip(fs, ts, names):
        assert got.grad.dtype == getattr(flame, dt) and got.grad.shape == tuple(ref.shape)
        np.testing.assert_array_equal(_bits(got.grad), _bits(ref.grad), err_msg=f"{what} gradient")
    return _bits(want)


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("shape", INPUTS)
@pytest.mark.parametrize("alpha,beta", SCALES)
def test_addmm_is_torchs_bits(dt, compiled, shape, alpha, beta):
    rng = np.random.default_rng(len(shape) + 3)
    a, b, c, g = _ints(rng, (8, 32)), _ints(rng, (32, 24)), _ints(rng, shape, 300), _ints(rng, (8, 24))
    c = torch.tensor(c).to(DTYPES[dt]).float().numpy()
    want = _check(
        lambda c, a, b: flame.addmm(c, a, b, alpha=alpha, beta=beta),
        lambda c, a, b: torch.addmm(c, a, b, alpha=alpha, beta=beta),
        [c, a, b, g],
        dt,
        compiled,
        ("input", "mat1", "mat2"),
    )
    if beta != 0:
        assert (_twice(a, b, c, alpha, beta, dt) != want).any()  # the case tells once from twice


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("shape", [(3, 8, 24), (3, 1, 24), (3, 8, 1), (8, 24), (24,)])
@pytest.mark.parametrize("alpha,beta", [(1, 1), (0.375, -1.5)])
def test_baddbmm_is_torchs_bits(dt, compiled, shape, alpha, beta):
    rng = np.random.default_rng(len(shape))
    a, b, c, g = _ints(rng, (3, 8, 32)), _ints(rng, (3, 32, 24)), _ints(rng, shape, 300), _ints(rng, (3, 8, 24))
    c = torch.tensor(c).to(DTYPES[dt]).float().numpy()
    want = _check(
        lambda c, a, b: flame.baddbmm(c, a, b, alpha=alpha, beta=beta),
        lambda c, a, b: torch.baddbmm(c, a, b, alpha=alpha, beta=beta),
        [c, a, b, g],
        dt,
        compiled,
        ("input", "batch1", "batch2"),
    )
    assert (_twice(a, b, c, alpha, beta, dt) != want).any()


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("shape", [(8, 24), (8, 1), (1,), ()])
def test_linear_of_a_2d_input_with_a_broadcast_bias_is_torchs_bits(dt, compiled, shape):
    """torch runs a 2-D input's linear as addmm(bias, x, w.T) whatever the bias's shape: rounded once."""
    rng = np.random.default_rng(len(shape) + 7)
    x, w, bias, g = _ints(rng, (8, 32)), _ints(rng, (24, 32)), _ints(rng, shape, 300), _ints(rng, (8, 24))
    want = _check(F.linear, torch.nn.functional.linear, [x, w, bias, g], dt, compiled, ("input", "weight", "bias"))
    assert (_twice(x, w.T, bias, 1, 1, dt) != want).any()


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_linear_of_a_3d_input_with_a_2d_bias_rounds_twice_as_torch(dt):
    """torch runs it as matmul, then add: the product rounded first, as flame's ops do."""
    rng = np.random.default_rng(11)
    x, w, bias, g = _ints(rng, (3, 8, 32)), _ints(rng, (24, 32)), _ints(rng, (8, 24), 300), _ints(rng, (3, 8, 24))
    want = _check(F.linear, torch.nn.functional.linear, [x, w, bias, g], dt, False, ("input", "weight", "bias"))
    np.testing.assert_array_equal(want, _twice(x, w.T, bias, 1, 1, dt))


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("compiled", [False, True])
def test_beta_zero_does_not_read_the_input(dt, compiled):
    """NaN and inf in the input do not reach the result when beta is 0, as in torch; its gradient is 0."""
    rng = np.random.default_rng(12)
    a, b, g = _ints(rng, (8, 32)), _ints(rng, (32, 24)), _ints(rng, (8, 24))
    c = np.full((8, 24), np.nan, np.float32)
    c[0] = np.inf
    want = _check(
        lambda c, a, b: flame.addmm(c, a, b, alpha=0.5, beta=0),
        lambda c, a, b: torch.addmm(c, a, b, alpha=0.5, beta=0),
        [c, a, b, g],
        dt,
        compiled,
        ("input", "mat1", "mat2"),
    )
    assert np.isfinite(want).all()


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_autocast_addmm_rounds_once(dt):
    """f32 operands under autocast: all three cast to the low dtype, then alpha * a @ b + beta * c rounded once."""
    rng = np.random.default_rng(13)
    a, b, c = _ints(rng, (8, 32)), _ints(rng, (32, 24)), _ints(rng, (8, 24), 300)
    with flame.autocast(dtype=getattr(flame, dt)):
        got = flame.addmm(flame.tensor(c), flame.tensor(a), flame.tensor(b), alpha=0.375, beta=-1.5)
    with torch.autocast("cpu", dtype=DTYPES[dt]):
        want = torch.addmm(torch.tensor(c), torch.tensor(a), torch.tensor(b), alpha=0.375, beta=-1.5)
    assert got.dtype == getattr(flame, dt)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_f32_addmm_with_scales_is_torchs_within_f32_rounding():
    """f32 keeps its path (the product, then the scaled input added): torch's values to f32's rounding."""
    rng = np.random.default_rng(14)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((8, 32), (32, 24), (8, 1)))
    got = flame.addmm(flame.tensor(c), flame.tensor(a), flame.tensor(b), alpha=0.3, beta=0.7)
    want = torch.addmm(torch.tensor(c), torch.tensor(a), torch.tensor(b), alpha=0.3, beta=0.7)
    assert got.dtype == flame.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def _trace_plan(fn, *arrays):
    """fn's graph and inputs, planned for the CUDA target (fused as the GPU runs it)."""
    from flame.passes.fuse import fuse
    from flame.plan.build import to_plan
    from flame.runtime.backend import capabilities
    from tests.passes.fuse_cases import build

    g, inputs = build(fn, *arrays)
    target = capabilities("cuda")
    return to_plan(fuse(g, target), target=target), inputs


def _scaled_addmm_step(c, a, b, g):
    y = flame.addmm(c, a, b, alpha=0.375, beta=-1.5)
    y.backward(g)
    return y, c.grad, a.grad, b.grad


def _case(dt, rng):
    arrays = [_ints(rng, (64, 1)), _ints(rng, (64, 96)), _ints(rng, (96, 48)), _ints(rng, (64, 48))]
    return [_f(x, dt, i < 3) for i, x in enumerate(arrays)]


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_the_gpu_plan_of_a_scaled_addmm_compiles(cuda_target, dt):
    """For the CUDA target the forward is a GEMM of the operands widened to f32 and one f32 kernel that
    scales, adds and rounds; its kernels compile with NVRTC for sm_90, and the reference executor runs
    that plan to torch's bits."""
    from flame.codegen.nvrtc import compile_cubin
    from flame.plan.steps import MatmulCall
    from flame.runtime.reference import run_plan

    rng = np.random.default_rng(15)
    fc, fa, fb, fg = _case(dt, rng)
    plan, inputs = _trace_plan(_scaled_addmm_step, fc, fa, fb, fg)
    calls = [s for s in plan.steps if isinstance(s, MatmulCall)]
    assert any(c.op.out.type.dtype == flame.float32 for c in calls)
    for source in {k.source for k in plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
    got = run_plan(plan, [x.copy() for x in inputs])
    tc, ta, tb = (_t(_bits(x), dt, True) for x in (fc, fa, fb))
    want = torch.addmm(tc, ta, tb, alpha=0.375, beta=-1.5)
    want.backward(_t(_bits(fg), dt))
    for i, ref in enumerate((want, tc.grad, ta.grad, tb.grad)):
        np.testing.assert_array_equal(np.asarray(got[i], np.float32), _bits(ref), err_msg=f"output {i}")


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_the_cuda_executor_runs_a_scaled_addmm_as_the_reference(dt):
    """A full scaled addmm step (a column input, alpha and beta not 1) on the CUDA executor against the same
    plan on the reference executor: the same bits (the inputs' f32 sums are exact)."""
    import cupy

    from flame.runtime.cuda import CudaExecutor
    from flame.runtime.reference import run_plan

    rng = np.random.default_rng(16)
    plan, inputs = _trace_plan(_scaled_addmm_step, *_case(dt, rng))
    want = run_plan(plan, [a.copy() for a in inputs])
    got = CudaExecutor().compile(plan)([cupy.asarray(a) for a in inputs])
    for i, (a, ref) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(
            np.asarray(cupy.asnumpy(a), np.float32), np.asarray(ref, np.float32), err_msg=f"output {i}"
        )
