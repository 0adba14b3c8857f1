"""SGD / Adam / AdamW against torch.optim over several steps; param_groups, zero_grad, state_dict."""

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
import flame.optim as optim
from flame.errors import CheckpointError

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, weight_decay=0.1, eps=1e-6, amsgrad=True)),
]


def _problem(dtype):
    r = np.random.default_rng(0)
    w0 = r.standard_normal((5, 3)).astype(dtype)
    b0 = r.standard_normal(5).astype(dtype)
    x = r.standard_normal((7, 3)).astype(dtype)
    return w0, b0, x


def _run_both(name, kw, dtype, steps=6):
    w0, b0, x = _problem(dtype)
    fw, fb = nn.Parameter(flame.tensor(w0)), nn.Parameter(flame.tensor(b0))
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    fo, to = getattr(optim, name)([fw, fb], **kw), getattr(torch.optim, name)([tw, tb], **kw)
    fx, tx = flame.tensor(x), torch.tensor(x)
    for _ in range(steps):
        (fx @ fw.T + fb).tanh().square().sum().backward()
        fo.step()
        fo.zero_grad()
        (tx @ tw.T + tb).tanh().square().sum().backward()
        to.step()
        to.zero_grad()
    return (fw, fb), (tw, tb), fo, to


@pytest.mark.parametrize("name,kw", CASES)
def test_matches_torch_float32(name, kw):
    ours, theirs, _, _ = _run_both(name, kw, np.float32)
    for f, t in zip(ours, theirs):
        np.testing.assert_allclose(f.numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,kw", CASES)
def test_matches_torch_float64(name, kw):
    ours, theirs, fo, to = _run_both(name, kw, np.float64)
    for f, t in zip(ours, theirs):
        np.testing.assert_allclose(f.numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-13)
    for i, key in ((0, "exp_avg"), (1, "exp_avg_sq"), (0, "momentum_buffer")):
        ours_st, theirs_st = fo.state_dict()["state"].get(i, {}), to.state_dict()["state"].get(i, {})
        if key in theirs_st:
            np.testing.assert_allclose(ours_st[key].numpy(), theirs_st[key].numpy(), rtol=1e-12, atol=1e-13)


def test_state_is_created_eagerly_with_state_role():
    w = nn.Parameter(flame.zeros(3, 2))
    opt = optim.AdamW([w])
    st = opt.state[w]
    assert set(st) == {"step", "exp_avg", "exp_avg_sq"}
    assert all(t._role == "state" for t in st.values())
    assert st["step"].shape == () and st["exp_avg"].shape == (3, 2)


class _OwnAdamW(optim.AdamW):
    def _update(self, p, group, state):
        p.copy_(p - p.grad * 0.5)  # an update written outside flame: its ops name this line


def test_traced_updates_name_the_step_line_or_the_users_own_update():
    w = nn.Parameter(flame.ones(3))
    for opt, line in ((optim.AdamW([w], weight_decay=0.1), "opt.step()"), (_OwnAdamW([w]), "p.copy_(p - p.grad")):

        def step(x, opt=opt):
            (w * x).sum().backward()
            opt.step()
            opt.zero_grad()

        g = flame.compile(step).trace(flame.ones(3))
        updates = [op for op in g.ops if op.name in ("sqrt", "straight_through")]
        assert updates and all(op.loc.startswith("test_optimizers.py:") and line in op.loc for op in updates)


def test_param_groups_have_their_own_lr():
    a, b = nn.Parameter(flame.ones(2)), nn.Parameter(flame.ones(2))
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[0]["momentum"] == 0.0
    (a.sum() + b.sum()).backward()
    opt.step()
    np.testing.assert_allclose(a.numpy(), [0.9, 0.9])
    np.testing.assert_allclose(b.numpy(), [0.5, 0.5])
    opt.param_groups[1]["lr"] = 0.0
    (a.sum() + b.sum()).backward()  # grads accumulate: the step above did not zero them
    opt.step()
    np.testing.assert_allclose(b.numpy(), [0.5, 0.5])


def test_zero_grad_modes_and_params_without_grad():
    a, b = nn.Parameter(flame.ones(2)), nn.Parameter(flame.ones(2))
    opt = optim.Adam([a, b], lr=0.1)
    a.sum().backward()
    opt.step()  # b has no gradient: skipped, its step counter stays 0
    assert opt.state[b]["step"].item() == 0 and opt.state[a]["step"].item() == 1
    np.testing.assert_array_equal(b.numpy(), [1, 1])
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a.grad.numpy(), [0, 0])
    assert b.grad is None
    opt.zero_grad()
    assert a.grad is None


def test_invalid_arguments():
    w = nn.Parameter(flame.zeros(1))
    with pytest.raises(ValueError):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError):
        optim.Adam([w], lr=-1)
    with pytest.raises(ValueError):
        optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        optim.AdamW([w], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="twice in one parameter group"):
        optim.SGD([w, w])
    v = nn.Parameter(flame.zeros(1))
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": [w]}, {"params": [v, w]}], lr=0.1)


def test_optimizer_state_dict_round_trip():
    ours, _, fo, _ = _run_both("AdamW", dict(lr=0.01), np.float64, steps=3)
    sd = fo.state_dict()
    assert sd["param_groups"][0]["params"] == [0, 1] and sd["param_groups"][0]["betas"] == (0.9, 0.999)
    assert sd["state"][0]["step"].item() == 3
    fresh = optim.AdamW(
        [nn.Parameter(flame.zeros(5, 3, dtype="f64")), nn.Parameter(flame.zeros(5, dtype="f64"))], lr=0.5
    )
    bound = fresh.state[fresh.param_groups[0]["params"][0]]["exp_avg"]
    group = fresh.param_groups[0]
    fresh.load_state_dict(sd)
    assert fresh.param_groups[0] is group and group["lr"] == 0.01  # updated in place
    assert fresh.state[group["params"][0]]["exp_avg"] is bound
    np.testing.assert_array_equal(bound.numpy(), sd["state"][0]["exp_avg"].numpy())
    bad = fo.state_dict()
    bad["state"][1] = {"step": bad["state"][1]["step"], "exp_avg": flame.zeros(2)}
    with pytest.raises(CheckpointError, match="exp_avg_sq") as e:
        fresh.load_state_dict(bad)
    assert "mis-shaped: state.1.exp_avg" in str(e.value)


def test_half_precision_params_update_in_f32():
    w = nn.Parameter(flame.ones(4, dtype="bf16"))
    opt = optim.AdamW([w], lr=0.1)
    assert opt.state[w]["exp_avg"].dtype == flame.bf16
    w.grad = flame.ones(4, dtype="bf16")
    opt.step()
    assert w.dtype == flame.bf16
    np.testing.assert_allclose(w.numpy().astype(np.float32), 0.9, rtol=1e-2)
