"""logcumsumexp (flame.logcumsumexp, Tensor.logcumsumexp) against torch: values and gradients in f64, f32
and bf16, eagerly and inside @flame.compile, along every dim, with -inf (a running value that starts
at -inf: its gradient is NaN there, as torch's), inf, NaN and a range exp would overflow; integers are
refused as torch refuses them; its kernel compiles with NVRTC for sm_90 in a step planned for the GPU."""

import numpy as np
import pytest
import torch

import flame
from tests.ops.test_everyday_ops import check_gpu_loss

X = np.array([[-np.inf, -np.inf, 1.0, 0.5, -2.0, 3.0], [1000.0, -1000.0, 3.0, 999.0, 1001.0, -5.0],
              [0.1, np.inf, 2.0, -1.0, 0.3, 0.0], [np.nan, 1.0, 2.0, 3.0, 4.0, 5.0]])
W = np.linspace(-1.0, 1.5, X.size).reshape(X.shape)


def _torch(x, dim, dtype):
    t = torch.tensor(x).to(dtype).requires_grad_()
    y = torch.logcumsumexp(t, dim)
    (y.double() * torch.tensor(W if y.shape == W.shape else W.T)).sum().backward()
    return y.detach().double().numpy(), t.grad.double().numpy()


def _flame(x, dim, dtype, compiled):
    w = flame.tensor(W if x.shape == W.shape else W.T)

    def run(a):
        y = flame.logcumsumexp(a, dim)
        g = flame.grad(lambda b: (b.logcumsumexp(dim).double() * w).sum())(a)
        return y, g

    y, g = (flame.compile(run) if compiled else run)(flame.tensor(x).to(dtype))
    return y.double().numpy(), g.double().numpy()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("dim", [1, -1, 0])
def test_matches_torch(dim, dtype, compiled):
    x = X.T.copy() if dim == 0 else X
    want, want_grad = _torch(x, dim, getattr(torch, dtype))
    got, got_grad = _flame(x, dim, getattr(flame, dtype), compiled)
    tol = {"float64": 1e-12, "float32": 1e-6, "bfloat16": 1e-2}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.isnan(got_grad), np.isnan(want_grad))
    np.testing.assert_allclose(got_grad, want_grad, rtol=tol * 10, atol=tol * 10)


def test_zero_d_and_empty():
    for x in (np.array(2.5), np.zeros((0, 3))):
        np.testing.assert_array_equal(flame.tensor(x).logcumsumexp(0).numpy(), torch.tensor(x).logcumsumexp(0).numpy())


def test_integers_are_refused_as_torchs():
    with pytest.raises(RuntimeError):
        torch.tensor([1, 2]).logcumsumexp(0)
    with pytest.raises(flame.DTypeError, match=r"logcumsumexp(.|\n)*test_logcumsumexp"):
        flame.tensor([1, 2]).logcumsumexp(0)


def test_a_step_through_it_plans_for_the_gpu_and_compiles(cuda_target):
    x = flame.tensor(np.random.default_rng(0).standard_normal((4, 33)).astype(np.float32), requires_grad=True)

    check_gpu_loss(lambda x: (x.logcumsumexp(1) * flame.linspace(-1.0, 1.0, 33)).sum(), x)


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_on_the_gpu(compiled):
    want, want_grad = _torch(X, 1, torch.float32)
    got, got_grad = _flame(X, 1, flame.float32, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.isnan(got_grad), np.isnan(want_grad))
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-5, atol=1e-5)
