"""Adamax, NAdam, RAdam, Adadelta, ASGD and Rprop against torch.optim's on the same parameters and gradients: eight
steps (RAdam's rectification starts at the sixth), eager and compiled, every option; the same state
names and values; a bf16 parameter; one trace over the steps; a multi-parameter update planned for the
CUDA target whose kernels compile for sm_90."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from tests.optim.test_rmsprop_adagrad import _run

CONFIGS = [("Adamax", {}), ("Adamax", dict(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
           ("NAdam", {}), ("NAdam", dict(weight_decay=0.1, momentum_decay=0.01)),
           ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True, betas=(0.8, 0.95))),
           ("RAdam", {}), ("RAdam", dict(betas=(0.9, 0.99), weight_decay=0.1)),
           ("RAdam", dict(weight_decay=0.1, decoupled_weight_decay=True)),
           ("Adadelta", {}), ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.05)),
           ("ASGD", {}), ("ASGD", dict(lambd=0.01, alpha=0.5, t0=3, weight_decay=0.1)),
           ("Rprop", {}), ("Rprop", dict(etas=(0.3, 1.5), step_sizes=(1e-3, 0.07)))]


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name,kw", CONFIGS)
def test_against_pytorch(name, kw, mode):
    ps, tps, opt, step, topt = _run(name, kw, mode, steps=8)
    for p, tp in zip(ps, tps):  # parameters of order 1; a compiled step's fused arithmetic rounds apart
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=5e-6)
        assert set(opt.state[p]) == set(topt.state[tp])
        for key, value in topt.state[tp].items():
            np.testing.assert_allclose(opt.state[p][key].numpy(), value.detach().numpy(), rtol=1e-5, atol=1e-7)
    if mode == "compiled":
        assert step.stats().traces == 1


def test_options_are_checked():
    p = nn.Parameter(flame.ones(2))
    with pytest.raises(ValueError, match="invalid betas"):
        flame.optim.Adamax([p], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="NAdam: invalid momentum_decay"):
        flame.optim.NAdam([p], momentum_decay=-1.0)
    with pytest.raises(ValueError, match="Adadelta: invalid rho"):
        flame.optim.Adadelta([p], rho=1.5)


def test_turning_decoupled_weight_decay_on_traces_again():
    """decoupled_weight_decay is a choice the update makes in Python: flipping it between calls of a
    compiled step re-traces (a warning says why) and follows torch's rule from then on."""
    p, tp = nn.Parameter(flame.ones(3)), torch.nn.Parameter(torch.ones(3))
    opt = flame.optim.RAdam([p], lr=0.1, weight_decay=0.1)
    topt = torch.optim.RAdam([tp], lr=0.1, weight_decay=0.1)
    step = flame.compile(opt.step)
    for k in range(3):
        if k == 2:
            opt.param_groups[0]["decoupled_weight_decay"] = topt.param_groups[0]["decoupled_weight_decay"] = True
        p.grad, tp.grad = flame.full((3,), 0.5), torch.full((3,), 0.5)
        if k == 2:
            with pytest.warns(flame.RecompileWarning, match="decoupled_weight_decay"):
                step()
        else:
            step()
        topt.step()
    np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"])
def test_bf16_parameters_update_in_f32(name):
    p = nn.Parameter(flame.ones(8, dtype=flame.bfloat16))
    opt = getattr(flame.optim, name)([p], lr=0.01)
    ref = torch.nn.Parameter(torch.ones(8))
    topt = getattr(torch.optim, name)([ref], lr=0.01)
    for _ in range(2):  # every step rounds the parameter to bf16 (2^-8 apart near 1): a few steps only
        p.grad = flame.full((8,), 0.5, dtype=flame.bfloat16)
        ref.grad = torch.full((8,), 0.5)
        opt.step()
        topt.step()
    assert p.dtype == flame.bfloat16 and opt.state[p]["step"].dtype == flame.f32
    np.testing.assert_allclose(p.numpy().astype(np.float32), ref.detach().numpy(), rtol=1e-2)


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"])
def test_multi_parameter_update_compiles_for_the_gpu(cuda_target, name):
    from flame.codegen.nvrtc import compile_cubin

    ps = [nn.Parameter(flame.ones(*s)) for s in ((64, 32), (32,), (7, 5))]
    opt = getattr(flame.optim, name)(ps, lr=0.01, **({} if name == "Rprop" else {"weight_decay": 0.01}))
    for p in ps:
        p.grad = flame.full(p.shape, 0.1)
    step = flame.compile(opt.step)
    step()
    sources = {k.source for k in step._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
