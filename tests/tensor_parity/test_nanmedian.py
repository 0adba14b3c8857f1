"""nanmedian against torch: the lower median of the values that are not NaN, NaN where a line holds only
NaN; with dim, (values, indices) and the gradient to the picked element; without, a 0-d median whose
gradient is shared by the elements equal to it; eager and inside @flame.compile."""

import numpy as np
import pytest
import torch

import flame

X = np.array([[3.0, np.nan, 1.0, 2.0, 7.0], [np.nan, np.nan, np.nan, np.nan, np.nan],
              [5.0, 4.0, np.nan, -1.0, 0.5], [2.5, 9.0, 8.0, -3.0, 6.0]])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dim,keepdim", [(1, False), (0, False), (-1, True)])
def test_nanmedian_along_a_dim(dim, keepdim, compiled):
    t = torch.tensor(X, requires_grad=True)
    want = torch.nanmedian(t, dim, keepdim)
    w = torch.linspace(0.5, 1.5, want.values.numel(), dtype=torch.float64).reshape(want.values.shape)
    torch.nan_to_num(want.values * w).sum().backward()

    def run(x):
        got = flame.nanmedian(x, dim, keepdim)
        weights = flame.tensor(w.numpy())
        grad = flame.grad(lambda y: flame.nan_to_num(y.nanmedian(dim, keepdim).values * weights).sum())(x)
        return got.values, got.indices, grad

    values, indices, grad = (flame.compile(run) if compiled else run)(flame.tensor(X))
    np.testing.assert_array_equal(values.numpy(), want.values.detach().numpy())
    finite = ~np.isnan(want.values.detach().numpy())  # an all-NaN line's index is not specified
    np.testing.assert_array_equal(indices.numpy()[finite], want.indices.numpy()[finite])
    np.testing.assert_array_equal(grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("x", [X, np.array([1.0, np.nan, 1.0, 0.0]), np.full(3, np.nan)])
def test_nanmedian_of_everything(x):
    t = torch.tensor(x, requires_grad=True)
    want = t.nanmedian()
    want.backward()
    f = flame.tensor(x, requires_grad=True)
    got = f.nanmedian()
    got.backward()
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    np.testing.assert_array_equal(f.grad.numpy(), t.grad.numpy())


def test_nanmedian_of_nothing_is_nan():
    """torch: the median of no elements is NaN (flame's raised an index error from its gather)."""
    for shape in ((0,), (0, 3)):
        assert np.isnan(flame.zeros(shape).nanmedian().item()) and np.isnan(torch.zeros(shape).nanmedian().item())
        assert flame.zeros(shape).nanmedian().dtype == flame.float32


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("x", [np.full(4, -np.inf), np.array([np.inf, np.nan, np.inf, 1.0]),
                               np.array([-np.inf, -np.inf, np.inf, np.inf])])
def test_nanmedian_of_everything_at_an_infinity(x, compiled):
    """An infinite median is that infinity (not NaN), its gradient shared by the elements equal to it."""
    t = torch.tensor(x, requires_grad=True)
    want = t.nanmedian()
    want.backward()

    def run(f):
        return f.nanmedian(), flame.grad(lambda y: y.nanmedian())(f)

    got, grad = (flame.compile(run) if compiled else run)(flame.tensor(x))
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    np.testing.assert_array_equal(grad.numpy(), t.grad.numpy())
