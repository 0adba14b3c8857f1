"""A compiled function that runs no backward() itself, called eagerly: its results carry no autograd
history, so a backward() outside that reaches them raises, naming the compiled function and the
call's line (torch.compile's module would differentiate through the call); values, no_grad and
compiled training steps are unaffected."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def _pair():
    torch.manual_seed(0)
    theirs = torch.nn.Linear(3, 2).double()
    mine = flame.nn.Linear(3, 2).double()
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return theirs, mine


def test_backward_through_a_compiled_forward_raises_naming_the_call():
    theirs, mine = _pair()
    x = np.arange(6.0).reshape(2, 3)
    model = flame.compile(mine)
    out = model(flame.tensor(x))
    want = theirs(torch.tensor(x))
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-12)
    assert out.requires_grad == want.requires_grad
    loss = (out**2).sum()
    with pytest.raises(flame.errors.AutogradError, match=r"flame.compile\(Linear\)(.|\n)*out = model\("):
        loss.backward()
    assert mine.weight.grad is None


@pytest.mark.filterwarnings("ignore::flame.errors.RecompileWarning")  # requires_grad True -> False
def test_a_compiled_forward_under_no_grad_or_of_frozen_weights_is_plain():
    _, mine = _pair()
    model = flame.compile(mine)
    x = flame.tensor(np.ones((2, 3)))
    with flame.no_grad():
        assert not model(x).requires_grad
    mine.requires_grad_(False)
    assert not model(x).requires_grad


def test_an_input_that_requires_grad_is_reported_too():
    @flame.compile
    def f(x):
        return x.sin() * 2

    x = flame.tensor(np.ones(3), requires_grad=True)
    y = f(x)
    np.testing.assert_allclose(y.numpy(), 2 * np.sin(np.ones(3)))
    with pytest.raises(flame.errors.AutogradError, match=r"flame.compile\(f\)"):
        y.sum().backward()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_compiled_training_step_returns_its_loss_as_before(compiled):
    theirs, mine = _pair()
    opt = flame.optim.SGD(mine.parameters(), lr=0.1)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.1)

    def step(lib, model, o, x):
        loss = (model(x) ** 2).sum()
        loss.backward()
        o.step()
        o.zero_grad()
        return loss

    fstep = flame.compile(lambda x: step(flame, mine, opt, x)) if compiled else (lambda x: step(flame, mine, opt, x))
    for i in range(3):
        x = np.full((2, 3), 0.5 + i)
        got = fstep(flame.tensor(x))
        want = step(torch, theirs, topt, torch.tensor(x))
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(mine.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-12)
