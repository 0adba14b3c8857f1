"""A user autograd Function under flame.autograd.forward_ad against torch's, in f64: the tangents of its
outputs are its jvp's (given the arguments' tangents: zeros for a tensor without one, None for a Python
value; ctx.saved_tensors are what save_for_forward kept), also where jvp and backward disagree and where
there is no backward; reverse-mode gradients still come from backward; a Function without jvp is
torch's NotImplementedError; inside @flame.compile a clear error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfwd

import flame
import flame.autograd.forward_ad as ffwd

X = np.array([0.3, -1.2, 2.0])
V = np.array([1.0, 0.5, -2.0])
W = np.array([0.7, 1.5, -0.2])


def libs():
    return [(torch, tfwd, torch.float64), (flame, ffwd, flame.float64)]


def make(lib, with_backward=True):
    class Sq(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, k):
            ctx.save_for_forward(x, w)
            ctx.k = k
            return x * x * w * k, x + w

        @staticmethod
        def jvp(ctx, tx, tw, tk):
            assert tk is None
            x, w = ctx.saved_tensors
            return 10 * x * tx * w * ctx.k + tw, tx - tw  # (not the derivative: flame must use it)

    if with_backward:
        def backward(ctx, g, h):
            return g, h, None
        Sq.backward = staticmethod(backward)
    return Sq


def _tangents(lib, fwd, dt, grad_on=True, with_backward=True, tangent_w=False):
    Sq = make(lib, with_backward)
    with fwd.dual_level(), (lib.enable_grad() if grad_on else lib.no_grad()):
        x = fwd.make_dual(lib.tensor(X, dtype=dt), lib.tensor(V, dtype=dt))
        w = lib.tensor(W, dtype=dt)
        if tangent_w:
            w = fwd.make_dual(w, lib.tensor(V * 3, dtype=dt))
        a, b = Sq.apply(x, w, 2.5)
        y = a.sin() * b + x
        return [fwd.unpack_dual(t).tangent.detach().numpy() for t in (a, b, y)]


@pytest.mark.parametrize("grad_on", [True, False])
@pytest.mark.parametrize("with_backward", [True, False])
@pytest.mark.parametrize("tangent_w", [False, True])
def test_outputs_take_the_jvp_tangents(grad_on, with_backward, tangent_w):
    want = _tangents(*libs()[0], grad_on, with_backward, tangent_w)
    got = _tangents(*libs()[1], grad_on, with_backward, tangent_w)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_reverse_mode_still_uses_backward():
    got = []
    for lib, fwd, dt in libs():
        Sq = make(lib)
        p = lib.tensor(X, dtype=dt, requires_grad=True)
        with fwd.dual_level():
            x = fwd.make_dual(p, lib.tensor(V, dtype=dt))
            a, b = Sq.apply(x, lib.tensor(W, dtype=dt), 2.0)
            (a.sum() + (b * b).sum()).backward()
            tan = fwd.unpack_dual(a).tangent
        got.append((p.grad.numpy(), tan.detach().numpy()))
    for g, w in zip(*got):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_a_function_without_jvp_raises_as_torch():
    for lib, fwd, dt in libs():
        class Twice(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        with fwd.dual_level():
            x = fwd.make_dual(lib.tensor(X, dtype=dt), lib.tensor(V, dtype=dt))
            with pytest.raises(NotImplementedError, match="You must implement the jvp function"):
                Twice.apply(x)
            np.testing.assert_allclose(Twice.apply(lib.tensor(X, dtype=dt)).numpy(), X * 2)  # no tangent: fine


def test_inside_compile_is_a_clear_error():
    Sq = make(flame)

    @flame.compile
    def step(x, v):
        with ffwd.dual_level():
            d = ffwd.make_dual(x, v)
            a, _ = Sq.apply(d, x, 1.0)
            return ffwd.unpack_dual(a).tangent

    with pytest.raises(RuntimeError, match="jvp inside @flame.compile is not supported"):
        step(flame.tensor(X, dtype=flame.float64), flame.tensor(V, dtype=flame.float64))


def _split_style(lib, with_jvp=True):
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(x, k):
            return x * x * x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_forward(inputs[0])
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g, None

    if with_jvp:
        def jvp(ctx, t, tk):
            (x,) = ctx.saved_tensors
            return 7 * x * t * ctx.k  # (not the derivative: flame must use it)
        Cube.jvp = staticmethod(jvp)
    return Cube


def test_func_jvp_takes_the_functions_jvp():
    got = []
    for lib, func, dt in ((torch, torch.func, torch.float64), (flame, flame.func, flame.float64)):
        Cube = _split_style(lib)
        x, v = lib.tensor(X, dtype=dt), lib.tensor(V, dtype=dt)
        out, tan = func.jvp(lambda x, c=Cube: (c.apply(x, 2.0).sin() + x, c.apply(x, 1.0)), (x,), (v,))
        got.append([t.numpy() for t in (*out, *tan)])
    for g, w in zip(*got):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_func_jvp_of_a_function_without_jvp_raises_as_torch():
    for lib, func, dt in ((torch, torch.func, torch.float64), (flame, flame.func, flame.float64)):
        Cube = _split_style(lib, with_jvp=False)
        with pytest.raises(NotImplementedError, match="You must implement the jvp function"):
            func.jvp(lambda x, c=Cube: c.apply(x, 2.0), (lib.tensor(X, dtype=dt),), (lib.tensor(V, dtype=dt),))
