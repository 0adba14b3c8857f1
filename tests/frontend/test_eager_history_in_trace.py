"""A backward() inside @flame.compile that reaches a tensor made outside by eager ops with a gradient
history (REINFORCE's `saved_log_probs` filled eagerly, summed and differentiated in a compiled update):
torch would carry the gradient on to the parameters; flame cannot, and says so, naming where the tensor
was made, instead of a step that leaves the parameters as they were. Leaves and tensors without a
history (detached, made under no_grad) are used as before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def test_backward_through_an_eager_history_raises_naming_where_it_was_made():
    lin = flame.nn.Linear(4, 2)
    opt = flame.optim.SGD(lin.parameters(), lr=0.1)
    saved = []

    @flame.compile
    def finish():
        loss = flame.cat(saved).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    saved.append(lin(flame.ones(1, 4)).log_softmax(1)[:, 0])
    w0 = lin.weight.numpy().copy()
    with pytest.raises(flame.errors.TraceError, match=r"made outside it(.|\n)*saved.append\((.|\n)*loss.backward"):
        finish()
    np.testing.assert_array_equal(lin.weight.numpy(), w0)


@pytest.mark.parametrize("how", ["detach", "no_grad"])
def test_a_tensor_made_outside_without_history_is_a_constant_as_in_torch(how):
    a = np.arange(4.0).reshape(1, 4)
    torch.manual_seed(0)
    tlin = torch.nn.Linear(4, 2).double()
    lin = flame.nn.Linear(4, 2).double()
    lin.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in tlin.state_dict().items()})

    def outside(lib, m):
        if how == "detach":
            return m(lib.tensor(a)).detach()
        with lib.no_grad():
            return m(lib.tensor(a))

    def step(m, c, x):
        loss = (m(x) * c).sum()
        loss.backward()
        return loss

    tc, fc = outside(torch, tlin), outside(flame, lin)
    want = step(tlin, tc, torch.tensor(a))
    got = flame.compile(lambda x: step(lin, fc, x))(flame.tensor(a))
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(lin.weight.grad.numpy(), tlin.weight.grad.numpy(), rtol=1e-12)
