"""trunc_normal_, orthogonal_, eye_ and dirac_ of flame.nn.init: the distributions and structure
torch.nn.init's have (bounds, moments, orthogonality, the same identity and Dirac weights), seeded
by a flame.Generator."""

from __future__ import annotations

import math

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
    with pytest.raises(ValueError, match="must be below"):
        nn.init.trunc_normal_(t, a=1.0, b=0.0)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (8, 2, 3)])
def test_orthogonal(shape):
    t = flame.zeros(*shape)
    nn.init.orthogonal_(t, gain=2.0, generator=flame.Generator(1))
    m = t.numpy().reshape(shape[0], -1).astype(np.float64) / 2.0
    small = min(m.shape)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-5)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
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
