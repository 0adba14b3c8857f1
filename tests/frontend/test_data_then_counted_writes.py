"""A write through `.data` followed by a write torch's version counter counts: the storage has one version
counter, so the nodes recorded before the `.data` write that saved the tensor raise at backward as torch's
(`y = x.exp(); y.data.mul_(3); y.mul_(2)`: exp's node saved y at version 0, y is at 1), eager and
compiled; without the counted write they read the storage as it is then. torch in float64 is the oracle:
both raise, or both give the same gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.errors import AutogradError

RNG = np.random.default_rng(3)
X, W = RNG.uniform(0.2, 0.9, 5), RNG.uniform(-1, 1, 5)


def _body(lib, variant):
    def run(x, w):
        y = x.exp()
        z = y * w
        if variant == "data then counted":
            y.data.mul_(3)
            y.mul_(2)
        elif variant == "data then counted under no_grad":
            y.data.mul_(3)
            with lib.no_grad():
                y.add_(1)
        elif variant == "data then counted into a view":
            y.data.mul_(3)
            y[1:3].mul_(2)
        elif variant == "view's data then counted":
            y[1:].data.mul_(3)
            y.sub_(1)
        elif variant == "two data writes then counted":
            y.data.mul_(3)
            y.data.add_(1)
            y.mul_(2)
        elif variant == "counted then data":
            y.mul_(2)
            y.data.mul_(3)
        elif variant == "data only":
            y.data.mul_(3)
            return (y * z).sum()
        elif variant == "data then counted, mul reads y":
            y.data.mul_(3)
            y.add_(1)
            return z.sum()
        return (y * lib.tensor(W, dtype=lib.float64)).sum()

    return run


VARIANTS = ["data then counted", "data then counted under no_grad", "data then counted into a view",
            "view's data then counted", "two data writes then counted", "counted then data", "data only",
            "data then counted, mul reads y"]


@pytest.mark.parametrize("how", ["eager", "compiled"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_counted_write_after_a_data_write_is_torchs(variant, how):
    xs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (X, W)]
    try:
        want = torch.autograd.grad(_body(torch, variant)(*xs), xs)
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        want = None
    run = _body(flame, variant)

    def grads(x, w):
        return flame.autograd.grad(run(x, w), [x, w])

    step = grads if how == "eager" else flame.compile(grads)
    args = [flame.tensor(a, dtype=flame.float64, requires_grad=True) for a in (X, W)]
    if want is None:
        with pytest.raises(AutogradError, match="modified by an inplace operation"):
            step(*args)
        return
    for g, w in zip(step(*args), want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("how", ["data", "detach"])
def test_a_whole_tensor_write_through_data_or_detach_is_no_scatter(how):
    """`ema.data.mul_(0.9).add_(x)` (or through detach()) writes all of the tensor: its new value is what was
    computed, with no scatter into the old one at every position (three kernels per write)."""
    ema = flame.zeros(8, dtype=flame.float64)

    @flame.compile
    def update(x):
        link = ema.data if how == "data" else ema.detach()
        link.mul_(0.9).add_(x)
        return ema * 1

    records = []
    with flame.debug.observe(records.append):
        got = [update(flame.tensor(np.full(8, float(k)))).numpy() for k in (1, 2)]
    np.testing.assert_allclose(got[1], (0.9 * 1 + 2) * np.ones(8))
    names = {op.name for op in records[0].graph.ops}
    assert not any("scatter" in n for n in names), names
