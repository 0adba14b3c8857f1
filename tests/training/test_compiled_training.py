"""A whole training step under @flame.compile: forward + loss.backward() + optimizer.step() +
zero_grad() traced once, replayed, and equal to the same step run eagerly."""

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.nn.functional as F
import flame.optim as optim
from flame.nn.utils import clip_grad_norm_
from flame.optim.lr_scheduler import LambdaLR


def _setup(dtype, opt_name="AdamW", **opt_kw):
    g = flame.Generator(5)
    model = nn.Sequential(nn.Linear(6, 16, dtype=dtype, generator=g), nn.Tanh(), nn.LayerNorm(16, dtype=dtype),
                          nn.Linear(16, 16, dtype=dtype, generator=g), nn.SiLU(),
                          nn.Linear(16, 3, dtype=dtype, generator=g))
    opt = getattr(optim, opt_name)(model.parameters(), **({"lr": 0.01} | opt_kw))
    return model, opt


def _data(dtype):
    r = np.random.default_rng(0)
    return flame.tensor(r.standard_normal((32, 6)), dtype=dtype), flame.tensor(r.integers(0, 3, 32))


def _step_fn(model, opt, counter=None, clip=None):
    def step(x, y):
        if counter is not None:
            counter.append(1)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if clip is not None:
            clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
        return loss
    return step


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("opt_name,kw,clip", [("AdamW", {}, None), ("SGD", {"lr": 0.1, "momentum": 0.9,
                                                                            "nesterov": True}, 1.0)])
def test_compiled_step_equals_eager_float64(opt_name, kw, clip):
    model_c, opt_c = _setup("f64", opt_name, **kw)
    model_e, opt_e = _setup("f64", opt_name, **kw)
    x, y = _data("f64")
    traces = []
    step_c = flame.compile(_step_fn(model_c, opt_c, traces, clip))
    step_e = _step_fn(model_e, opt_e, clip=clip)
    losses = []
    for _ in range(20):
        losses.append(step_c(x, y).item())
        step_e(x, y)
    assert len(traces) == 1
    assert losses[-1] < 0.7 * losses[0]
    for (name, pc), pe in zip(model_c.named_parameters(), model_e.parameters()):
        assert _rel(pc.numpy(), pe.numpy()) < 1e-6, name
        assert pc.grad is None and pe.grad is None
    for pc, pe in zip(model_c.parameters(), model_e.parameters()):
        for k, t in opt_c.state[pc].items():
            np.testing.assert_allclose(t.numpy(), opt_e.state[pe][k].numpy(), rtol=1e-6, atol=1e-12)


def test_compiled_float32_tracks_float64():
    model_c, opt_c = _setup("f32")
    model_e, opt_e = _setup("f64")
    model_e.load_state_dict(model_c.state_dict())
    x32, y = _data("f32")
    step_c = flame.compile(_step_fn(model_c, opt_c))
    step_e = _step_fn(model_e, opt_e)
    for _ in range(20):
        step_c(x32, y)
        step_e(x32.double(), y)
    for pc, pe in zip(model_c.parameters(), model_e.parameters()):
        assert _rel(pc.numpy().astype(np.float64), pe.numpy()) < 1e-4


def test_replay_does_not_retrace_and_lr_changes_take_effect():
    model, opt = _setup("f32")
    x, y = _data("f32")
    traces = []
    step = flame.compile(_step_fn(model, opt, traces))
    sched = LambdaLR(opt, lambda epoch: 0.0 if epoch == 1 else 1.0 / epoch if epoch else 1.0)
    step(x, y)
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.0
    frozen = [p.numpy().copy() for p in model.parameters()]
    count = opt.state[model[0].weight]["step"].item()
    step(x, y)  # lr 0: AdamW changes nothing (its decay is lr * weight_decay)
    for p, f in zip(model.parameters(), frozen):
        np.testing.assert_array_equal(p.numpy(), f)
    assert opt.state[model[0].weight]["step"].item() == count + 1  # the state still advances
    sched.step()
    step(x, y)
    moved = np.abs(model[0].weight.numpy() - frozen[0]).max()
    assert moved > 0
    sched.step()  # lr halves: the update is smaller but nonzero
    before = model[0].weight.numpy().copy()
    step(x, y)
    assert 0 < np.abs(model[0].weight.numpy() - before).max() < moved
    assert len(traces) == 1


def test_new_batch_shape_retraces_once():
    model, opt = _setup("f32")
    traces = []
    step = flame.compile(_step_fn(model, opt, traces))
    x, y = _data("f32")
    step(x, y)
    step(x[:8], y[:8])
    step(x, y)
    step(x[:8], y[:8])
    assert len(traces) == 2


def test_step_graph_has_roles_and_aliases():
    model, opt = _setup("f32")
    x, y = _data("f32")
    g = flame.compile(_step_fn(model, opt)).trace(x, y)
    roles = g.roles
    n_params = len(list(model.parameters()))
    n_state = sum(len(s) for s in opt.state.values())
    assert len(g.aliases) == n_params + n_state
    assert roles.count("param") == n_params and roles.count("state") == n_state
    # AdamW's hyperparameters, one input per value and dtype: weight_decay, lr (f32, and f64 beside the bias
    # correction), 1 - beta1, beta2 and 1 - beta2 (f32, the differences taken in f64 as torch's), beta1 and
    # beta2 in f64 (the bias corrections) and eps
    assert roles.count("data") == 2 and roles.count("scalar") == 9


def test_checkpoint_resume_reproduces_training(tmp_path):
    from flame.checkpoint import load_checkpoint, save_checkpoint

    model, opt = _setup("f64")
    x, y = _data("f64")
    traces = []
    step = flame.compile(_step_fn(model, opt, traces))
    for _ in range(3):
        step(x, y)
    save_checkpoint(tmp_path / "ck.safetensors", model, opt)
    for _ in range(4):
        step(x, y)
    after = [p.numpy().copy() for p in model.parameters()]
    load_checkpoint(tmp_path / "ck.safetensors", model, opt)  # in place: the compiled step stays valid
    for _ in range(4):
        step(x, y)
    for p, a in zip(model.parameters(), after):
        np.testing.assert_array_equal(p.numpy(), a)
    assert len(traces) == 1
