"""Tensor.grad_fn's hooks against torch's Node hooks, in f64: register_prehook(fn) gets the node's output
gradients after the tensor's own hooks and retain_grad(), its tuple flows on, its handle removes it, and
torch's errors for a result that is no tuple, has the wrong length or the wrong size; register_hook(fn)
gets the gradients the node passes its inputs (its part alone, where an input has other uses) and
grad_outputs, and what it returns flows on (eagerly and inside @flame.compile); grad_fn is the
same object at each access, shared by a Function's results."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

X = np.array([1.0, 2.0, 3.0])


def leaf(lib):
    dt = flame.float64 if lib is flame else torch.float64
    return lib.tensor(X, dtype=dt, requires_grad=True)


def _hooked(lib):
    x = leaf(lib)
    y = x.sin() * 2
    log = []
    y.retain_grad()
    y.grad_fn.register_prehook(lambda go: (log.append(("pre", go[0].tolist())), (go[0] * 10,))[1])
    y.register_hook(lambda g: (log.append(("tensor", g.tolist())), g + 1)[1])
    z = (y * y).sum()
    z.backward()
    return log, y.grad.numpy(), x.grad.numpy(), y.grad_fn is y.grad_fn


def test_prehook_runs_after_tensor_hooks_and_retain_grad():
    got, want = _hooked(flame), _hooked(torch)
    assert [e[0] for e in got[0]] == [e[0] for e in want[0]]
    for (_, a), (_, b) in zip(got[0], want[0]):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12)
    assert got[3] and want[3]


def test_prehook_none_and_remove():
    for lib in (flame, torch):
        x = leaf(lib)
        z = x.exp()
        seen = []
        z.grad_fn.register_prehook(lambda go, seen=seen: seen.append(len(go)))
        h = z.grad_fn.register_prehook(lambda go: (go[0] * 0,))
        h.remove()
        z.sum().backward()
        assert seen == [1]
        np.testing.assert_allclose(x.grad.numpy(), np.exp(X), rtol=1e-12)


@pytest.mark.parametrize("bad, err, msg", [
    (lambda go: go[0], TypeError, "expected tuple, but hook returned 'Tensor'"),
    (lambda go: (go[0], go[0]), RuntimeError, r"has returned an incorrect number of values \(got 2, but expected 1\)"),
    (lambda go: (go[0][:2],), RuntimeError, "has changed the size of value"),
])
def test_prehook_errors_as_torch(bad, err, msg):
    for lib in (flame, torch):
        z = leaf(lib).exp()
        z.grad_fn.register_prehook(bad)
        with pytest.raises(err, match=msg):
            z.sum().backward()


def test_prehook_inside_compile():
    def step(lib, x):
        y = x.sin() * 2
        y.grad_fn.register_prehook(lambda go: (go[0] * 3,))
        (y * y).sum().backward()
        return x.grad

    want = step(torch, leaf(torch)).numpy()
    x = leaf(flame)
    flame.compile(lambda x: step(flame, x))(x)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12)


def _post(lib):
    x = leaf(lib)
    w = lib.tensor(X * 0 + 3.0, dtype=x.dtype)
    y = x * w
    log = []

    def post(gi, go):
        log.append(([None if g is None else g.tolist() for g in gi], [g.tolist() for g in go]))
        return (gi[0] * 10, None)

    y.grad_fn.register_hook(post)
    (y * x).sum().backward()  # x is used twice: the hook sees and changes this node's part only
    z = x.exp()
    h = z.grad_fn.register_hook(lambda gi, go: (gi[0] * 0,))
    h.remove()
    z.grad_fn.register_hook(lambda gi, go: None)
    z.sum().backward()
    return log, x.grad.numpy(), len(y.grad_fn.next_functions)


def test_post_hook_as_torch():
    got, want = _post(flame), _post(torch)
    assert got[0] == want[0] and got[2] == want[2]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


@pytest.mark.parametrize("bad, err, msg", [
    (lambda gi, go: gi[0], TypeError, "expected tuple, but hook returned 'Tensor'"),
    (lambda gi, go: (gi[0], gi[0]), RuntimeError, r"incorrect number of values \(got 2, but expected 1\)"),
])
def test_post_hook_errors_as_torch(bad, err, msg):
    for lib in (flame, torch):
        z = leaf(lib).exp()
        z.grad_fn.register_hook(bad)
        with pytest.raises(err, match=msg):
            z.sum().backward()


def _post_step(lib, x):
    w = lib.ones(3, dtype=x.dtype) * 3
    y = x * w
    seen = []

    def post(gi, go):  # this node's part of x's gradient and its output's gradient, changed
        seen.append(len(gi))
        return (gi[0] * 10 + go[0], None)

    y.grad_fn.register_hook(post)
    (y * x).sum().backward()  # x is used twice: the hook sees and changes this node's part only
    z = x.exp() * 2
    z.grad_fn.register_hook(lambda gi, go: (gi[0] * go[0], None))
    (z * z).sum().backward()
    return x.grad, seen


def test_post_hook_inside_compile():
    want, seen_torch = _post_step(torch, leaf(torch))
    x = leaf(flame)
    seen = flame.compile(lambda x: _post_step(flame, x)[1])(x)
    np.testing.assert_allclose(x.grad.numpy(), want.numpy(), rtol=1e-12)
    assert seen == seen_torch == [2]


def test_post_hook_inside_compile_returning_none_is_a_trace_error():
    @flame.compile
    def step(x):
        z = x.exp()
        z.grad_fn.register_hook(lambda gi, go: None)
        z.sum().backward()

    with pytest.raises(flame.TraceError, match="returned None while @flame.compile traced the backward"):
        step(leaf(flame))


def _two_outputs(lib):
    class F(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g, h):
            return g * 2 + (0 if h is None else h * 3)

    x = leaf(lib)
    a, b = F.apply(x)
    log = []
    a.grad_fn.register_prehook(lambda go: log.append([None if g is None else g.tolist() for g in go]))
    (a.sum() * 2).backward()
    fn = a.grad_fn
    return (fn is b.grad_fn, fn.name(), len(fn.next_functions), isinstance(fn, lib.autograd.graph.Node),
            isinstance(fn.next_functions[0][0], lib.autograd.graph.Node)), log, x.grad.numpy()


def test_a_functions_results_share_one_grad_fn():
    got, want = _two_outputs(flame), _two_outputs(torch)
    assert got[0] == want[0] == (True, "FBackward", 1, True, True)
    assert got[1] == want[1]
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12)
