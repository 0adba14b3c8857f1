"""flame.autograd.graph.saved_tensors_hooks and save_on_cpu against torch.autograd.graph's, in f64:
pack runs (gradients off) on each tensor an op saves, unpack on its result when a backward reads it,
and the unpacked tensor is what the backward uses; nested blocks use the innermost pair; a second
backward through a freed graph raises; inside @flame.compile the hooks are a TraceError naming the line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

X = np.array([0.3, -1.2, 2.0])
Y = np.array([1.1, 0.4, -0.7])


def pair(a):
    return (flame.tensor(a, dtype=flame.float64, requires_grad=True),
            torch.tensor(a, dtype=torch.float64, requires_grad=True))


OPS = {
    "mul": lambda a, b: a * b,
    "add": lambda a, b: a + b,
    "mul_number": lambda a, b: a * 3,
    "exp": lambda a, b: a.exp(),
    "sin": lambda a, b: a.sin(),
    "pow": lambda a, b: a.pow(2),
    "div": lambda a, b: a / b,
    "tanh": lambda a, b: a.tanh(),
    "sigmoid": lambda a, b: a.sigmoid(),
    "relu": lambda a, b: a.relu(),
    "sum": lambda a, b: a.sum(),
    "matmul": lambda a, b: a.reshape(1, 3) @ b.reshape(3, 1),
}


def _run(lib, f, a, b, unpack=lambda t: t):
    log = []

    def pack_hook(t):
        log.append(("pack", tuple(t.shape), lib.is_grad_enabled()))
        return t

    def unpack_hook(t):
        log.append(("unpack", lib.is_grad_enabled()))
        return unpack(t)

    with lib.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
        out = f(a, b)
    packs = len(log)
    out.sum().backward()
    return log, packs


@pytest.mark.parametrize("name", list(OPS))
def test_hooks_run_on_what_torch_saves(name):
    (fa, ta), (fb, tb) = pair(X), pair(Y)
    flog, fpacks = _run(flame, OPS[name], fa, fb)
    tlog, tpacks = _run(torch, OPS[name], ta, tb)
    assert (fpacks, sorted(flog)) == (tpacks, sorted(tlog))  # (the order of one op's saves is torch's field order)
    np.testing.assert_allclose(fa.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
    if tb.grad is not None:
        np.testing.assert_allclose(fb.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", ["sin", "exp", "mul", "pow", "tanh", "sigmoid", "matmul"])
def test_the_unpacked_tensor_is_used(name):
    """(div is left out: torch's backward reads a and b, flame's VJP of a / b reads b and the result)"""
    (fa, ta), (fb, tb) = pair(X), pair(Y)
    _run(flame, OPS[name], fa, fb, unpack=lambda t: t * 2 + 0.25)
    _run(torch, OPS[name], ta, tb, unpack=lambda t: t * 2 + 0.25)
    np.testing.assert_allclose(fa.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
    if tb.grad is not None:
        np.testing.assert_allclose(fb.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


def _unpacks_of(lib, x):
    log = []
    with lib.autograd.graph.saved_tensors_hooks(lambda t: log.append("outer") or t, lambda t: t * 3):
        with lib.autograd.graph.saved_tensors_hooks(lambda t: log.append("inner") or t, lambda t: t):
            y = x.sin()
        z = x.cos() * y
    z.sum().backward(retain_graph=True)
    z.sum().backward()
    return log, x.grad.numpy()


def test_nested_blocks_use_the_innermost_pair_and_retain_graph_unpacks_again():
    (fx, tx) = pair(X)
    flog, fg = _unpacks_of(flame, fx)
    tlog, tg = _unpacks_of(torch, tx)
    assert flog == tlog
    np.testing.assert_allclose(fg, tg, rtol=1e-12)


def test_second_backward_raises_and_no_grad_packs_nothing():
    fx, tx = pair(X)
    for lib, x in ((flame, fx), (torch, tx)):
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = x.sin()
        y.sum().backward()
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
            y.sum().backward()
        with lib.no_grad(), lib.autograd.graph.saved_tensors_hooks(lambda t: 1 / 0, lambda t: t):
            x.sin()
        with lib.autograd.graph.saved_tensors_hooks(lambda t: 1 / 0, lambda t: t):
            x.detach().sin()


def test_autograd_grad_and_create_graph():
    fx, tx = pair(X)
    got = []
    for lib, x in ((flame, fx), (torch, tx)):
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = (x.sin() * x).sum()
        (g,) = lib.autograd.grad(y, [x], create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), [x])
        got.append((g.detach().numpy(), gg.numpy()))
    for f, t in zip(*got):
        np.testing.assert_allclose(f, t, rtol=1e-12)


def test_save_on_cpu():
    fx, tx = pair(X)
    for lib, x in ((flame, fx), (torch, tx)):
        with lib.autograd.graph.save_on_cpu():
            y = (x.exp() * x.sin()).sum()
        y.backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_an_unpacked_tensor_of_another_shape_raises():
    fx, _ = pair(X)
    with flame.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t[:2]):
        y = fx.sin()
    with pytest.raises(RuntimeError, match="unpack_hook: returned f64\\[2\\]"):
        y.sum().backward()


def test_inside_compile_is_a_trace_error_naming_the_line():
    fx, _ = pair(X)

    @flame.compile
    def step(x):
        with flame.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            return (x.sin() * 2).sum()

    with pytest.raises(flame.errors.TraceError, match=r"(?s)saved_tensors_hooks.*test_saved_tensor_hooks.py:\d+"):
        step(fx)

    @flame.compile
    def plain(x):
        return (x.sin() * 2).sum()

    plain(fx)  # traced and cached without hooks: called inside them, it traces again and raises
    with flame.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        with pytest.raises(flame.errors.TraceError, match="saved_tensors_hooks"):
            plain(fx)
        with flame.no_grad():  # no gradient recorded: nothing saved, nothing refused
            np.testing.assert_allclose(plain(fx).numpy(), (np.sin(X) * 2).sum(), rtol=1e-12)
    np.testing.assert_allclose(plain(fx).numpy(), (np.sin(X) * 2).sum(), rtol=1e-12)


def _function_case(lib):
    class F(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            ctx.extra = x  # an attribute: not packed
            return (x * w).sin(), x * 2

        @staticmethod
        def backward(ctx, g, h):
            x, w = ctx.saved_tensors
            return g * w + h, g * x

    dt = flame.float64 if lib is flame else torch.float64
    x = lib.tensor(X, dtype=dt, requires_grad=True)
    w = lib.tensor(Y, dtype=dt)
    log = []
    with lib.autograd.graph.saved_tensors_hooks(lambda t: log.append(("pack", t.tolist())) or t,
                                                lambda t: log.append(("unpack",)) or t * 10):
        a, b = F.apply(x, w)
    (a.sum() + b.sum()).backward()
    return log, x.grad.numpy()


def test_a_custom_function_packs_what_save_for_backward_saved():
    (flog, fg), (tlog, tg) = _function_case(flame), _function_case(torch)
    assert flog == tlog
    np.testing.assert_allclose(fg, tg, rtol=1e-12)


def test_disable_saved_tensors_hooks():
    for lib in (flame, torch):
        graph = lib.autograd.graph
        with graph.disable_saved_tensors_hooks("no hooks here"):
            with pytest.raises(RuntimeError, match="no hooks here"):
                with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
        with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            with pytest.raises(RuntimeError, match="no hooks here"):
                with graph.disable_saved_tensors_hooks("no hooks here"):
                    pass


def _staged(lib, use_grad):
    x = pair(X)[0 if lib is flame else 1]
    n = [0]
    with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: n.__setitem__(0, n[0] + 1) or t * 1.5):
        y = x.sin()
        z = y.exp()
        w = (z * y).sum()
    y.register_hook(lambda g: g * 2)
    z.register_hook(lambda g: g * 3)
    if use_grad:
        (g,) = lib.autograd.grad(w, [x])
    else:
        w.backward()
        g = x.grad
    return n[0], g.numpy()


@pytest.mark.parametrize("use_grad", [False, True])
def test_a_backward_through_hooked_tensors_unpacks_once(use_grad):
    (fn, fg), (tn, tg) = _staged(flame, use_grad), _staged(torch, use_grad)
    assert fn == tn
    np.testing.assert_allclose(fg, tg, rtol=1e-12)


def test_a_compressing_pair():
    """pack to f32, unpack as it is: flame's backward reads the rounded values converted back to the
    saved tensors' dtype (torch's formulas compute partly in f32, cos(x) of an f32 x: the same to ~1e-7)."""
    fx, tx = pair(X)
    for lib, x in ((flame, fx), (torch, tx)):
        with lib.autograd.graph.saved_tensors_hooks(lambda t, f32=lib.float32: t.to(f32), lambda t: t):
            y = (x.sin() * x.exp()).sum()
        y.backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    assert fx.grad.dtype == flame.float64


@pytest.mark.parametrize("lib", [flame, torch], ids=["flame", "torch"])
def test_func_transforms_and_hooks_as_torch(lib):
    """torch.func's reverse-mode transforms refuse saved-tensor hooks; its forward-mode ones (and forward
    AD's tangents) save nothing, so no hook runs, even where flame computes them by reverse mode."""
    x = lib.tensor(X, dtype=flame.float64 if lib is flame else torch.float64)
    n = [0]

    def count(t):
        n[0] += 1
        return t

    calls = (lambda: lib.func.grad(lambda x: (x.sin() * x).sum())(x),
             lambda: lib.func.vjp(lib.sin, x),
             lambda: lib.func.jacrev(lib.sin)(x))
    fwd = lib.autograd.forward_ad
    with lib.autograd.graph.saved_tensors_hooks(count, lambda t: t * 2):
        for call in calls:
            with pytest.raises(RuntimeError, match=r"torch.func.\{grad, vjp, jacrev, hessian\} don't yet support"):
                call()
        _, tangent = lib.func.jvp(lambda x: x.sin() * x, (x,), (x * 0 + 1,))
        jac = lib.func.jacfwd(lambda x: x.sin() * x)(x)
        with fwd.dual_level():
            d = fwd.make_dual(x, x * 0 + 1)
            dual_tangent = fwd.unpack_dual(d.sin() * d).tangent
    assert n[0] == 0
    p = pair(X)[0 if lib is flame else 1]
    with fwd.dual_level(), lib.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        d = fwd.make_dual(x, x * 0 + 1)
        (d.sin() * p).sum().backward()  # p requires grad: what reads it saves for backward
    assert n[0] == 2
    want = np.cos(X) * X + np.sin(X)
    for t in (tangent, jac.diagonal(), dual_tangent):
        np.testing.assert_allclose(t.detach().numpy(), want, rtol=1e-12)
