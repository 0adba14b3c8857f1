"""Optimizers on f32 parameters against torch.optim: torch computes 1 - beta1, 1 - beta2 (RMSprop's
1 - alpha, Adadelta's 1 - rho, SGD's 1 - dampening, Muon's 1 - momentum), the bias corrections and
lr / (1 - beta1^t) as Python floats and rounds each once to f32. Computed in f32 from the rounded betas,
Adam's 1 - beta2 is 0.0009999871 instead of 0.001 and exp_avg_sq drifts from torch's by 1.3e-5 relative
at once (RMSprop's square_avg by 1e-6); rounded as torch's, the state and the parameters stay within a
few f32 ulps of torch's (its CPU kernels' fused multiply-adds round differently), eagerly and compiled."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn

CASES = [
    ("Adam", dict(lr=1e-3)),
    ("Adam", dict(lr=1e-3, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=1e-3, betas=(0.8, 0.995))),
    ("NAdam", dict(lr=1e-3)),
    ("RAdam", dict(lr=1e-3)),
    ("Adamax", dict(lr=1e-3)),
    ("RMSprop", dict(lr=1e-3)),
    ("RMSprop", dict(lr=1e-3, centered=True, momentum=0.5)),
]


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_f32_state_and_parameters_follow_torch(name, kw, mode):
    r = np.random.default_rng(0)
    x0 = r.standard_normal(500).astype(np.float32)
    p, tp = nn.Parameter(flame.tensor(x0.copy())), torch.nn.Parameter(torch.tensor(x0.copy()))
    opt, topt = getattr(flame.optim, name)([p], **kw), getattr(torch.optim, name)([tp], **kw)
    step = flame.compile(opt.step) if mode == "compiled" else opt.step
    for k in range(8):
        g = (r.standard_normal(500) * 0.1 + 0.05 * x0).astype(np.float32)
        p.grad, tp.grad = flame.tensor(g), torch.tensor(g)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flame.RecompileWarning)
            step()
        topt.step()
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=0, atol=5e-7, err_msg=f"step {k}")
        for key, want in topt.state[tp].items():
            if want.ndim:
                got, want = opt.state[p][key].numpy(), want.numpy()
                scale = np.abs(want).max()
                assert np.abs(got - want).max() <= 5e-7 * scale, (k, key, np.abs(got - want).max() / scale)
