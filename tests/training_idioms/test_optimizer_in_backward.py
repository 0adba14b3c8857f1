"""The optimizer step fused into the backward, as torch's tutorial writes it: one optimizer per
parameter, stepped by the parameter's post-accumulate-grad hook (Tensor.register_post_accumulate_grad_hook),
so no step() or zero_grad() follows the backward. The same parameters as torch, eagerly and compiled."""

from __future__ import annotations

import pytest
import torch

import flame
from flame.errors import AutogradError
from tests.training_idioms.common import assert_same_params, batches, maybe_compile, to_lib, twin


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 6), lib.nn.Tanh(), lib.nn.Linear(6, 2))


def _fused(lib, model):
    optimizers = {p: lib.optim.AdamW([p], lr=0.05, weight_decay=0.1) for p in model.parameters()}

    def hook(p):
        optimizers[p].step()
        optimizers[p].zero_grad()

    return [p.register_post_accumulate_grad_hook(hook) for p in model.parameters()]


@pytest.mark.filterwarnings("ignore::flame.RecompileWarning")  # removing hooks re-traces
@pytest.mark.parametrize("compiled", [False, True])
def test_optimizer_in_backward_trains_as_torchs(compiled):
    theirs, mine = twin(_mlp)
    handles = {torch: _fused(torch, theirs), flame: _fused(flame, mine)}

    def step_of(lib, model):
        @maybe_compile(lib, compiled)
        def step(x, y):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            return loss

        return step

    tstep, step = step_of(torch, theirs), step_of(flame, mine)
    data = batches(6, (5, 4))
    for x, y in data[:3]:
        tstep(*to_lib(torch, x, y))
        step(*to_lib(flame, x, y))
    assert all(p.grad is None for p in mine.parameters())
    assert_same_params(mine, theirs, what="fused steps")
    for lib in (torch, flame):  # without the hooks the backward only accumulates .grad
        for h in handles[lib][:2]:
            h.remove()
    for x, y in data[3:]:
        tstep(*to_lib(torch, x, y))
        step(*to_lib(flame, x, y))
    assert_same_params(mine, theirs, what="after removing two hooks")
    for p, q in zip(mine.parameters(), theirs.parameters()):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            assert p.grad.numpy() == pytest.approx(q.grad.numpy(), rel=1e-9, abs=1e-12)


def test_post_accumulate_grad_hook_only_on_leaves_that_require_grad():
    leaf = flame.ones(2, requires_grad=True)
    with pytest.raises(AutogradError, match="non-leaf"):
        (leaf * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(AutogradError, match="doesn't require gradient"):
        flame.ones(2).register_post_accumulate_grad_hook(lambda t: None)
