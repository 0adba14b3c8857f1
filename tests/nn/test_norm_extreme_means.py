"""Every norm's statistics against torch in f64 on f32 inputs whose mean is thousands of standard deviations
(randn * scale + mean): E[x^2] - E[x]^2 in f32 cancels to noise there (outputs of ~100 where torch gives
~4, a running_var off by its momentum), the two-pass form (the mean, then the mean of (x - mean)^2) stays
within the rounding of the f32 mean itself. Values, gradients of the input and the affine parameters,
running statistics, eagerly and inside @flame.compile, and the statistics planned for the GPU with
their kernels compiled by NVRTC."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as F
from flame.codegen.nvrtc import compile_cubin

CASES = [(1000.0, 0.1), (1e4, 0.1), (1e4, 1.0)]  # (mean, scale)
MODES = ("eager", "compiled")
MOMENTUM = 0.5  # from zero running statistics: half the batch's, where a wrong variance cannot hide
SHAPE, C, GROUPS = (4, 6, 5, 6), 6, 3  # channels = the last dim: one weight serves every norm


def _tol(mean: float, scale: float) -> float:
    """Absolute tolerance on O(1) normalised values: the f32 mean is exact to a few of its ulps, which
    the normalisation divides by the standard deviation (torch's own f32 kernels are no closer)."""
    return 6 * float(np.finfo(np.float32).eps) * mean / scale + 1e-5


VAR_RTOL = 1e-3  # a variance's relative error: (the mean's error / std)^2 and the f32 sums' rounding


def _norms(lib, fn):
    """name -> f(x, weight, bias, running_mean, running_var) in library `lib` (torch or flame)."""
    return {
        "batch_norm": lambda x, w, b, rm, rv: fn.batch_norm(x, rm, rv, w, b, training=True, momentum=MOMENTUM),
        "layer_norm": lambda x, w, b, rm, rv: fn.layer_norm(x, (C,), w, b),
        "group_norm": lambda x, w, b, rm, rv: fn.group_norm(x, GROUPS, w, b),
        "instance_norm": lambda x, w, b, rm, rv: fn.instance_norm(x, rm, rv, w, b, momentum=MOMENTUM),
        "rms_norm": lambda x, w, b, rm, rv: fn.rms_norm(x, (C,), w) + b,
        "var": lambda x, w, b, rm, rv: x.var((0, 2, 3)) * w + b,
        "std": lambda x, w, b, rm, rv: x.std(-1, keepdim=True, correction=0) * w + b,
        "var_mean": lambda x, w, b, rm, rv: lib.var_mean(x, (0, 2, 3))[0] * w + b,
    }


def _inputs(mean: float, scale: float):
    rng = np.random.default_rng(int(mean) + int(10 * scale))
    x = (rng.standard_normal(SHAPE) * scale + mean).astype(np.float32)
    w = (1 + 0.2 * rng.standard_normal(C)).astype(np.float32)
    b = (0.2 * rng.standard_normal(C)).astype(np.float32)
    return x, w, b


def _torch(name, x, w, b, g_seed):
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b)]
    rm, rv = torch.zeros(C, dtype=torch.float64), torch.zeros(C, dtype=torch.float64)
    y = _norms(torch, TF)[name](*ts, rm, rv)
    g = np.random.default_rng(g_seed).standard_normal(tuple(y.shape)).astype(np.float32)
    (y * torch.tensor(g, dtype=torch.float64)).sum().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in ts], (rm.numpy(), rv.numpy()), g


def _flame(name, x, w, b, g, mode):
    ts = [flame.tensor(a, requires_grad=True) for a in (x, w, b)]
    rm, rv = flame.zeros(C), flame.zeros(C)
    gt = flame.tensor(g)

    def body(x_, w_, b_):
        y = _norms(flame, F)[name](x_, w_, b_, rm, rv)
        (y * gt).sum().backward()
        return y

    y = body(*ts) if mode == "eager" else flame.compile(body)(*ts)
    return y.numpy(), [t.grad.numpy() for t in ts], (rm.numpy(), rv.numpy())


def _close(got, want, tol, what):
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max())), err_msg=what)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mean,scale", CASES)
@pytest.mark.parametrize("name", ["batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm"])
def test_norm_of_offset_input_matches_torch_f64(name, mean, scale, mode):
    x, w, b = _inputs(mean, scale)
    want_y, want_g, want_running, g = _torch(name, x, w, b, 7)
    got_y, got_g, got_running = _flame(name, x, w, b, g, mode)
    tol = _tol(mean, scale)
    _close(got_y, want_y, tol, "output")
    for what, got, want in zip(("input", "weight", "bias"), got_g, want_g):
        _close(got, want, tol, f"gradient of the {what}")
    np.testing.assert_allclose(got_running[0], want_running[0], rtol=1e-6, err_msg="running_mean")
    np.testing.assert_allclose(got_running[1], want_running[1], rtol=VAR_RTOL, err_msg="running_var")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mean,scale", CASES)
@pytest.mark.parametrize("name", ["var", "std", "var_mean"])
def test_variance_of_offset_input_matches_torch_f64(name, mean, scale, mode):
    x, w, b = _inputs(mean, scale)
    want_y, want_g, _, g = _torch(name, x, w, b, 8)
    got_y, got_g, _ = _flame(name, x, w, b, g, mode)
    tol = _tol(mean, scale)
    np.testing.assert_allclose(got_y, want_y, rtol=0, atol=VAR_RTOL * float(np.abs(want_y).max()), err_msg="value")
    for what, got, want in zip(("input", "weight", "bias"), got_g, want_g):
        _close(got, want, tol, f"gradient of the {what}")


@pytest.mark.parametrize("name", ["batch_norm", "layer_norm", "group_norm", "instance_norm"])
def test_offset_norm_planned_for_the_gpu(cuda_target, name):
    """The two-pass statistics planned for the CUDA target (its fusion: the mean and the centred sum of
    squares as row or column reductions) agree with torch f64 on the reference executor, and every
    kernel of the plan compiles with NVRTC."""
    x, w, b = _inputs(1e4, 1.0)
    want_y, want_g, want_running, g = _torch(name, x, w, b, 9)
    ts = [flame.tensor(a, requires_grad=True) for a in (x, w, b)]
    rm, rv, gt = flame.zeros(C), flame.zeros(C), flame.tensor(g)

    @flame.compile
    def step(x_, w_, b_):
        y = _norms(flame, F)[name](x_, w_, b_, rm, rv)
        (y * gt).sum().backward()
        return y

    y = step(*ts)
    tol = _tol(1e4, 1.0)
    _close(y.numpy(), want_y, tol, "output")
    for what, t, want in zip(("input", "weight", "bias"), ts, want_g):
        _close(t.grad.numpy(), want, tol, f"gradient of the {what}")
    np.testing.assert_allclose(rv.numpy(), want_running[1], rtol=VAR_RTOL)
    sources = {k.source for k in step._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


def test_layer_norm_over_one_element_is_exactly_its_bias():
    """x - mean is an exact 0 over one element: the output is the bias and the input and weight get
    exact zero gradients (torch's kernel folds the mean into the shift and leaves |x| * eps rounding)."""
    x = flame.tensor(np.array([[-305.25], [-291.5]]), requires_grad=True)
    w = flame.tensor(np.array([1.7]), requires_grad=True)
    b = flame.tensor(np.array([0.25]), requires_grad=True)
    y = flame.nn.functional.layer_norm(x, (1,), w, b, 1e-3)
    (y * flame.tensor(np.array([[0.5], [-2.0]]))).sum().backward()
    np.testing.assert_array_equal(y.numpy(), [[0.25], [0.25]])
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0], [0.0]])
    np.testing.assert_array_equal(w.grad.numpy(), [0.0])
    np.testing.assert_array_equal(b.grad.numpy(), [-1.5])
