"""cummax and cummin (flame.* and Tensor.*) against torch: values, indices (the latest of equal extremes,
a NaN taking over) and the gradient (to the element each value came from), eagerly and inside
@flame.compile, along every dim, for floats, integers, bool and 0-d tensors; their kernels compile with
NVRTC for sm_90 in a step planned for the GPU."""

import numpy as np
import pytest
import torch

import flame
from tests.ops.test_everyday_ops import check_gpu_loss

X = np.array([[1.0, 3.0, 3.0, 2.0, 5.0, 5.0], [3.0, 1.0, 1.0, np.nan, 0.5, 7.0], [-1.0, -1.0, -2.0, 4.0, 4.0, -9.0]])
W = np.linspace(-1.0, 1.5, X.size).reshape(X.shape)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [1, 0, -1])
def test_values_indices_and_gradients_match_torch(name, dim, compiled):
    t = torch.tensor(X, requires_grad=True)
    want = getattr(torch, name)(t, dim)
    (torch.nan_to_num(want.values) * torch.tensor(W)).sum().backward()
    w = flame.tensor(W)

    def run(x):
        r = getattr(flame, name)(x, dim)
        grad = flame.grad(lambda y: (flame.nan_to_num(getattr(y, name)(dim).values) * w).sum())(x)
        return r.values, r.indices, grad

    values, indices, grad = (flame.compile(run) if compiled else run)(flame.tensor(X))
    np.testing.assert_array_equal(values.numpy(), want.values.detach().numpy())
    np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())
    np.testing.assert_array_equal(grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("x", [np.array([[5, 2, 2, 9, 9, -1]]), np.array([[True, False, True, True]]), np.array(2.5)])
def test_integers_bool_and_zero_d_match_torch(x):
    for name in ("cummax", "cummin"):
        want = getattr(torch.tensor(x), name)(0 if x.ndim < 2 else 1)
        got = getattr(flame.tensor(x), name)(0 if x.ndim < 2 else 1)
        assert got.values.numpy().tolist() == want.values.numpy().tolist()
        assert got.indices.numpy().tolist() == want.indices.numpy().tolist()
        assert got.values.dtype.name == flame.tensor(x).dtype.name


def test_zero_d_values_are_a_new_tensor_that_can_be_written():
    x = flame.tensor(2.5, requires_grad=True)
    for name in ("cummax", "cummin"):
        v = getattr(x, name)(0).values
        assert v is not x
        v[None] = flame.tensor([1.0])  # not the leaf: torch's values are a new tensor with a history
        v.backward()
        assert x.grad.item() == 0.0
        x.grad = None


def test_a_step_through_them_plans_for_the_gpu_and_compiles(cuda_target):
    x = flame.tensor(np.random.default_rng(0).standard_normal((4, 33)).astype(np.float32), requires_grad=True)

    check_gpu_loss(lambda x: (x.cummax(1).values * x.cummin(0).values).sum(), x)


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_on_the_gpu(compiled):
    x32 = X.astype(np.float32)
    for name in ("cummax", "cummin"):
        want = getattr(torch.tensor(x32), name)(1)
        fn = (lambda a, name=name: getattr(a, name)(1))
        got = (flame.compile(fn) if compiled else fn)(flame.tensor(x32))
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
