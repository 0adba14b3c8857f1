"""flame's optimizers make their state at construction; torch.optim's (all but Adagrad's) make it at a
parameter's first step. What a user sees must not tell the two apart: state_dict() leaves out a
parameter that has not stepped yet (as torch's), a state_dict without a parameter's state (torch's
before its first step) starts that parameter afresh, an option set before the first step (OneCycleLR's
momentum on an SGD or RMSprop made without one) is honoured, and Adagrad starts every sum at the
constructor's initial_accumulator_value, as torch's. Each is compared against torch in f64, eagerly and
with the step inside @flame.compile."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn

CASES = [
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.2)),
    ("Adadelta", dict()),
    ("Adamax", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01)),
    ("RAdam", dict(lr=0.01)),
    ("ASGD", dict(lr=0.01, t0=2)),
    ("Rprop", dict(lr=0.01)),
    ("Adafactor", dict(lr=0.01)),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'defaults'}" for n, kw in CASES]
STARTS = [np.linspace(-1.0, 1.0, 6).reshape(2, 3), np.array([0.5, -0.25, 2.0])]


def _grads(k: int) -> list[np.ndarray]:
    return [np.cos(1.7 * k + np.arange(6.0)).reshape(2, 3), np.sin(0.9 * k + np.arange(3.0)) - 0.2]


def _params():
    return [nn.Parameter(flame.tensor(a.copy())) for a in STARTS], [
        torch.nn.Parameter(torch.tensor(a.copy())) for a in STARTS
    ]


def _step(k, ps, opt, tps, topt, which=(0, 1), step=None):
    """One step of both, with gradients for the parameters in `which` (the others have none)."""
    for i, (g, p, tp) in enumerate(zip(_grads(k), ps, tps)):
        p.grad, tp.grad = (flame.tensor(g.copy()), torch.tensor(g.copy())) if i in which else (None, None)
    (step or opt.step)()
    topt.step()


def _assert_close(ps, tps, what):
    for i, (p, tp) in enumerate(zip(ps, tps)):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-12, atol=1e-14, err_msg=f"{what}, {i}")


def _copy(ps, tps):
    with flame.no_grad():
        for p, tp in zip(ps, tps):
            p.copy_(flame.tensor(tp.detach().numpy().copy()))


def _compiled(opt):
    step = flame.compile(opt.step)

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flame.RecompileWarning)
            step()

    return run


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_state_dict_leaves_out_parameters_that_have_not_stepped(name, kw):
    ps, tps = _params()
    opt, topt = getattr(flame.optim, name)(ps, **kw), getattr(torch.optim, name)(tps, **kw)
    assert sorted(opt.state_dict()["state"]) == sorted(topt.state_dict()["state"])
    _step(0, ps, opt, tps, topt, which=(1,))
    assert sorted(opt.state_dict()["state"]) == sorted(topt.state_dict()["state"])


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_a_state_dict_without_a_parameters_state_starts_it_afresh(name, kw, mode):
    """torch's state_dict after steps in which parameter 0 had no gradient (so no state, but Adagrad's)
    loads into a flame optimizer that has stepped both; both then continue as torch's loaded from it."""
    ps, tps = _params()
    topt = getattr(torch.optim, name)(tps, **kw)
    for k in range(3):
        for i, (g, tp) in enumerate(zip(_grads(k), tps)):
            tp.grad = torch.tensor(g.copy()) if i == 1 else None
        topt.step()
    saved = copy.deepcopy(topt.state_dict())
    _copy(ps, tps)
    opt = getattr(flame.optim, name)(ps, **kw)
    for k in range(2):  # flame's state of parameter 0 is not fresh before the load
        for p, g in zip(ps, _grads(10 + k)):
            p.grad = flame.tensor(g.copy())
        opt.step()
    _copy(ps, tps)
    opt.load_state_dict(saved)
    topt2 = getattr(torch.optim, name)(tps, **kw)
    topt2.load_state_dict(saved)
    step = opt.step if mode == "eager" else _compiled(opt)
    for k in range(3, 8):
        _step(k, ps, opt, tps, topt2, step=step)
        _assert_close(ps, tps, f"{name} {kw} {mode}: after step {k}")


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_a_state_dict_saved_before_any_step_loads_and_continues(name, kw):
    ps, tps = _params()
    opt, topt = getattr(flame.optim, name)(ps, **kw), getattr(torch.optim, name)(tps, **kw)
    opt.load_state_dict(copy.deepcopy(topt.state_dict()))
    for k in range(4):
        _step(k, ps, opt, tps, topt)
        _assert_close(ps, tps, f"{name} {kw}: after step {k}")


def _model_step(lib, ps, opt):
    if lib is torch:
        x = torch.tensor(np.arange(3.0))
        loss = ((ps[0] @ x - ps[1][:2]) ** 2).sum()
    else:
        x = flame.tensor(np.arange(3.0))
        loss = ((ps[0] @ x - ps[1][:2]) ** 2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", ["SGD", "RMSprop"])
def test_one_cycle_momentum_on_an_optimizer_made_without_momentum(name, mode):
    """OneCycleLR (cycle_momentum=True, its default) gives an SGD or RMSprop made with momentum 0 a
    momentum before the first step; torch's then keeps a momentum buffer and uses it."""
    ps, tps = _params()
    opt, topt = getattr(flame.optim, name)(ps, lr=0.01), getattr(torch.optim, name)(tps, lr=0.01)
    sched = flame.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=10)
    tsched = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.05, total_steps=10)
    def body():
        return _model_step(flame, ps, opt)

    step = body if mode == "eager" else flame.compile(body)
    for k in range(10):
        loss, tloss = step(), _model_step(torch, tps, topt)
        np.testing.assert_allclose(float(loss.item()), tloss.item(), rtol=1e-12)
        _assert_close(ps, tps, f"{name} {mode}: after step {k}")
        sched.step()
        tsched.step()
    assert set(opt.state[ps[0]]) >= set(topt.state[tps[0]])


@pytest.mark.parametrize("option", [dict(momentum=0.9), dict(centered=True), dict(amsgrad=True)])
def test_an_option_set_before_the_first_step_is_honoured(option):
    name = "Adam" if "amsgrad" in option else "RMSprop"
    ps, tps = _params()
    opt, topt = getattr(flame.optim, name)(ps, lr=0.01), getattr(torch.optim, name)(tps, lr=0.01)
    for g in opt.param_groups + topt.param_groups:
        g.update(option)
    for k in range(4):
        _step(k, ps, opt, tps, topt)
        _assert_close(ps, tps, f"{name} {option}: after step {k}")


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_adagrad_starts_every_sum_at_the_constructors_initial_accumulator_value(mode):
    """torch.optim.Adagrad starts each sum at the constructor's initial_accumulator_value, also for a
    group that gives its own (kept in the group, unused) and a group added later."""
    ps, tps = _params()
    def make(lib, params):
        return lib.optim.Adagrad([{"params": [params[0]], "initial_accumulator_value": 0.7}], lr=0.1,
                                 initial_accumulator_value=0.1)

    opt, topt = make(flame, ps), make(torch, tps)
    np.testing.assert_allclose(opt.state[ps[0]]["sum"].numpy(), topt.state[tps[0]]["sum"].numpy())
    step = opt.step if mode == "eager" else _compiled(opt)
    for k in range(3):
        _step(k, ps, opt, tps, topt, step=step)
    opt.add_param_group({"params": [ps[1]], "initial_accumulator_value": 0.4})
    topt.add_param_group({"params": [tps[1]], "initial_accumulator_value": 0.4})
    for k in range(3, 6):
        _step(k, ps, opt, tps, topt, step=step)
        _assert_close(ps, tps, f"Adagrad {mode}: after step {k}")
    assert opt.param_groups[1]["initial_accumulator_value"] == topt.param_groups[1]["initial_accumulator_value"]


@pytest.mark.parametrize("name,made,saved", [
    ("SGD", dict(lr=0.01), dict(lr=0.03, momentum=0.9)),
    ("SGD", dict(lr=0.01), dict(lr=0.03, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("Adam", dict(lr=0.01), dict(lr=0.02, amsgrad=True)),
    ("RMSprop", dict(lr=0.01), dict(lr=0.02, momentum=0.5, centered=True)),
], ids=["sgd-momentum", "sgd-nesterov", "adam-amsgrad", "rmsprop-momentum-centered"])
def test_a_state_dict_whose_options_keep_more_state_loads_and_continues(name, made, saved):
    """torch's state_dict made with options that keep more state (a momentum buffer) loads into an
    optimizer made without them, whose compiled step was traced already: the options and their state
    come from the state_dict, and it continues as torch's."""
    ps, tps = _params()
    src = getattr(torch.optim, name)(tps, **saved)
    for k in range(3):
        for tp, g in zip(tps, _grads(k)):
            tp.grad = torch.tensor(g.copy())
        src.step()
    _copy(ps, tps)
    opt, topt = getattr(flame.optim, name)(ps, **made), getattr(torch.optim, name)(tps, **made)
    step = _compiled(opt)
    for p, g in zip(ps, _grads(9)):
        p.grad = flame.tensor(g.copy())
    step()
    _copy(ps, tps)
    opt.load_state_dict(copy.deepcopy(src.state_dict()))
    topt.load_state_dict(copy.deepcopy(src.state_dict()))
    for k in range(3, 7):
        _step(k, ps, opt, tps, topt, step=step)
        _assert_close(ps, tps, f"{name} {made} loaded {saved}: after step {k}")


def _linear(lib):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    if lib is torch:
        return model
    mine = nn.Linear(3, 2)
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in model.state_dict().items()})
    return mine


def _linear_step(lib, model, opt):
    x = lib.tensor(np.linspace(-1.0, 2.0, 12).reshape(4, 3))
    loss = (model(x).tanh() ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


_LAZY = [c for c in CASES if c[0] != "Adagrad"]  # torch's Adagrad makes its state at construction
_LAZY_IDS = [i for i in IDS if not i.startswith("Adagrad")]


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name,kw", _LAZY, ids=_LAZY_IDS)
def test_a_model_converted_after_its_optimizer_was_made_gets_state_of_its_new_dtype(name, kw, mode):
    """model.double() between making the optimizer and its first step: torch.optim makes the state at
    the first step, in f64, and the f64 run goes on as torch's."""
    model, tmodel = _linear(flame), _linear(torch)
    opt = getattr(flame.optim, name)(model.parameters(), **kw)
    topt = getattr(torch.optim, name)(tmodel.parameters(), **kw)
    model.double()
    tmodel.double()

    def body():
        return _linear_step(flame, model, opt)

    step = body if mode == "eager" else flame.compile(body)
    for k in range(4):
        loss, tloss = step(), _linear_step(torch, tmodel, topt)
        np.testing.assert_allclose(float(loss.item()), tloss.item(), rtol=1e-12)
        _assert_close(list(model.parameters()), list(tmodel.parameters()), f"{name} {kw} {mode}: after step {k}")
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        saved = {k: str(v.dtype).removeprefix("torch.") for k, v in topt.state[tp].items() if k != "step"}
        assert {k: str(opt.state[p][k].dtype.name) for k in saved} == {
            k: {"float64": "f64", "float32": "f32"}[v] for k, v in saved.items()
        }


@pytest.mark.parametrize("name,kw", _LAZY, ids=_LAZY_IDS)
def test_a_parameter_given_another_shape_before_its_first_step_gets_state_of_that_shape(name, kw):
    """An embedding grown through `.data` after the optimizer was made (new tokens added) steps as
    torch's, whose state is made at the first step."""
    p, tp = nn.Parameter(flame.tensor(STARTS[0].copy())), torch.nn.Parameter(torch.tensor(STARTS[0].copy()))
    opt, topt = getattr(flame.optim, name)([p], **kw), getattr(torch.optim, name)([tp], **kw)
    grown = np.concatenate([STARTS[0], STARTS[0][:1] * 0.5])
    p.data, tp.data = flame.tensor(grown.copy()), torch.tensor(grown.copy())
    for k in range(3):
        g = np.cos(1.3 * k + np.arange(9.0)).reshape(3, 3)
        p.grad, tp.grad = flame.tensor(g.copy()), torch.tensor(g.copy())
        opt.step()
        topt.step()
        _assert_close([p], [tp], f"{name} {kw}: after step {k}")
