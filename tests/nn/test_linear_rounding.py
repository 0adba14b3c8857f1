"""An f16/bf16 linear with a bias (F.linear, nn.Linear, autocast's linear, addmm and baddbmm with a bias
vector) adds the bias to the f32 product before its one rounding, as PyTorch's addmm does (cuBLASLt's
bias epilogue on the GPU), where rounding the product first and then the sum would be one step off in
about a third of the elements: values and gradients against torch's bits, eager and compiled. The CUDA
target runs it as one GEMM call with its bias epilogue (its kernels compile with NVRTC); a bias added
by hand after an f16/bf16 product rounds twice, as torch's ops do; on a GPU the CUDA executor agrees
with the reference executor.

Most inputs are multiples of 1/64 no larger than 1, so every product and partial sum is exact in f32
and any summation order (torch's CPU kernels, NumPy's, cuBLAS's) gives the same accumulator: the
results must be torch's bits. Normal inputs, whose f32 sums depend on the kernel's order, are held to
one step of the result's dtype and to fewer differences from torch than rounding twice gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def _exact(rng, shape):
    """Multiples of 1/64 in [-1, 1]: exact in f16 and bf16, the sums of a few hundred of their products
    exact in f32 (19 significant bits at most), a product itself often not exact in f16 or bf16."""
    return rng.integers(-64, 65, shape).astype(np.float32) / 64


def _bias(rng, n, dt):
    """A bias of arbitrary values of dt (as f32), so the product plus the bias needs rounding."""
    return torch.tensor(rng.standard_normal(n).astype(np.float32)).to(DTYPES[dt]).float().numpy()


def _f(a, dt, grad=False):
    t = flame.tensor(a).to(dt)
    return t.requires_grad_() if grad else t


def _t(a, dt, grad=False):
    return torch.tensor(a).to(DTYPES[dt]).requires_grad_(grad)


def _bits(t) -> np.ndarray:
    """A flame or torch tensor's values as f32 (exact for f16 and bf16)."""
    return t.detach().float().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.numpy(), np.float32)


def _ulp(v, dt):
    """The spacing of dt's values at v: 8 significant bits for bf16, 11 for f16 (subnormal below 2^-14)."""
    bits, smallest = (8, -126) if dt == "bf16" else (11, -14)
    e = np.floor(np.log2(np.maximum(np.abs(v), 2.0**smallest)))
    return 2.0 ** (e - (bits - 1))


def _twice(x, w, b, dt):
    """x @ w.T rounded to dt, then + b rounded again (what rounding the product first gives)."""
    p = (torch.tensor(x) @ torch.tensor(w).T).to(DTYPES[dt]).float()
    return (p + torch.tensor(b)).to(DTYPES[dt]).float().numpy()


def _linear_case(rng, dt, shape=(6, 20, 96), n=40):
    x, w = _exact(rng, shape), _exact(rng, (n, shape[-1]))
    return x, w, _bias(rng, n, dt), _exact(rng, (*shape[:-1], n))


def _step(x, w, b, g):
    y = F.linear(x, w, b)
    y.backward(g)
    return y


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("shape", [(6, 20, 96), (48, 64), (64,)])
def test_linear_values_and_gradients_are_torchs_bits(dt, compiled, shape):
    rng = np.random.default_rng(len(shape))
    x, w, b, g = _linear_case(rng, dt, shape)
    fx, fw, fb = _f(x, dt, True), _f(w, dt, True), _f(b, dt, True)
    y = (flame.compile(_step) if compiled else _step)(fx, fw, fb, _f(g, dt))
    tx, tw, tb = _t(x, dt, True), _t(w, dt, True), _t(b, dt, True)
    want = torch.nn.functional.linear(tx, tw, tb)
    want.backward(_t(g, dt))
    assert y.dtype == getattr(flame, dt)
    np.testing.assert_array_equal(_bits(y), _bits(want))
    assert (_twice(x, w, b, dt) != _bits(want)).mean() > 0.05  # the case tells once from twice
    for got, ref, what in ((fx, tx, "input"), (fw, tw, "weight"), (fb, tb, "bias")):
        assert got.grad.dtype == getattr(flame, dt)
        np.testing.assert_array_equal(_bits(got.grad), _bits(ref.grad), err_msg=f"{what} gradient")


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("compiled", [False, True])
def test_nn_linear_module_is_torchs_bits(dt, compiled):
    rng = np.random.default_rng(3)
    x, w, b, g = _linear_case(rng, dt, (4, 16, 64), 48)
    model = flame.nn.Linear(64, 48).to(getattr(flame, dt))
    model.load_state_dict({"weight": _f(w, dt), "bias": _f(b, dt)})
    tmodel = torch.nn.Linear(64, 48).to(DTYPES[dt])
    tmodel.load_state_dict({"weight": _t(w, dt), "bias": _t(b, dt)})

    def step(x, g):
        y = model(x)
        y.backward(g)
        return y

    y = (flame.compile(step) if compiled else step)(_f(x, dt), _f(g, dt))
    want = tmodel(_t(x, dt))
    want.backward(_t(g, dt))
    np.testing.assert_array_equal(_bits(y), _bits(want))
    np.testing.assert_array_equal(_bits(model.weight.grad), _bits(tmodel.weight.grad))
    np.testing.assert_array_equal(_bits(model.bias.grad), _bits(tmodel.bias.grad))


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("compiled", [False, True])
def test_autocast_linear_is_torchs_bits(dt, compiled):
    """f32 input, weight and bias under autocast: all three cast to the low dtype, the bias added before
    the one rounding (torch.autocast's linear is its addmm); the f32 leaves' gradients are the low
    dtype's, widened."""
    rng = np.random.default_rng(4)
    x, w, b, g = _linear_case(rng, dt, (2, 24, 64), 32)
    fx, fw, fb = (flame.tensor(a, requires_grad=True) for a in (x, w, b))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))

    def step(x, w, b, g):
        with flame.autocast(dtype=getattr(flame, dt)):
            y = F.linear(x, w, b)
        y.backward(g)
        return y

    y = (flame.compile(step) if compiled else step)(fx, fw, fb, _f(g, dt))
    with torch.autocast("cpu", dtype=DTYPES[dt]):
        want = torch.nn.functional.linear(tx, tw, tb)
    want.backward(_t(g, dt))
    assert y.dtype == getattr(flame, dt) and want.dtype == DTYPES[dt]
    np.testing.assert_array_equal(_bits(y), _bits(want))
    for got, ref, what in ((fx, tx, "input"), (fw, tw, "weight"), (fb, tb, "bias")):
        assert got.grad.dtype == flame.float32
        np.testing.assert_array_equal(got.grad.numpy(), ref.grad.numpy(), err_msg=f"{what} gradient")


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("compiled", [False, True])
def test_addmm_and_baddbmm_with_a_bias_vector_are_torchs_bits(dt, compiled):
    rng = np.random.default_rng(5)
    m1, m2, v, row = _exact(rng, (24, 80)), _exact(rng, (80, 40)), _bias(rng, 40, dt), _bias(rng, 40, dt)[None]
    b1, b2 = _exact(rng, (3, 16, 80)), _exact(rng, (3, 80, 40))

    def fn(m1, m2, v, row, b1, b2):
        return flame.addmm(v, m1, m2), row.addmm(m1, m2), flame.baddbmm(v, b1, b2)

    got = (flame.compile(fn) if compiled else fn)(*(_f(a, dt) for a in (m1, m2, v, row, b1, b2)))
    t = [_t(a, dt) for a in (m1, m2, v, row, b1, b2)]
    want = torch.addmm(t[2], t[0], t[1]), t[3].addmm(t[0], t[1]), torch.baddbmm(t[2], t[4], t[5])
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=f"result {i}")


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_normal_inputs_within_a_step_and_closer_than_rounding_twice(dt):
    """Where torch's CPU kernel sums in its own order, the f32 accumulators differ in their last bits:
    flame is at most one step of dt from torch, and differs from it far less often than rounding the
    product before the bias would."""
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((128, 300)).astype(np.float32), rng.standard_normal((64, 300)).astype(np.float32)
    x, w = (torch.tensor(a).to(DTYPES[dt]).float().numpy() for a in (x, w))
    b = _bias(rng, 64, dt)
    want = _bits(torch.nn.functional.linear(_t(x, dt), _t(w, dt), _t(b, dt)))
    got = _bits(F.linear(_f(x, dt), _f(w, dt), _f(b, dt)))
    assert np.all(np.abs(got - want) <= _ulp(want, dt))
    assert (got != want).mean() < 0.01
    assert (got != want).sum() < (_twice(x, w, b, dt) != want).sum() / 20


def test_a_bias_added_by_hand_rounds_twice_as_torch(cuda_target):
    """x @ w.T + b written as two ops rounds the bf16 product, then the sum, as torch's two ops do
    (only linear / addmm add before the one rounding), eager and compiled; so the GPU's plan does not
    fold that add into the GEMM's bias epilogue, which would round once."""
    rng = np.random.default_rng(7)
    x, w, b, _ = _linear_case(rng, "bf16", (32, 64), 24)

    def fn(x, w, b):
        return x @ w.T + b

    want = _bits(_t(x, "bf16") @ _t(w, "bf16").T + _t(b, "bf16"))
    np.testing.assert_array_equal(want, _twice(x, w, b, "bf16"))
    compiled = flame.compile(fn)
    for f in (fn, compiled):
        np.testing.assert_array_equal(_bits(f(_f(x, "bf16"), _f(w, "bf16"), _f(b, "bf16"))), want)
    assert [c.epilogue for c in _plan_calls(compiled)[1]] == ["none"]


def _plan_calls(step):
    from flame.plan.steps import KernelLaunch, MatmulCall

    plan = step._last.plan
    return (
        plan,
        [s for s in plan.steps if isinstance(s, MatmulCall)],
        [s for s in plan.steps if isinstance(s, KernelLaunch)],
    )


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_the_gpu_plan_runs_linear_as_one_gemm_with_its_bias(cuda_target, dt):
    """For the CUDA target: the forward is one GEMM call with the bias epilogue (no kernel adds the bias),
    a training step's results are the eager ones, and every kernel compiles with NVRTC for sm_90."""
    from flame.codegen.nvrtc import compile_cubin

    rng = np.random.default_rng(8)
    x, w, b, g = _linear_case(rng, dt, (4, 16, 64), 32)
    model = flame.nn.Sequential(flame.nn.Linear(64, 32), flame.nn.GELU(), flame.nn.Linear(32, 32))
    model = model.to(getattr(flame, dt))
    model[0].load_state_dict({"weight": _f(w, dt), "bias": _f(b, dt)})

    def step(x, g):
        y = model(x)
        y.backward(g)
        return y

    want = _bits(step(_f(x, dt), _f(g, dt))), _bits(model[0].bias.grad), _bits(model[0].weight.grad)
    model.zero_grad()
    compiled = flame.compile(step)
    got = _bits(compiled(_f(x, dt), _f(g, dt))), _bits(model[0].bias.grad), _bits(model[0].weight.grad)
    for a, b_, what in zip(got, want, ("output", "bias gradient", "weight gradient")):
        np.testing.assert_array_equal(a, b_, err_msg=what)
    plan, calls, launches = _plan_calls(compiled)
    forward = [c for c in calls if c.op.name == "matmul_bias"]
    assert len(forward) == 2 and all(c.epilogue == "bias" and c.bias is not None and c.tb for c in forward)
    assert not [k for k in launches if any(o.name == "add" and o.inputs[0].type.rank == 1 for o in k.ops)]
    sources = {k.source for k in plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


def test_the_reference_executor_applies_an_epilogue_to_the_unrounded_product(cuda_target):
    """A bf16 linear's tanh-GELU in its GEMM's epilogue is computed as cuBLASLt computes it: on the f32
    product plus the bias, rounded once into the result (and once into the aux the backward reads)."""
    from flame.ir.ops.elementwise import gelu_tanh

    rng = np.random.default_rng(9)
    x, w, b, _ = _linear_case(rng, "bf16", (64, 32), 48)
    model = flame.nn.Sequential(flame.nn.Linear(32, 48), flame.nn.GELU("tanh")).to(flame.bf16)
    model[0].load_state_dict({"weight": _f(w, "bf16"), "bias": _f(b, "bf16")})
    step = flame.compile(lambda x: model(x))
    y = step(_f(x, "bf16"))
    _, calls, _ = _plan_calls(step)
    assert [c.epilogue for c in calls] == ["bias_gelu"]
    acc = x @ w.T + b  # exact in f32
    np.testing.assert_array_equal(_bits(y), torch.tensor(gelu_tanh(acc)).bfloat16().float().numpy())


def _trace_plan(fn, *arrays):
    """fn's graph and inputs, planned for the CUDA target (fused as the GPU runs it)."""
    from flame.passes.fuse import fuse
    from flame.plan.build import to_plan
    from flame.runtime.backend import capabilities
    from tests.passes.fuse_cases import build

    g, inputs = build(fn, *arrays)
    target = capabilities("cuda")
    return to_plan(fuse(g, target), target=target), inputs


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("exact", [True, False])
def test_the_cuda_executor_runs_linear_as_the_reference_executor(dt, exact):
    """The CUDA executor's bf16/f16 linear training step (cuBLASLt's bias epilogue, the gradient GEMMs,
    the bias gradient's column sum) against the same plan on the reference executor: the same bits where
    every f32 sum is exact; on normal inputs within one step of dt (or, near zero, the f32 sums' order:
    1 of 131072 outputs differed by 2 bf16 steps at 3e-4 on an H100), rarely off."""
    import cupy

    from flame.runtime.cuda import CudaExecutor
    from flame.runtime.reference import run_plan

    rng = np.random.default_rng(10)
    x, w, b, g = _linear_case(rng, dt, (8, 64, 256), 192)
    if not exact:
        x, w, g = (
            torch.tensor(rng.standard_normal(a.shape).astype(np.float32)).to(DTYPES[dt]).float().numpy()
            for a in (x, w, g)
        )
    fx, fw, fb = _f(x, dt, True), _f(w, dt, True), _f(b, dt, True)

    def step(g):
        y = F.linear(fx, fw, fb)
        y.backward(g)
        return y, fx.grad, fw.grad, fb.grad

    plan, inputs = _trace_plan(step, _f(g, dt))
    forward = [s for s in plan.steps if getattr(s, "op", None) is not None and s.op.name == "matmul_bias"]
    assert [s.epilogue for s in forward] == ["bias"]
    want = run_plan(plan, [a.copy() for a in inputs])
    got = CudaExecutor().compile(plan)([cupy.asarray(a) for a in inputs])
    for i, (a, ref) in enumerate(zip(got, want)):
        a, ref = np.asarray(cupy.asnumpy(a), np.float32), np.asarray(ref, np.float32)
        if exact:
            np.testing.assert_array_equal(a, ref, err_msg=f"output {i}")
        else:
            # near zero, a sum that cancels differs by the f32 rounding of its terms' order (the GPU's
            # tensor cores add in another order than NumPy), not by the result's rounding
            np.testing.assert_allclose(a, ref, rtol=2.0**-7, atol=2.0**-16 * np.abs(ref).max(), err_msg=f"output {i}")
            assert (a != ref).mean() < 0.02, f"output {i}"


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_the_cuda_executor_runs_a_batched_gemm_with_its_bias_as_the_reference(dt):
    """baddbmm of a bias vector: a batched GEMM (both operands batched) with cuBLASLt's bias epilogue, the
    bias shared by every batch, on the CUDA executor against the same plan on the reference executor."""
    import cupy

    from flame.runtime.cuda import CudaExecutor
    from flame.runtime.reference import run_plan

    rng = np.random.default_rng(11)
    arrays = _exact(rng, (4, 48, 96)), _exact(rng, (4, 96, 40)), _bias(rng, 40, dt)
    plan, inputs = _trace_plan(lambda a, b, v: flame.baddbmm(v, a, b), *(_f(a, dt) for a in arrays))
    assert [s.epilogue for s in plan.steps if getattr(s, "op", None) is not None] == ["bias"]
    want = run_plan(plan, [a.copy() for a in inputs])
    got = CudaExecutor().compile(plan)([cupy.asarray(a) for a in inputs])
    np.testing.assert_array_equal(np.asarray(cupy.asnumpy(got[0]), np.float32), np.asarray(want[0], np.float32))
    t = [_t(a, dt) for a in arrays]
    np.testing.assert_array_equal(np.asarray(want[0], np.float32), _bits(torch.baddbmm(t[2], t[0], t[1])))
