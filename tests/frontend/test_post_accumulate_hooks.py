"""Tensor.register_post_accumulate_grad_hook against torch: the optimizer-in-backward idiom (one
optimizer per parameter, stepped and zeroed by the hook as soon as its gradient is accumulated) gives
torch's losses and parameters eagerly and inside @flame.compile; removing the hook stops it (and traces
the step again); torch's errors for a non-leaf, a tensor that needs no gradient and a hook returning a
value."""

from __future__ import annotations

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")


def _train(lib, compiled: bool = False, remove_after: int | None = None, steps: int = 4):
    rng = np.random.default_rng(0)
    w1, w2, x = rng.standard_normal((4, 3)), rng.standard_normal((2, 4)), rng.standard_normal((5, 3))
    nn = lib.nn
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    with lib.no_grad():
        m[0].weight.copy_(lib.tensor(w1))
        m[2].weight.copy_(lib.tensor(w2))
        m[0].bias.fill_(0.1)
        m[2].bias.fill_(-0.2)
    opts = {p: lib.optim.AdamW([p], lr=0.05) for p in m.parameters()}
    calls = []

    def hook(p):
        calls.append(tuple(p.shape))
        opts[p].step()
        opts[p].zero_grad()

    handles = [p.register_post_accumulate_grad_hook(hook) for p in m.parameters()]

    def step(x):
        loss = m(x).pow(2).mean()
        loss.backward()
        return loss

    run = flame.compile(step) if compiled else step
    losses = []
    for i in range(steps):
        if i == remove_after:
            for h in handles:
                h.remove()
        losses.append(run(lib.tensor(x)).item())
    grads = [None if p.grad is None else p.grad.detach().numpy().copy() for p in m.parameters()]
    return losses, [p.detach().numpy().copy() for p in m.parameters()], grads, calls, run


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_optimizer_in_backward_matches_torch(compiled):
    want_losses, want_params, want_grads, want_calls, _ = _train(torch)
    losses, params, grads, calls, run = _train(flame, compiled)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-12)
    for got, want in zip(params, want_params):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert grads == want_grads == [None] * 4  # each hook zeroed its parameter's .grad (set_to_none)
    assert sorted(set(calls)) == sorted(set(want_calls))
    if compiled:
        assert len(calls) == 4 and run.stats().traces == 1  # the hooks ran while tracing: their ops are the step's
    else:
        assert len(calls) == len(want_calls)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_removed_hook_stops_running(compiled):
    """After handle.remove() the gradients stay in .grad and the parameters stop moving, as torch's."""
    want_losses, want_params, want_grads, _, _ = _train(torch, remove_after=2)
    losses, params, grads, _, run = _train(flame, compiled, remove_after=2)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-12)
    for got, want in zip(params + grads, want_params + want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    if compiled:  # with the hooks; without them (.grad None); with the .grad the last call left
        assert run.stats().traces == 3


def test_backward_with_inputs_runs_the_hook():
    for lib in (torch, flame):
        w = lib.ones(3, requires_grad=True)
        got = []
        w.register_post_accumulate_grad_hook(lambda p, got=got: got.append(p.grad.sum().item()))
        (w * 2).sum().backward(inputs=[w])
        assert got == [6.0], lib


@pytest.mark.parametrize("case", ["non-leaf", "no grad", "returns"])
def test_errors_as_torch(case):
    for lib in (torch, flame):
        w = lib.ones(3, requires_grad=case != "no grad")
        if case == "non-leaf":
            with pytest.raises(RuntimeError, match="non-leaf"):
                (w * 2).register_post_accumulate_grad_hook(lambda p: None)
        elif case == "no grad":
            with pytest.raises(RuntimeError, match="doesn't require gradient"):
                w.register_post_accumulate_grad_hook(lambda p: None)
        else:
            w.register_post_accumulate_grad_hook(lambda p: p * 2)
            with pytest.raises(RuntimeError, match="should return None"):
                (w * 2).sum().backward()
