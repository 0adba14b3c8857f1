"""A user autograd Function under torch.func's transforms against torch's, in f64: jacfwd and hessian
take its outputs' tangents from its jvp (also where jvp and backward disagree), with two inputs and
outputs of several dimensions; torch's errors where it has no setup_context (any transform), no vmap
rule (vmap, jacfwd, hessian: torch computes jacfwd as a vmap of jvp), both a vmap rule and
generate_vmap_rule, or no jvp (forward mode); jacrev needs none of jvp and a vmap rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

X = np.array([[0.3, -1.2], [2.0, 0.5]])
W = np.array([0.7, 1.5])


def make(lib, *, with_jvp=True, vmap_rule=True, own_vmap=False, setup=True, scale=3.0):
    """f(x, w) = sin(x) * w * 2 (backward: its derivative; jvp: `scale` where the derivative has 2)."""

    class F(lib.autograd.Function):
        generate_vmap_rule = vmap_rule

        @staticmethod
        def forward(x, w):
            return x.sin() * w * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)
            ctx.save_for_forward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g * x.cos() * w * 2, (g * x.sin() * 2).sum(0)

        if with_jvp:

            @staticmethod
            def jvp(ctx, tx, tw):
                x, w = ctx.saved_tensors
                return tx * x.cos() * w * scale + x.sin() * tw * scale

        if own_vmap:

            @staticmethod
            def vmap(info, in_dims, x, w):
                return F.apply(x, w), 0

    if not setup:

        class G(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, w):
                ctx.save_for_backward(x, w)
                return x.sin() * w * 2

            @staticmethod
            def backward(ctx, g):
                x, w = ctx.saved_tensors
                return g * x.cos() * w * 2, (g * x.sin() * 2).sum(0)

        return G
    return F


def args(lib):
    return lib.tensor(X, dtype=lib.float64), lib.tensor(W, dtype=lib.float64)


def _f(F):
    return lambda x, w: F.apply(x, w) * x  # (x also reaches the output around F)


def _jacobians(lib, transform, scale):
    f = _f(make(lib, scale=scale))
    g = (lambda x, w: f(x, w).sum()) if transform == "hessian" else f
    out = getattr(lib.func, transform)(g, argnums=(0, 1))(*args(lib))
    return [t.numpy() for t in ([b for a in out for b in a] if transform == "hessian" else out)]


@pytest.mark.parametrize("scale", [2.0, 3.0])
@pytest.mark.parametrize("transform", ["jacfwd", "jacrev", "hessian"])
def test_jacobians_take_the_functions_jvp(transform, scale):
    for a, b in zip(_jacobians(torch, transform, scale), _jacobians(flame, transform, scale)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


def _jvp_and_jacfwd(lib):
    f = _f(make(lib))
    x, w = args(lib)
    col = lib.func.jvp(lambda x: f(x, w), (x,), (lib.ones_like(x),))[1]
    jac = lib.func.jacfwd(lambda x: f(x, w))(x)
    return jac.sum((2, 3)).numpy(), col.numpy()


def test_jvp_and_jacfwd_agree_in_a_row():
    for lib in (torch, flame):
        jac, col = _jvp_and_jacfwd(lib)
        np.testing.assert_allclose(jac, col, rtol=1e-12)


def _error(lib, transform, opts):
    """The exception (type, message) the transform over the Function raises, or None."""
    f = _f(make(lib, **opts))
    x, w = args(lib)
    fx = lambda x: f(x, w)  # noqa: E731
    run = {
        "jacfwd": lambda: lib.func.jacfwd(fx)(x),
        "hessian": lambda: lib.func.hessian(lambda x: fx(x).sum())(x),
        "jacrev": lambda: lib.func.jacrev(fx)(x),
        "vmap": lambda: lib.func.vmap(fx)(x),
        "jvp": lambda: lib.func.jvp(fx, (x,), (lib.ones_like(x),)),
        "grad": lambda: lib.func.grad(lambda x: fx(x).sum())(x),
    }[transform]
    try:
        run()
    except Exception as e:  # noqa: BLE001 (the oracle's exception, whatever its type)
        return type(e), str(e)
    return None


@pytest.mark.parametrize("kind", ["no_jvp", "no_vmap", "both_vmaps", "no_setup_context"])
@pytest.mark.parametrize("transform", ["jacfwd", "hessian", "jacrev", "vmap", "jvp", "grad"])
def test_errors_as_torch(kind, transform):
    opts = {"no_jvp": {"with_jvp": False}, "no_vmap": {"vmap_rule": False}, "both_vmaps": {"own_vmap": True},
            "no_setup_context": {"setup": False}}[kind]
    assert _error(flame, transform, opts) == _error(torch, transform, opts)


def test_plain_autograd_needs_no_setup_context():
    for lib in (torch, flame):
        x, w = args(lib)
        x.requires_grad_(True)
        _f(make(lib, setup=False))(x, w).sum().backward()
        assert x.grad is not None


def test_jacrev_inside_compile():
    want = torch.func.jacrev(_f(make(torch)), argnums=(0, 1))(*args(torch))
    got = flame.compile(lambda x, w: flame.func.jacrev(_f(make(flame)), argnums=(0, 1))(x, w))(*args(flame))
    for a, b in zip(want, got):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-12)
