"""Every flame optimizer against its torch.optim namesake, option by option: the same f64 parameters
(a matrix, a 0-d scalar, a vector whose gradient is sometimes exactly zero, and one that has no
gradient in some steps, which both libraries then skip) stepped with the same gradients of a fixed
quadratic loss, compared after every step eagerly and with the step inside @flame.compile; the
state_dict after some steps (keys, shapes, dtypes, values) against torch's; and torch's state_dict
loaded into a flame optimizer that then continues as torch's does."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn

# parameters are of order 1; atol covers an element that an update cancels to near zero, where a one-ulp
# difference in a step-dependent factor (NumPy's pow, which the reference executor uses, is not always
# correctly rounded, as C's pow is) shows as a relative error above rtol
RTOL, ATOL = 1e-12, 1e-14
STEPS = 12
SHAPES = [(3, 4), (), (5,), (2, 3)]
ZERO_GRAD = 2  # the parameter whose gradient is exactly zero in some steps
NO_GRAD = 3  # the parameter that has no gradient (None) in some steps
PERF_FLAGS = ("foreach", "capturable", "fused")  # accepted where torch's namesake takes them, changing nothing

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.05, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=0.02, amsgrad=True, maximize=True)),
    ("Adam", dict(lr=0.02, weight_decay=0.1, decoupled_weight_decay=True, amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, betas=(0.7, 0.9), eps=1e-5, weight_decay=0.3, amsgrad=True)),
    ("AdamW", dict(lr=0.02, weight_decay=0.0, maximize=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.7, centered=True)),
    ("RMSprop", dict(lr=0.005, momentum=0.5, centered=True, weight_decay=0.05, maximize=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.3, eps=1e-6)),
    ("Adagrad", dict(lr=0.05, maximize=True)),
    ("Adamax", dict(lr=0.02)),
    ("Adamax", dict(lr=0.02, betas=(0.8, 0.9), eps=1e-4, weight_decay=0.1, maximize=True)),
    ("NAdam", dict(lr=0.02)),
    ("NAdam", dict(lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.02, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict(lr=0.02)),
    ("RAdam", dict(lr=0.02, betas=(0.7, 0.8), eps=1e-6, weight_decay=0.1)),
    ("RAdam", dict(lr=0.02, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1, maximize=True)),
    ("ASGD", dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, lambd=0.1, alpha=0.5, t0=4, weight_decay=0.1)),
    ("ASGD", dict(lr=0.05, lambd=0.01, t0=0, maximize=True)),
    ("Rprop", dict(lr=0.05)),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True)),
    ("Adafactor", dict()),
    ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, eps=(1e-20, 1e-2), d=1.5, weight_decay=0.1)),
    ("Adafactor", dict(lr=0.002, weight_decay=0.2, maximize=True)),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'defaults'}" for n, kw in CASES]


def test_every_optimizer_is_covered():
    """The cases above cover every optimizer flame.optim exports that updates from gradients alone
    (LBFGS re-evaluates a closure: tests/optim/test_lbfgs.py; Muon takes 2-D parameters alone:
    tests/optim/test_muon.py)."""
    exported = {n for n in flame.optim.__all__ if isinstance(getattr(flame.optim, n), type)} - {
        "Optimizer", "LBFGS", "Muon"}
    assert exported == {n for n, _ in CASES}


@pytest.mark.parametrize("name", ["SparseAdam"])
def test_torch_optimizers_flame_lacks_are_refused_by_name(name):
    assert hasattr(torch.optim, name)
    with pytest.raises(AttributeError, match=f"flame.optim has no {name} .*not supported"):
        getattr(flame.optim, name)


def _start() -> list[np.ndarray]:
    r = np.random.default_rng(0)
    return [r.standard_normal(s) for s in SHAPES]


def _grads(k: int, values: list[np.ndarray]) -> list[np.ndarray | None]:
    """The gradients of step k at the parameters' values: those of a fixed quadratic loss
    sum_i (i + 1) / 2 |p_i - c_i|^2 plus a linear term that turns with k (so signs flip, for Rprop)."""
    out = []
    for i, v in enumerate(values):
        c = np.linspace(-1.0, 1.0, v.size).reshape(v.shape)
        g = (i + 1) * (v - c) + 0.5 * np.cos(1.3 * k + np.arange(v.size)).reshape(v.shape)
        if i == ZERO_GRAD and k % 4 == 1:
            g = np.zeros_like(v)
        if i == NO_GRAD and k % 3 == 2:
            g = None
        out.append(g)
    return out


def _pair(name: str, kw: dict, start: list[np.ndarray] | None = None):
    """(flame params, flame optimizer, torch params, torch optimizer) from the same f64 values."""
    start = _start() if start is None else start
    ps = [nn.Parameter(flame.tensor(a.copy())) for a in start]
    tps = [torch.nn.Parameter(torch.tensor(a.copy())) for a in start]
    cls = getattr(flame.optim, name)
    flags = {k: True for k in PERF_FLAGS if k in cls.torch_flags}
    if flags.get("fused"):  # torch refuses fused=True with foreach=True
        flags["foreach"] = False
    return ps, cls(ps, **kw, **flags), tps, getattr(torch.optim, name)(tps, **kw)


def _step_both(k: int, ps, step, tps, topt) -> None:
    for p, tp, g in zip(ps, tps, _grads(k, [tp.detach().numpy() for tp in tps])):
        p.grad, tp.grad = (None, None) if g is None else (flame.tensor(g.copy()), torch.tensor(g.copy()))
    step()
    topt.step()


def _assert_params(ps, tps, what: str) -> None:
    for i, (p, tp) in enumerate(zip(ps, tps)):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=RTOL, atol=ATOL, err_msg=f"{what}, param {i}")


def _stepper(opt, mode: str):
    if mode == "eager":
        return opt.step
    compiled = flame.compile(opt.step)

    def step():
        with warnings.catch_warnings():  # the no-gradient steps trace a second variant of the step
            warnings.simplefilter("ignore", flame.RecompileWarning)
            compiled()

    return step


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_steps_match_pytorch(name, kw, mode):
    ps, opt, tps, topt = _pair(name, kw)
    step = _stepper(opt, mode)
    for k in range(STEPS):
        _step_both(k, ps, step, tps, topt)
        _assert_params(ps, tps, f"{name} {kw} {mode}: after step {k}")


def _assert_state_dicts(mine: dict, theirs: dict, what: str) -> None:
    """flame's state_dict against torch's: the same groups (keys and values) and, per parameter, the same
    state names, shapes, dtypes and values."""
    assert len(mine["param_groups"]) == len(theirs["param_groups"])
    for g, tg in zip(mine["param_groups"], theirs["param_groups"]):
        assert set(g) == set(tg), f"{what}: group keys {sorted(set(g) ^ set(tg))} differ"
        for k, v in tg.items():
            if k not in PERF_FLAGS:
                assert (tuple(g[k]) if isinstance(v, tuple) else g[k]) == v, f"{what}: group {k}: {g[k]} vs {v}"
    assert sorted(mine["state"]) == sorted(theirs["state"]), what
    for i, ts in theirs["state"].items():
        ms = mine["state"][i]
        assert set(ms) == set(ts), f"{what}: state {i} keys {sorted(ms)} vs {sorted(ts)}"
        for k, t in ts.items():
            m, t = ms[k].numpy(), t.detach().numpy()
            assert (m.shape, str(m.dtype)) == (t.shape, str(t.dtype)), f"{what}: state {i}.{k}"
            np.testing.assert_allclose(m, t, rtol=RTOL, atol=ATOL, err_msg=f"{what}: state {i}.{k}")


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_state_dict_matches_and_loads_from_pytorch(name, kw):
    ps, opt, tps, topt = _pair(name, kw)
    for k in range(7):
        _step_both(k, ps, opt.step, tps, topt)
    _assert_state_dicts(opt.state_dict(), topt.state_dict(), f"{name} {kw}")
    # a fresh flame optimizer on torch's parameters, loaded from torch's state_dict, continues as a torch
    # optimizer loaded from it (whose load casts the scalar state but `step` to the parameters' dtype)
    ps2, opt2, _, _ = _pair(name, kw, [tp.detach().numpy() for tp in tps])
    opt2.load_state_dict(topt.state_dict())
    topt2 = getattr(torch.optim, name)(tps, **kw)
    topt2.load_state_dict(topt.state_dict())
    step = _stepper(opt2, "compiled")
    for k in range(7, 7 + 6):
        _step_both(k, ps2, step, tps, topt2)
        _assert_params(ps2, tps, f"{name} {kw}: loaded, after step {k}")
    _assert_state_dicts(opt2.state_dict(), topt2.state_dict(), f"{name} {kw}: loaded")


@pytest.mark.parametrize("name", sorted({n for n, _ in CASES}))
def test_flags_as_documented(name):
    """The flags torch's namesake takes are accepted (foreach, fused and capturable change nothing, see
    the step tests); differentiable=True is refused naming it; a flag or option torch's namesake does not
    take is refused as torch refuses it, naming it."""
    p, tp = nn.Parameter(flame.ones(2, dtype=flame.float64)), torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    cls, tcls = getattr(flame.optim, name), getattr(torch.optim, name)
    for flag in PERF_FLAGS + ("no_such_option",):
        try:
            tcls([tp], **{flag: False})
        except TypeError:
            with pytest.raises(TypeError, match=f"{name}\\(\\) got an unexpected keyword argument '{flag}'"):
                cls([p], **{flag: False})
        else:
            assert cls([p], **{flag: False}).param_groups[0][flag] is False
    if "differentiable" in cls.torch_flags:
        with pytest.raises(NotImplementedError, match=f"{name}: differentiable=True"):
            cls([p], differentiable=True)


@pytest.mark.parametrize("name,kw", [c for c in CASES if c[0] != "Adafactor"][::3] + [("Adafactor", {})], ids=str)
def test_closure_runs_with_gradients_enabled_under_no_grad(name, kw):
    """step(closure) calls the closure with gradients enabled, as torch.optim's, also when the step itself
    is called under no_grad(): the closure's backward() works and the update follows torch's."""
    ps, opt, tps, topt = _pair(name, kw)

    def closure(params, optimizer):
        optimizer.zero_grad()
        loss = sum(((i + 1) * (p - 0.25) ** 2).sum() for i, p in enumerate(params))
        loss.backward()
        return loss

    for _ in range(3):
        with flame.no_grad():
            loss = opt.step(lambda: closure(ps, opt))
        with torch.no_grad():
            tloss = topt.step(lambda: closure(tps, topt))
        assert loss.requires_grad == tloss.requires_grad
        np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), rtol=RTOL)
        _assert_params(ps, tps, f"{name} {kw}: step(closure) under no_grad")


@pytest.mark.parametrize("name,kw", list({n: (n, kw) for n, kw in reversed(CASES)}.values()), ids=lambda c: str(c))
def test_two_updates_in_one_compiled_step_match_pytorch(name, kw):
    """A compiled step that runs forward, backward() and step() twice (two updates per call): the second
    backward() goes through the parameters as the first update left them, not back into the first
    backward's freed graph (the update, made under no_grad from the first gradient, carries no gradient)."""
    ps, opt, tps, topt = _pair(name, kw)
    d = [np.cos(np.arange(p.numpy().size)).reshape(p.numpy().shape) for p in ps]

    def body(params, optimizer, data):
        for _ in range(2):
            optimizer.zero_grad()
            loss = sum(((p * x).sin() ** 2).sum() + (i + 1) * (p**2).sum()
                       for i, (p, x) in enumerate(zip(params, data)))
            loss.backward()
            optimizer.step()
        return loss

    step = flame.compile(lambda: body(ps, opt, [flame.tensor(x) for x in d]))
    for k in range(3):
        step()
        body(tps, topt, [torch.tensor(x) for x in d])
        _assert_params(ps, tps, f"{name} {kw}: two updates per compiled call, call {k}")
