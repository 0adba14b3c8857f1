"""flame.utils.checkpoint(use_reentrant=True, also the default, as torch's) against torch.utils.checkpoint's
reentrant variant: a call
whose tensor arguments require no grad records no gradient (torch's warning; the parameters the function
reads get no .grad), eagerly and inside @flame.compile; one whose argument requires grad trains as
use_reentrant=False does; keyword arguments for the function, context_fn and debug are ValueErrors."""

import warnings

import numpy as np
import pytest
import torch
import torch.utils.checkpoint

import flame
import flame.utils.checkpoint

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 3))
W1, W2 = RNG.standard_normal((3, 3)), RNG.standard_normal((2, 3))


def _grads(lib, reentrant, chained, compiled=False):
    """lin2 checkpointed on x itself (no grad) or on lin1(x), plus lin1(x) in the loss: the .grad of
    every parameter (None where it gets none) and the warnings raised."""
    lin1, lin2 = lib.nn.Linear(3, 3), lib.nn.Linear(3, 2)
    with lib.no_grad():
        lin1.weight.copy_(lib.tensor(W1, dtype=lib.float32))
        lin2.weight.copy_(lib.tensor(W2, dtype=lib.float32))
        lin1.bias.fill_(0.5)
        lin2.bias.fill_(-0.25)
    cp = torch.utils.checkpoint.checkpoint if lib is torch else flame.utils.checkpoint.checkpoint

    def step(x):
        h = lin1(x)
        y = cp(lin2, h if chained else x, use_reentrant=reentrant)
        loss = (y * y).sum() + h.sum()
        loss.backward()
        return loss

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        (flame.compile(step) if compiled else step)(lib.tensor(X, dtype=lib.float32))
    grads = [None if p.grad is None else p.grad.detach().numpy() for m in (lin1, lin2) for p in m.parameters()]
    return grads, [str(w.message) for w in seen if "requires_grad" in str(w.message)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("chained", [False, True], ids=["on_data", "on_activation"])
@pytest.mark.parametrize("reentrant", [True, False, None], ids=["reentrant", "non_reentrant", "default"])
def test_parameters_get_gradients_as_torch(reentrant, chained, compiled):
    (got, said), (want, warned) = _grads(flame, reentrant, chained, compiled), _grads(torch, reentrant, chained)
    assert [g is None for g in got] == [w is None for w in want]
    for g, w in zip(got, want):
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert said == warned


@pytest.mark.parametrize("lib", [flame, torch], ids=["flame", "torch"])
@pytest.mark.parametrize("extra", [{"k": 2.0}, {"debug": True}], ids=["kwargs", "debug"])
def test_reentrant_refuses_what_torch_refuses(lib, extra):
    cp = torch.utils.checkpoint.checkpoint if lib is torch else flame.utils.checkpoint.checkpoint
    x = lib.ones(2, requires_grad=True)
    match = "Unexpected keyword arguments: k" if "k" in extra else "only supported when use_reentrant=False"
    with pytest.raises(ValueError, match=match):
        cp(lambda a, k=1.0: a * k, x, use_reentrant=True, **extra)


@pytest.mark.parametrize("lib", [flame, torch], ids=["flame", "torch"])
def test_use_reentrant_not_given_warns_as_torch(lib):
    """Without use_reentrant, torch's checkpoint warns that it should be passed and runs the reentrant
    variant; flame's does the same (the default used to be the non-reentrant one, silently)."""
    cp = torch.utils.checkpoint.checkpoint if lib is torch else flame.utils.checkpoint.checkpoint
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed explicitly"):
        y = cp(lambda a: a * 2, lib.ones(2, requires_grad=True))
    assert y.requires_grad
