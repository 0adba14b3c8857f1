"""trunc_normal_, orthogonal_, eye_ and dirac_ of flame.nn.init: the distributions and structure
torch.nn.init's have (bounds, moments, orthogonality, the same identity and Dirac weights), seeded
by a flame.Generator."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn


def test_trunc_normal_stays_in_bounds_with_the_truncated_moments():
    t = flame.zeros(200_000)
    nn.init.trunc_normal_(t, mean=0.5, std=1.0, a=-1.5, b=2.5, generator=flame.Generator(0))
    x = t.numpy()
    assert x.min() >= -1.5 and x.max() <= 2.5
    from scipy.stats import truncnorm

    dist = truncnorm(-2.0, 2.0, loc=0.5, scale=1.0)
    assert abs(x.mean() - dist.mean()) < 0.01 and abs(x.std() - dist.std()) < 0.01
    w = flame.zeros(64, 64)
    nn.init.trunc_normal_(w, std=0.02)  # the ViT idiom: bounds of +-2 are far outside
    assert abs(w.numpy().std() - 0.02) < 0.002
    again = flame.zeros(200_000)
    nn.init.trunc_normal_(again, mean=0.5, std=1.0, a=-1.5, b=2.5, generator=flame.Generator(0))
    np.testing.assert_array_equal(again.numpy(), x)
    message = r"^uniform_ expects to return a \[from, to\) range, but found from=1 > to=0$"
    with pytest.raises(RuntimeError, match=message):
        nn.init.trunc_normal_(t, a=1.0, b=0.0)
    with pytest.raises(RuntimeError, match=message):
        torch.nn.init.trunc_normal_(torch.zeros(3), a=1.0, b=0.0)
    np.testing.assert_array_equal(nn.init.trunc_normal_(flame.zeros(3), a=0.5, b=0.5).numpy(), [0.5] * 3)


@pytest.mark.parametrize("mean,std,a,b", [(10.0, 1.0, -2.0, 2.0), (0.0, 1.0, 8.0, 9.0), (0.0, 1.0, -9.0, -8.0),
                                          (0.0, 1.0, 5.0, 6.0), (0.0, 1.0, 0.0, math.inf),
                                          (0.0, 1.0, -math.inf, math.inf)])
def test_trunc_normal_with_bounds_in_the_tails_follows_the_truncated_distribution(mean, std, a, b):
    """Bounds many std from the mean, where the normal's CDF rounds to 0 or 1, still give the truncated
    normal's moments (torch's rejection sampling does), and every value lies in [a, b]."""
    from scipy.stats import truncnorm

    dist = truncnorm((a - mean) / std, (b - mean) / std, loc=mean, scale=std)
    far = mean < a - 2 * std or mean > b + 2 * std
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = nn.init.trunc_normal_(flame.zeros(100_000, dtype=flame.float64), mean, std, a, b,
                                  generator=flame.Generator(3)).numpy()
    said = [str(w.message) for w in caught if "trunc_normal_" in str(w.message)]
    assert said == (["mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may "
                     "be incorrect."] if far else [])
    assert np.isfinite(x).all() and x.min() >= a and x.max() <= b
    assert abs(x.mean() - dist.mean()) < 5 * dist.std() / math.sqrt(x.size)
    assert abs(x.std() - dist.std()) < 0.02 * dist.std()


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (8, 2, 3)])
def test_orthogonal(shape):
    t = flame.zeros(*shape)
    nn.init.orthogonal_(t, gain=2.0, generator=flame.Generator(1))
    m = t.numpy().reshape(shape[0], -1).astype(np.float64) / 2.0
    small = min(m.shape)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-5)
    with pytest.raises(ValueError, match="^Only tensors with 2 or more dimensions are supported$"):
        nn.init.orthogonal_(flame.zeros(3))


@pytest.mark.parametrize("shape,groups", [((4, 6), 1), ((3, 3), 1), ((4, 4, 3), 1), ((6, 3, 3, 3), 2),
                                          ((4, 2, 1, 3, 3), 1)])
def test_eye_and_dirac_equal_pytorch(shape, groups):
    t, ref = flame.zeros(*shape), torch.zeros(*shape)
    if len(shape) == 2:
        nn.init.eye_(t)
        torch.nn.init.eye_(ref)
    else:
        nn.init.dirac_(t, groups)
        torch.nn.init.dirac_(ref, groups)
    np.testing.assert_array_equal(t.numpy(), ref.numpy())


def test_a_dirac_convolution_is_the_identity():
    w = flame.zeros(3, 3, 3, 3)
    nn.init.dirac_(w)
    x = flame.randn(2, 3, 5, 5, generator=flame.Generator(2))
    np.testing.assert_allclose(nn.functional.conv2d(x, w, padding=1).numpy(), x.numpy(), atol=1e-6)
    assert math.isclose(float(w.numpy().sum()), 3.0)


_INIT_ERRORS = [("xavier_uniform_", (3,), ()), ("xavier_normal_", (), ()), ("kaiming_uniform_", (3,), ()),
                ("kaiming_normal_", (3,), ()), ("orthogonal_", (3,), ()), ("eye_", (2, 3, 4), ()),
                ("eye_", (3,), ()), ("dirac_", (2, 3), ()), ("dirac_", (6, 2, 3), (4,)), ("sparse_", (2, 3, 4), (0.5,)),
                ("sparse_", (3,), (0.5,))]


@pytest.mark.parametrize("name,shape,args", _INIT_ERRORS)
def test_init_errors_as_torch(name, shape, args):
    """Each fill's ValueError for a tensor it cannot fill, torch's type and message."""
    with pytest.raises(ValueError) as expected:
        getattr(torch.nn.init, name)(torch.zeros(shape), *args)
    with pytest.raises(ValueError) as got:
        getattr(nn.init, name)(flame.zeros(*shape), *args)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("nonlinearity,param", [("gelu", None), ("Linear", None), ("leaky_relu", True),
                                                ("leaky_relu", "x")])
def test_calculate_gain_errors_as_torch(nonlinearity, param):
    with pytest.raises(ValueError) as expected:
        torch.nn.init.calculate_gain(nonlinearity, param)
    with pytest.raises(ValueError) as got:
        nn.init.calculate_gain(nonlinearity, param)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_trunc_normal_refuses_a_tensor_that_is_not_floating(dtype):
    with pytest.raises(NotImplementedError):
        torch.nn.init.trunc_normal_(torch.zeros(3, dtype=getattr(torch, dtype)))
    with pytest.raises(TypeError, match="trunc_normal_: dtype must be a float dtype"):
        nn.init.trunc_normal_(flame.zeros(3, dtype=getattr(flame, dtype)))
