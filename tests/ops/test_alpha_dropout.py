"""F.alpha_dropout / nn.AlphaDropout and F.feature_alpha_dropout / nn.FeatureAlphaDropout: random, so tested
by what torch's guarantee is: each element is a * x + b where kept and SELU's saturation moved and scaled
where dropped (torch's a and b), about a fraction p dropped, a standard normal input keeps mean 0 and
variance 1 (as torch's output does), the gradient is a where kept and 0 where dropped (f64), whole
channels share a draw in the feature form, a compiled step draws afresh each call, eval is the identity."""

import math

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F
from flame import nn

ALPHA = 1.7580993408473766


def _affine(p):
    a = 1.0 / math.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
    return a, ALPHA * a * p, -ALPHA * a + ALPHA * a * p  # scale, shift where kept, value where dropped


def _kept(x, y, p):
    """Which elements were kept, checking every element is one of the two forms."""
    a, b, dropped = _affine(p)
    kept = np.isclose(y, a * x + b, rtol=1e-12, atol=1e-12)
    assert np.all(kept | np.isclose(y, dropped, rtol=1e-12, atol=1e-12))
    return kept


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("compiled", [False, True])
def test_alpha_dropout_values_statistics_and_gradient(p, compiled):
    x = flame.randn(200, 300, dtype=flame.float64, generator=flame.Generator(1))
    x.requires_grad = True

    def step(x):
        y = F.alpha_dropout(x, p, True)
        y.sum().backward()
        return y

    run = flame.compile(step) if compiled else step
    y = run(x)
    kept = _kept(x.detach().numpy(), y.numpy(), p)
    assert abs((~kept).mean() - p) < 0.01
    np.testing.assert_array_equal(x.grad.numpy(), np.where(kept, _affine(p)[0], 0.0))
    ty = torch.nn.functional.alpha_dropout(torch.tensor(x.detach().numpy()), p, True)
    for got, want in ((y.numpy().mean(), ty.mean().item()), (y.numpy().var(), ty.var().item())):
        assert abs(got - want) < 0.02
    assert abs(y.numpy().mean()) < 0.02 and abs(y.numpy().var() - 1) < 0.03
    x.grad = None
    assert not np.array_equal(_kept(x.detach().numpy(), run(x).numpy(), p), kept)  # a new draw


def test_feature_alpha_dropout_drops_whole_channels():
    x = flame.randn(8, 64, 3, 4, dtype=flame.float64)
    y = F.feature_alpha_dropout(x, 0.4, True, generator=flame.Generator(0))
    kept = _kept(x.numpy(), y.numpy(), 0.4).reshape(8, 64, -1)
    assert np.all(kept.min(-1) == kept.max(-1)) and 0.25 < (~kept).mean() < 0.55
    flat = flame.randn(50, 40, dtype=flame.float64)  # 2-D: one draw per element, as torch's
    assert 0 < (~_kept(flat.numpy(), F.feature_alpha_dropout(flat, 0.5, True).numpy(), 0.5)).mean() < 1
    with pytest.raises(flame.ShapeError, match="at least 2 dimensions"):
        F.feature_alpha_dropout(flame.ones(3), 0.5, True)


@pytest.mark.parametrize("name", ["AlphaDropout", "FeatureAlphaDropout"])
def test_modules_defaults_eval_and_edges(name):
    x = flame.randn(4, 6, 5, dtype=flame.float64)
    m, t = getattr(nn, name)(0.2), getattr(torch.nn, name)(0.2)
    assert repr(m) == repr(t)
    assert not np.array_equal(m(x).numpy(), x.numpy())
    m.eval()
    np.testing.assert_array_equal(m(x).numpy(), x.numpy())
    fn = F.alpha_dropout if name == "AlphaDropout" else F.feature_alpha_dropout
    np.testing.assert_array_equal(fn(x).numpy(), x.numpy())  # training=False by default, as torch's
    np.testing.assert_array_equal(fn(x, 1.0, True).numpy(), np.zeros(x.shape))
    with pytest.raises(ValueError, match="between 0 and 1"):
        getattr(nn, name)(1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        fn(x, -0.1, True)
    a = fn(x, 0.5, True, generator=flame.Generator(3)).numpy()
    np.testing.assert_array_equal(a, fn(x, 0.5, True, generator=flame.Generator(3)).numpy())
