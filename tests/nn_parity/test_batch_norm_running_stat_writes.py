"""A write into batch_norm's running statistics between its call and the backward, against torch:
torch's NativeBatchNormBackward0 saves them (training too) and its kernel updates them without counting a
version, so a write of the user's into them (counted: in place, under no_grad, reset_running_stats) raises
at backward, and a second call of the module before it, or a write through `.data`, does not. An
instance_norm's update (a counted copy_) saves nothing of them. Eager and compiled; where neither raises,
the gradients and the running statistics agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.errors import AutogradError

RNG = np.random.default_rng(5)
X = RNG.standard_normal((6, 3, 4))


def _module_body(lib, variant):
    nn = lib.nn
    bn = nn.BatchNorm1d(3).double()
    if variant == "evaluating, then a write":
        bn.eval()

    def run(x):
        y = bn(x)
        if variant in ("a write", "evaluating, then a write"):
            bn.running_mean.add_(1)
        elif variant == "a second call":
            y = y * bn(x)
        elif variant == "a write under no_grad":
            with lib.no_grad():
                bn.running_var.mul_(2)
        elif variant == "a write through .data":
            bn.running_var.data.mul_(2)
        elif variant == "reset_running_stats":
            bn.reset_running_stats()
        elif variant == "a second call, then a write":
            y = y * bn(x)
            bn.running_mean.zero_()
        return (y * y).sum()

    return bn, run


def _functional_body(lib, variant):
    f = lib.nn.functional
    stats = [lib.zeros(3, dtype=lib.float64), lib.ones(3, dtype=lib.float64)]

    def run(x):
        if variant == "instance_norm, then a write":
            y = f.instance_norm(x, stats[0], stats[1], use_input_stats=True)
        else:
            y = f.batch_norm(x, stats[0], stats[1], training=True)
        stats[0].mul_(0.5)
        return (y * y).sum()

    return stats, run


MODULE = ["a write", "evaluating, then a write", "a second call", "a write under no_grad", "a write through .data",
          "reset_running_stats", "a second call, then a write"]
FUNCTIONAL = ["batch_norm, then a write", "instance_norm, then a write"]


def _check(variant, how, body, stats_of):
    x = torch.tensor(X, requires_grad=True)
    owner, run = body(torch, variant)
    try:
        want = torch.autograd.grad(run(x), [x])[0]
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        want = None
    fowner, frun = body(flame, variant)

    def grads(x):
        return flame.autograd.grad(frun(x), [x])[0]

    step = grads if how == "eager" else flame.compile(grads)
    fx = flame.tensor(X, requires_grad=True)
    if want is None:
        with pytest.raises(AutogradError, match="modified by an inplace operation"):
            step(fx)
        return
    np.testing.assert_allclose(step(fx).numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
    for got, ref in zip(stats_of(fowner), stats_of(owner)):
        np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("how", ["eager", "compiled"])
@pytest.mark.parametrize("variant", MODULE)
def test_module_running_stats_written_after_the_call(variant, how):
    _check(variant, how, _module_body, lambda bn: (bn.running_mean, bn.running_var))


@pytest.mark.parametrize("how", ["eager", "compiled"])
@pytest.mark.parametrize("variant", FUNCTIONAL)
def test_functional_running_stats_written_after_the_call(variant, how):
    _check(variant, how, _functional_body, lambda stats: stats)


def test_the_update_counts_no_version_as_torchs():
    """torch's kernel moves the statistics without moving their version; instance_norm's copy_ moves it."""
    for lib in (torch, flame):
        stats = [lib.zeros(3, dtype=lib.float64), lib.ones(3, dtype=lib.float64)]
        x = lib.tensor(X)
        lib.nn.functional.batch_norm(x, stats[0], stats[1], training=True)
        assert stats[0]._version == 0 and float(stats[0].abs().sum()) > 0, lib.__name__
        lib.nn.functional.instance_norm(x, stats[0], stats[1], use_input_stats=True)
        assert stats[0]._version == 1, lib.__name__
