"""Tensor.register_hook, retain_grad, is_leaf and retains_grad against torch: hooks fire in torch's
order with torch's gradients, what they return flows on (for a leaf: is what .grad accumulates),
handles remove them; eagerly and inside @flame.compile, where a hook is traced into the backward and
one that needs Python at run time is an error naming it."""

import warnings

import numpy as np
import pytest
import torch

import flame
from flame.errors import AutogradError, TraceError
from tests.ops.test_everyday_ops import check_gpu_step

X = np.array([0.5, -1.25, 2.0, 0.75])
W = np.array([1.5, -0.5, 0.25, 2.0])


def _t(lib, a, requires_grad=False):
    if lib is torch:
        return torch.tensor(a, dtype=torch.float64, requires_grad=requires_grad)
    return flame.tensor(a, dtype=flame.float64, requires_grad=requires_grad)


def _a(t):
    return None if t is None else np.array(t.tolist())


def _chain(lib, log, compiled=False):
    """x -> a = x * w -> b = exp(a) -> loss = sum(a * b) + sum(b): a is used twice, b twice, both hooked,
    so every hook's gradient depends on the ones after it. Returns (x.grad, w.grad, a.grad, b.grad)."""
    x, w = _t(lib, X, True), _t(lib, W, True)

    def rec(name, scale):
        def hook(g):
            log.append((name, None if compiled else np.round(_a(g), 12).tolist()))
            return g * scale

        return hook

    x.register_hook(rec("x", 1.0))
    w.register_hook(rec("w", 0.5))

    def step(x):
        a = x * w
        a.retain_grad()
        a.register_hook(rec("a1", 2.0))
        a.register_hook(rec("a2", -1.0))  # after a1: gets a1's result
        b = a.exp()
        b.retain_grad()
        b.register_hook(rec("b", 3.0))
        loss = (a * b).sum() + b.sum()
        loss.register_hook(rec("loss", 1.0))
        loss.backward()
        return a.grad, b.grad

    ag, bg = (flame.compile(step) if compiled else step)(x)
    return _a(x.grad), _a(w.grad), _a(ag), _a(bg)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_hooks_fire_in_torch_order_with_torch_gradients_and_change_what_flows_on(compiled):
    want_log, got_log = [], []
    want = _chain(torch, want_log)
    got = _chain(flame, got_log, compiled)
    if compiled:  # traced once: the order is torch's, the values are the compiled step's
        assert got_log == [(name, None) for name, _ in want_log]
    else:
        assert got_log == want_log
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_leaf_hook_runs_before_accumulation():
    for lib in (torch, flame):
        x = _t(lib, X, True)
        seen = []
        x.register_hook(lambda g, seen=seen: (seen.append(_a(g)), g * 10)[1])
        (x * x).sum().backward()
        (x * 3).sum().backward()
        np.testing.assert_allclose(seen[0], 2 * X)
        np.testing.assert_allclose(seen[1], np.full(4, 3.0))  # the new gradient alone, not .grad
        np.testing.assert_allclose(_a(x.grad), 10 * (2 * X + 3), rtol=1e-12)


def test_removed_hook_does_not_run_and_handle_is_a_context_manager():
    for lib in (torch, flame):
        x = _t(lib, X, True)
        calls = []
        h = x.register_hook(lambda g, calls=calls: calls.append("h"))
        with x.register_hook(lambda g, calls=calls: calls.append("ctx")):
            x.sum().backward()
        x.sum().backward()
        h.remove()
        h.remove()
        x.sum().backward()
        assert calls == ["h", "ctx", "h"], lib.__name__


def test_retain_grad_values_accumulate_like_torch():
    got = {}
    for lib in (torch, flame):
        x = _t(lib, X, True)
        y = x.sin() * 2
        y.retain_grad()
        z = (y * y).sum()
        z.backward(retain_graph=True)
        first = _a(y.grad)
        z.backward()
        got[lib.__name__] = (first, _a(y.grad), _a(x.grad), y.is_leaf, y.retains_grad, x.is_leaf, x.retains_grad)
    for g, w in zip(got["flame"], got["torch"]):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_non_scalar_backward_with_a_gradient_and_hooks():
    got = {}
    for lib in (torch, flame):
        x = _t(lib, X, True)
        y = x * x
        y.register_hook(lambda g: g + 1)
        y.retain_grad()
        y.backward(_t(lib, W))
        got[lib.__name__] = (_a(x.grad), _a(y.grad))
    for g, w in zip(got["flame"], got["torch"]):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_hook_returning_none_for_a_value_keeps_it_and_eager_hook_may_record():
    grads = {}
    for lib in (torch, flame):
        x = _t(lib, X, True)
        y = x.tanh()
        kept = grads.setdefault(lib.__name__, [])
        y.register_hook(lambda g, kept=kept: kept.append(g))
        (y * 3).sum().backward()
        kept.append(x.grad)
    for g, w in zip(grads["flame"], grads["torch"]):
        np.testing.assert_allclose(_a(g), _a(w), rtol=1e-12)


def test_bad_hooks_raise_like_torch():
    with pytest.raises(AutogradError, match="doesn't require gradient"):
        flame.ones(3).register_hook(lambda g: g)
    with pytest.raises(AutogradError, match="requires_grad=False"):
        flame.ones(3).retain_grad()
    x = flame.ones(3, requires_grad=True)
    x.register_hook(lambda g: flame.ones(2))
    with pytest.raises(
        AutogradError, match=r"hook '.*<lambda>' \(defined at .*test_hooks\.py:\d+\) has changed the size"
    ):
        x.sum().backward()


def _clipped_sgd(lib, compiled, steps=3):
    """A linear model trained with SGD whose weight gradient a hook clamps to [-0.5, 0.5]."""
    w = _t(lib, W, True)
    w.register_hook(lambda g: g.clamp(-0.5, 0.5))
    opt = (torch.optim.SGD if lib is torch else flame.optim.SGD)([w], lr=0.1)
    xs = np.random.RandomState(3).randn(steps, 8, 4)

    def step(x):
        opt.zero_grad()
        loss = ((x * w).sum(1) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    run = flame.compile(step) if compiled else step
    losses = [run(_t(lib, x)).item() for x in xs]
    return losses, _a(w)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gradient_clipping_hook_in_a_training_step_matches_torch(compiled):
    want = _clipped_sgd(torch, False)
    got = _clipped_sgd(flame, compiled)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_compiled_hook_that_needs_python_names_the_hook():
    w = _t(flame, W, True)

    def log_norm(g):
        print(g.norm().item())
        return g

    @flame.compile
    def step(x):
        y = x * w
        y.register_hook(log_norm)
        y.sum().backward()

    with pytest.raises(TraceError, match=r"hook '.*log_norm' \(defined at .*test_hooks\.py:\d+\) needs Python values"):
        step(_t(flame, X))


def test_compiled_hook_returning_none_is_an_error():
    w = _t(flame, W, True)

    @flame.compile
    def step(x):
        y = x * w
        y.register_hook(lambda g: None)
        y.sum().backward()

    with pytest.raises(TraceError, match="returned None while @flame.compile traced the backward"):
        step(_t(flame, X))


def test_leaf_hook_added_after_compiling_traces_again():
    w = _t(flame, W, True)

    @flame.compile
    def step(x):
        w.grad = None
        (x * w).sum().backward()

    x = _t(flame, X)
    step(x)
    np.testing.assert_allclose(w.grad.numpy(), X)
    with w.register_hook(lambda g: g * 2):
        with pytest.warns(flame.RecompileWarning):
            step(x)
        np.testing.assert_allclose(w.grad.numpy(), 2 * X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)  # the first trace holds again
        step(x)
    np.testing.assert_allclose(w.grad.numpy(), X)


def test_traced_is_leaf_and_retains_grad():
    w = _t(flame, W, True)
    seen = {}

    @flame.compile
    def step(x):
        y = x * w
        z = x * 2
        y.retain_grad()
        seen.update(x=x.is_leaf, y=y.is_leaf, z=z.is_leaf, w=w.is_leaf, ry=y.retains_grad)
        y.sum().backward()
        return y.grad

    np.testing.assert_allclose(step(_t(flame, X)).numpy(), np.ones(4))
    assert seen == {"x": True, "y": False, "z": True, "w": True, "ry": True}


def test_grad_runs_hooks_like_torch_autograd_grad():
    log = []
    tx = torch.ones(2, dtype=torch.float64, requires_grad=True)
    ty = tx * 3
    ty.register_hook(lambda g: (log.append("y"), g * 5)[1])
    want = torch.autograd.grad(ty.sum(), tx)[0]

    def f(x):
        y = x * 3
        y.register_hook(lambda g: (log.append("y"), g * 5)[1])
        return y.sum()

    got = flame.grad(f)(flame.ones(2, dtype=flame.float64, requires_grad=True))
    np.testing.assert_allclose(got.numpy(), want.numpy())
    assert log == ["y", "y"]


def test_a_hooked_step_plans_and_compiles_for_the_gpu(cuda_target):
    w = flame.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    w.register_hook(lambda g: g.clamp(-0.25, 0.25))

    def body(x):
        h = x @ w
        h.register_hook(lambda g: g * 0.5)
        loss = (h.tanh() ** 2).mean()
        loss.backward()
        return loss

    check_gpu_step(body, w, flame.tensor(np.random.RandomState(0).randn(5, 3).astype(np.float32)))
