"""nn.init against torch: calculate_gain for every nonlinearity torch names (and its errors), the fans
behind kaiming_*/xavier_* (compared through the bounds and the spread of large draws, for weights of 2, 3
and 4 dims where fan_in and fan_out differ), modes and their errors, trunc_normal_'s bounds and moments,
orthogonal_'s orthogonality, sparse_'s zeros per column, and zero-element tensors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import flame

NONLINEARITIES = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"]  # fmt: skip


@pytest.mark.parametrize("param", [None, 0.2, 0, 3, -0.5])
@pytest.mark.parametrize("nonlinearity", NONLINEARITIES)
def test_calculate_gain(nonlinearity, param):
    want = torch.nn.init.calculate_gain(nonlinearity, param)
    got = flame.nn.init.calculate_gain(nonlinearity, param)
    assert got == pytest.approx(want, rel=1e-15), (got, want)


@pytest.mark.parametrize("nonlinearity,param", [("gelu", None), ("Relu", None), ("leaky_relu", True),
                                                ("leaky_relu", "0.1"), ("leaky_relu", [0.1])])  # fmt: skip
def test_calculate_gain_errors(nonlinearity, param):
    with pytest.raises(ValueError):
        torch.nn.init.calculate_gain(nonlinearity, param)
    with pytest.raises(ValueError) as info:
        flame.nn.init.calculate_gain(nonlinearity, param)
    assert ("negative_slope" if nonlinearity == "leaky_relu" else nonlinearity) in str(info.value)


SHAPES = [(400, 30), (24, 200), (64, 12, 5), (16, 40, 3, 3)]
INITS = {
    "kaiming_uniform_fan_in": ("kaiming_uniform_", dict(a=math.sqrt(5))),
    "kaiming_uniform_fan_out_relu": ("kaiming_uniform_", dict(mode="fan_out", nonlinearity="relu")),
    "kaiming_uniform_FAN_OUT": ("kaiming_uniform_", dict(mode="FAN_OUT", a=0.3)),
    "kaiming_normal_fan_in": ("kaiming_normal_", dict()),
    "kaiming_normal_fan_out_tanh": ("kaiming_normal_", dict(mode="fan_out", nonlinearity="tanh")),
    "xavier_uniform": ("xavier_uniform_", dict(gain=1.7)),
    "xavier_normal": ("xavier_normal_", dict(gain=0.6)),
}


def _draw(lib, fn: str, shape, kw):
    t = lib.zeros(*shape, dtype=lib.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = getattr(lib.nn.init, fn)(t, **kw)
    assert out is t
    return t.detach().numpy() if lib is torch else t.numpy()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(INITS))
def test_fans_bounds_and_spread(name, shape):
    """Large draws from the same distribution: their spread agrees within 5% (a fan_in/fan_out mix-up
    changes it by a factor of 2 or more here); uniform draws stay within torch's bound and reach it."""
    fn, kw = INITS[name]
    torch.manual_seed(0)
    flame.manual_seed(0)
    mine, theirs = _draw(flame, fn, shape, kw), _draw(torch, fn, shape, kw)
    assert mine.std() == pytest.approx(theirs.std(), rel=0.05)
    assert abs(mine.mean()) < 4 * theirs.std() / math.sqrt(mine.size)
    if "uniform" in fn:
        bound = _uniform_bound(fn, shape, kw)
        assert np.abs(theirs).max() <= bound and np.abs(mine).max() <= bound
        assert np.abs(mine).max() > 0.99 * bound


def _uniform_bound(fn: str, shape, kw) -> float:
    """torch's bound, from its own fan computation."""
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    if fn == "xavier_uniform_":
        return kw.get("gain", 1.0) * math.sqrt(6.0 / (fan_in + fan_out))
    fan = fan_in if kw.get("mode", "fan_in").lower() == "fan_in" else fan_out
    return torch.nn.init.calculate_gain(kw.get("nonlinearity", "leaky_relu"), kw.get("a", 0)) * math.sqrt(3.0 / fan)


@pytest.mark.parametrize("fn", ["kaiming_uniform_", "kaiming_normal_"])
def test_kaiming_bad_mode(fn):
    with pytest.raises(ValueError, match="fan_avg"):
        getattr(torch.nn.init, fn)(torch.empty(3, 4), mode="fan_avg")
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        getattr(flame.nn.init, fn)(flame.zeros(3, 4), mode="fan_avg")


@pytest.mark.parametrize("fn", ["kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_"])
def test_fans_need_two_dims(fn):
    with pytest.raises(ValueError):
        getattr(torch.nn.init, fn)(torch.empty(5))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        getattr(flame.nn.init, fn)(flame.zeros(5))


@pytest.mark.parametrize("fn", ["kaiming_uniform_", "kaiming_normal_"])
@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 3)])
def test_kaiming_zero_elements_is_a_no_op(fn, shape):
    with pytest.warns(UserWarning, match="zero-element"):
        getattr(torch.nn.init, fn)(torch.empty(*shape))
    t = flame.zeros(*shape)
    with pytest.warns(UserWarning, match="zero-element"):
        assert getattr(flame.nn.init, fn)(t) is t
    assert tuple(t.shape) == shape


@pytest.mark.parametrize("mean,std,a,b", [(0.0, 1.0, -2.0, 2.0), (0.5, 0.02, 0.47, 0.6), (0.0, 2.0, -1.0, 3.0)])
def test_trunc_normal(mean, std, a, b):
    torch.manual_seed(0)
    flame.manual_seed(0)
    t = torch.empty(200, 100, dtype=torch.float64)
    torch.nn.init.trunc_normal_(t, mean, std, a, b)
    f = flame.zeros(200, 100, dtype=flame.float64)
    assert flame.nn.init.trunc_normal_(f, mean, std, a, b) is f
    m, theirs = f.numpy(), t.numpy()
    assert m.min() >= a and m.max() <= b
    spread = theirs.std()
    assert m.std() == pytest.approx(spread, rel=0.05)
    assert abs(m.mean() - theirs.mean()) < 6 * spread / math.sqrt(m.size)


@pytest.mark.parametrize("gain", [1.0, 2.5])
@pytest.mark.parametrize("shape", [(6, 10), (10, 6), (4, 3, 2, 2), (7, 7)])
def test_orthogonal(shape, gain):
    t = torch.empty(*shape, dtype=torch.float64)
    torch.nn.init.orthogonal_(t, gain)
    f = flame.zeros(*shape, dtype=flame.float64)
    assert flame.nn.init.orthogonal_(f, gain) is f
    for w in (t.numpy(), f.numpy()):
        flat = w.reshape(shape[0], -1)
        small = flat @ flat.T if flat.shape[0] <= flat.shape[1] else flat.T @ flat
        np.testing.assert_allclose(small, gain**2 * np.eye(small.shape[0]), atol=1e-10)


def test_orthogonal_zero_elements():
    t = flame.zeros(0, 4)
    assert flame.nn.init.orthogonal_(t) is t and torch.nn.init.orthogonal_(torch.empty(0, 4)).shape == (0, 4)


@pytest.mark.parametrize("sparsity", [0.0, 0.1, 0.5, 1.0])
def test_sparse(sparsity):
    t = torch.empty(20, 7, dtype=torch.float64)
    torch.nn.init.sparse_(t, sparsity, std=0.3)
    f = flame.zeros(20, 7, dtype=flame.float64)
    assert flame.nn.init.sparse_(f, sparsity, std=0.3) is f
    m = f.numpy()
    np.testing.assert_array_equal((m == 0).sum(0), (t.numpy() == 0).sum(0))
    with pytest.raises(ValueError):
        torch.nn.init.sparse_(torch.empty(3), 0.1)
    with pytest.raises(ValueError, match="2 dimensions"):
        flame.nn.init.sparse_(flame.zeros(3), 0.1)
