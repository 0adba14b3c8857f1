"""RMSprop and Adagrad against torch.optim's on the same parameters and gradients: five steps, eager
and compiled, every option; their state names; a bf16 parameter; and a multi-parameter update planned
for the CUDA target whose kernels compile for sm_90."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn

CONFIGS = [("RMSprop", {}), ("RMSprop", dict(alpha=0.9, eps=1e-6)), ("RMSprop", dict(momentum=0.9)),
           ("RMSprop", dict(centered=True, weight_decay=0.1)), ("RMSprop", dict(momentum=0.5, centered=True)),
           ("Adagrad", {}), ("Adagrad", dict(lr_decay=0.1, weight_decay=0.05)),
           ("Adagrad", dict(initial_accumulator_value=0.5, eps=1e-6))]


def _run(name: str, kw: dict, mode: str, steps: int = 5):
    """flame's and torch's optimizer `name` (lr 0.05 unless kw says, a second group at 0.02) over
    `steps` steps of the same gradients, eager or compiled: (flame params, torch params, flame
    optimizer, flame step, torch optimizer)."""
    rng = np.random.default_rng(len(name) + len(kw))
    shapes = [(4, 3), (5,)]
    p0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]
    ps = [nn.Parameter(flame.tensor(a.copy())) for a in p0]
    tps = [torch.nn.Parameter(torch.tensor(a.copy())) for a in p0]
    groups = [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.02}]
    tgroups = [{"params": [tps[0]]}, {"params": [tps[1]], "lr": 0.02}]
    kw = {"lr": 0.05, **kw}
    opt, topt = getattr(flame.optim, name)(groups, **kw), getattr(torch.optim, name)(tgroups, **kw)
    step = flame.compile(opt.step) if mode == "compiled" else opt.step
    for gs in grads:
        for p, tp, g in zip(ps, tps, gs):
            p.grad, tp.grad = flame.tensor(g), torch.tensor(g)
        step()
        topt.step()
    return ps, tps, opt, step, topt


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name,kw", CONFIGS)
def test_against_pytorch(name, kw, mode):
    ps, tps, opt, step, topt = _run(name, kw, mode)
    for p, tp in zip(ps, tps):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
        assert set(opt.state[p]) == set(topt.state[tp])  # the same state, so state_dicts load either way
        for key, value in topt.state[tp].items():
            np.testing.assert_allclose(opt.state[p][key].numpy(), value.detach().numpy(), rtol=1e-5, atol=1e-6)
    if mode == "compiled":
        assert step.stats().traces == 1


def test_an_option_set_after_the_first_step_says_what_to_do():
    """torch.optim.RMSprop makes its state at a parameter's first step (an option set before it is
    honoured, tests/optim/test_lazy_state_parity.py); set after it, torch has no buffer either."""
    p = nn.Parameter(flame.ones(2))
    opt = flame.optim.RMSprop([p])
    p.grad = flame.ones(2)
    opt.step()
    opt.param_groups[0]["momentum"] = 0.9
    with pytest.raises(flame.FlameError, match="momentum was set after the optimizer was made"):
        opt.step()


def test_a_pytorch_state_dict_loads():
    """torch.optim.RMSprop's state_dict (its state made at the first step) loads into flame's, and the
    next steps agree."""
    for kw in ({}, dict(momentum=0.9, centered=True)):
        rng = np.random.default_rng(7)
        a = rng.standard_normal(6).astype(np.float32)
        tp = torch.nn.Parameter(torch.tensor(a))
        topt = torch.optim.RMSprop([tp], lr=0.01, **kw)
        tp.grad = torch.tensor(rng.standard_normal(6).astype(np.float32))
        topt.step()
        p = nn.Parameter(flame.tensor(tp.detach().numpy().copy()))
        opt = flame.optim.RMSprop([p], lr=0.01, **kw)
        opt.load_state_dict({"state": {0: {k: v.numpy() for k, v in topt.state_dict()["state"][0].items()}},
                             "param_groups": topt.state_dict()["param_groups"]})
        g = rng.standard_normal(6).astype(np.float32)
        p.grad, tp.grad = flame.tensor(g), torch.tensor(g)
        opt.step()
        topt.step()
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_state_names_follow_pytorch():
    p = nn.Parameter(flame.ones(2))
    assert set(flame.optim.RMSprop([p]).state[p]) == {"step", "square_avg"}
    assert set(flame.optim.RMSprop([p], momentum=0.9, centered=True).state[p]) == {
        "step", "square_avg", "momentum_buffer", "grad_avg"}
    assert set(flame.optim.Adagrad([p]).state[p]) == {"step", "sum"}
    with pytest.raises(ValueError, match="RMSprop: invalid alpha"):
        flame.optim.RMSprop([p], alpha=-1.0)
    with pytest.raises(ValueError, match="Adagrad: invalid lr_decay"):
        flame.optim.Adagrad([p], lr_decay=-0.1)


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad"])
def test_bf16_parameters_update_in_f32(name):
    p = nn.Parameter(flame.ones(8, dtype=flame.bfloat16))
    opt = getattr(flame.optim, name)([p], lr=0.01)
    p.grad = flame.full((8,), 0.5, dtype=flame.bfloat16)
    opt.step()
    ref = torch.nn.Parameter(torch.ones(8))
    ref.grad = torch.full((8,), 0.5)
    getattr(torch.optim, name)([ref], lr=0.01).step()
    assert p.dtype == flame.bfloat16
    np.testing.assert_allclose(p.numpy().astype(np.float32), ref.detach().numpy(), rtol=1e-2)


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad"])
def test_multi_parameter_update_compiles_for_the_gpu(cuda_target, name):
    from flame.codegen.nvrtc import compile_cubin

    ps = [nn.Parameter(flame.ones(*s)) for s in ((64, 32), (32,), (7, 5))]
    opt = getattr(flame.optim, name)(ps, lr=0.01, weight_decay=0.01)
    for p in ps:
        p.grad = flame.full(p.shape, 0.1)
    step = flame.compile(opt.step)
    step()
    for source in {k.source for k in step._last.plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
