"""Parameters the distribution tests draw: lower-triangular scales, covariance matrices and probability
vectors."""

import numpy as np


def tril(rng, *batch, n=3):
    """A lower-triangular [*batch, n, n] scale with a positive diagonal in [0.5, 1.5)."""
    a = np.tril(rng.normal(size=(*batch, n, n)) * 0.4)
    idx = np.arange(n)
    a[..., idx, idx] = rng.uniform(0.5, 1.5, size=(*batch, n))
    return a


def probs(rng, *shape):
    """Probability vectors along the last dim, each at least about 0.1 / n."""
    p = rng.uniform(0.1, 1.0, size=shape)
    return p / p.sum(-1, keepdims=True)


def spd(rng, *batch, n=3):
    """A symmetric positive-definite [*batch, n, n] matrix, L @ L.T of a tril() scale."""
    a = tril(rng, *batch, n=n)
    return a @ np.swapaxes(a, -1, -2)
