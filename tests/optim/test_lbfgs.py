"""LBFGS against torch.optim.LBFGS in f64: the parameter trajectory over several steps on the Rosenbrock
function and on a small MLP least-squares problem, with a fixed step and with the strong-Wolfe line
search; the state's names and values; state_dict round trips; the error inside @flame.compile."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn


def _rosenbrock(xy):
    x, y = xy[0], xy[1]
    return (1 - x) ** 2 + 100 * (y - x * x) ** 2


def _pair(kw):
    p = nn.Parameter(flame.tensor([-1.5, 2.0], dtype=flame.f64))
    tp = torch.nn.Parameter(torch.tensor([-1.5, 2.0], dtype=torch.float64))
    return [p], [tp], flame.optim.LBFGS([p], **kw), torch.optim.LBFGS([tp], **kw)


def _closure(opt, params, loss_fn):
    def closure():
        opt.zero_grad()
        loss = loss_fn(*params)
        loss.backward()
        return loss

    return closure


KWS = [dict(), dict(line_search_fn="strong_wolfe"), dict(lr=0.5, history_size=3, max_iter=7),
       dict(line_search_fn="strong_wolfe", history_size=2, max_iter=10, max_eval=12)]


@pytest.mark.parametrize("kw", KWS)
def test_rosenbrock_trajectory_matches_torch(kw):
    # the trajectory is chaotic: moving torch's own start by 1e-15 moves its third step's point by 5e-8
    # (and its fourth by 1e-5), so three steps, compared within what f64 rounding accounts for
    ps, tps, opt, topt = _pair(kw)
    for _ in range(3):
        loss = opt.step(_closure(opt, ps, _rosenbrock))
        tloss = topt.step(_closure(topt, tps, _rosenbrock))
        np.testing.assert_allclose(float(loss), float(tloss.detach()), rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(ps[0].numpy(), tps[0].detach().numpy(), rtol=1e-6, atol=1e-9)
    st, tst = opt.state[ps[0]], topt.state[tps[0]]
    assert set(st) == set(tst)
    assert (st["func_evals"], st["n_iter"]) == (tst["func_evals"], tst["n_iter"])
    assert len(st["old_dirs"]) == len(tst["old_dirs"])
    np.testing.assert_allclose(st["d"].numpy(), tst["d"].numpy(), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(float(st["t"]), float(tst["t"]), rtol=1e-6)


def _mlp(lib, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) * 0.5 for s in [(6, 4), (6,), (2, 6), (2,), (16, 4), (16, 2)]]
    if lib is torch:
        return [torch.nn.Parameter(torch.tensor(a)) for a in arrays[:4]], [torch.tensor(a) for a in arrays[4:]]
    return [nn.Parameter(flame.tensor(a)) for a in arrays[:4]], [flame.tensor(a) for a in arrays[4:]]


def _mlp_loss(lib, data):
    x, y = data

    def loss(w1, b1, w2, b2):
        h = lib.tanh(x @ w1.T + b1)
        return ((h @ w2.T + b2 - y) ** 2).mean()

    return loss


@pytest.mark.parametrize("kw", [dict(), dict(line_search_fn="strong_wolfe"), dict(lr=0.3, history_size=4)])
def test_mlp_least_squares_trajectory_matches_torch(kw):
    ps, data = _mlp(flame)
    tps, tdata = _mlp(torch)
    opt, topt = flame.optim.LBFGS(ps, **kw), torch.optim.LBFGS(tps, **kw)
    for _ in range(3):
        loss = opt.step(_closure(opt, ps, _mlp_loss(flame, data)))
        tloss = topt.step(_closure(topt, tps, _mlp_loss(torch, tdata)))
        np.testing.assert_allclose(float(loss), float(tloss.detach()), rtol=1e-9)
        for p, tp in zip(ps, tps):
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-7, atol=1e-10)
    assert opt.state[ps[0]]["func_evals"] == topt.state[tps[0]]["func_evals"]


def test_state_dict_round_trip_continues_the_same_trajectory():
    ps, tps, opt, topt = _pair(dict(line_search_fn="strong_wolfe", history_size=3))
    for _ in range(2):
        opt.step(_closure(opt, ps, _rosenbrock))
        topt.step(_closure(topt, tps, _rosenbrock))
    sd, tsd = opt.state_dict(), copy.deepcopy(topt.state_dict())
    assert set(sd["state"]) == {0} and sd["param_groups"][0]["params"] == [0]
    assert set(sd["param_groups"][0]) == set(tsd["param_groups"][0])
    assert set(sd["state"][0]) == set(tsd["state"][0])
    topt.step(_closure(topt, tps, _rosenbrock))
    # a fresh optimizer on a copy of the parameter, loaded from flame's state_dict and from torch's
    for source in (sd, tsd):
        q = nn.Parameter(ps[0].detach().clone())
        fresh = flame.optim.LBFGS([q])
        fresh.load_state_dict(source)
        assert fresh.param_groups[0]["history_size"] == 3
        fresh.step(_closure(fresh, [q], _rosenbrock))
        np.testing.assert_allclose(q.numpy(), tps[0].detach().numpy(), rtol=1e-9)
        assert fresh.state[q]["n_iter"] > sd["state"][0]["n_iter"]  # loading copied the saved state
    assert sd["state"][0]["n_iter"] == opt.state[ps[0]]["n_iter"]


def test_load_state_dict_refuses_a_mismatched_layout():
    p = nn.Parameter(flame.ones(2, dtype=flame.f64))
    opt = flame.optim.LBFGS([p])
    with pytest.raises(flame.CheckpointError, match="parameters"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0, 1]}]})
    with pytest.raises(flame.CheckpointError, match="one parameter group"):
        opt.load_state_dict({"state": {}})


def test_options_and_groups_are_checked_as_torch():
    p = nn.Parameter(flame.ones(2))
    with pytest.raises(ValueError, match="Invalid learning rate"):
        flame.optim.LBFGS([p], lr=-1)
    with pytest.raises(ValueError, match="parameter groups"):
        flame.optim.LBFGS([{"params": [p]}, {"params": [nn.Parameter(flame.ones(1))]}])
    opt = flame.optim.LBFGS([p], line_search_fn="wolfe")
    assert opt.param_groups[0]["max_eval"] == 25
    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        opt.step(_closure(opt, [p], lambda w: (w * w).sum()))


def test_a_converged_start_evaluates_once():
    p = nn.Parameter(flame.zeros(3, dtype=flame.f64))
    opt = flame.optim.LBFGS([p])
    opt.step(_closure(opt, [p], lambda w: (w * w).sum()))
    assert opt.state[p] == {"func_evals": 1, "n_iter": 0}


def test_step_inside_compile_raises_at_the_users_line():
    p = nn.Parameter(flame.ones(2))
    opt = flame.optim.LBFGS([p])

    @flame.compile
    def train_step():
        return opt.step(_closure(opt, [p], lambda w: (w * w).sum()))  # the user's line

    with pytest.raises(flame.TraceError, match=r"call opt.step\(closure\) eagerly[\s\S]*test_lbfgs.py:\d+"):
        train_step()


def test_a_compiled_closure_drives_the_eager_step():
    """The closure may be a @flame.compile'd step (one trace, replayed at every evaluation)."""
    ps, tps, opt, topt = _pair(dict(line_search_fn="strong_wolfe"))
    closure = flame.compile(_closure(opt, ps, _rosenbrock))
    for _ in range(2):
        opt.step(closure)
        topt.step(_closure(topt, tps, _rosenbrock))
    np.testing.assert_allclose(ps[0].numpy(), tps[0].detach().numpy(), rtol=1e-7, atol=1e-10)
    assert closure.stats().traces == 1
