"""NAdam's mu_product and ASGD's eta and mu after load_state_dict: cast to the (f64) parameter's dtype, as
torch's load_state_dict casts them, so training goes on bit for bit with torch's, eagerly and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

KEYS = {"NAdam": ("mu_product",), "ASGD": ("eta", "mu")}


def _steps(opt, p, grads, step):
    for g in grads:
        p.grad = g
        step()


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", ["NAdam", "ASGD"])
def test_loaded_scalar_state_takes_the_parameter_dtype(name, mode):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(3,))
    grads = [rng.normal(size=(3,)) for _ in range(6)]
    kw = {"lr": 0.05}

    tp = torch.nn.Parameter(torch.tensor(w0))
    topt = getattr(torch.optim, name)([tp], **kw)
    _steps(topt, tp, [torch.tensor(g) for g in grads[:3]], topt.step)
    saved = topt.state_dict()
    topt2 = getattr(torch.optim, name)([tp], **kw)
    topt2.load_state_dict(saved)
    _steps(topt2, tp, [torch.tensor(g) for g in grads[3:]], topt2.step)

    fp = flame.nn.Parameter(flame.tensor(w0))
    fopt = getattr(flame.optim, name)([fp], **kw)
    _steps(fopt, fp, [flame.tensor(g) for g in grads[:3]], fopt.step)
    fsaved = fopt.state_dict()
    fopt2 = getattr(flame.optim, name)([fp], **kw)
    fopt2.load_state_dict(fsaved)
    for k in KEYS[name]:
        assert str(fopt2.state[fp][k].dtype) == "f64", k
        assert str(topt2.state[tp][k].dtype) == "torch.float64"
        np.testing.assert_array_equal(fopt2.state[fp][k].numpy(), saved["state"][0][k].double().numpy())
    step = fopt2.step if mode == "eager" else flame.compile(fopt2.step)
    _steps(fopt2, fp, [flame.tensor(g) for g in grads[3:]], step)
    np.testing.assert_allclose(fp.detach().numpy(), tp.detach().numpy(), rtol=1e-14, atol=1e-15)
    for k in KEYS[name]:
        np.testing.assert_allclose(fopt2.state[fp][k].numpy(), topt2.state[tp][k].numpy(), rtol=1e-15)


def test_loading_from_torch_state_dict_values():
    """A state dict whose scalars are f64 (from an f64 run) keeps their f64 values in f32-default flame."""
    fp = flame.nn.Parameter(flame.tensor(np.ones(2)))
    opt = flame.optim.NAdam([fp])
    fp.grad = flame.tensor(np.ones(2))
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["mu_product"] = flame.tensor(np.float64(0.1))
    opt.load_state_dict(sd)
    assert opt.state[fp]["mu_product"].item() == 0.1
