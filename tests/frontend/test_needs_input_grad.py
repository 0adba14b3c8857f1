"""ctx.needs_input_grad of a user autograd Function against torch's: True exactly for the arguments that
require grad (arguments, tensors computed from them, captured tensors; not a detached tensor or one made
under no_grad; under no_grad too, where the call records nothing), eagerly and inside @flame.compile,
where it is known while tracing; and the gradients a backward that reads it gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def _rng(seed: int, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


def _recording_fn(lib, seen: list):
    class Rec(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y, k):
            ctx.save_for_backward(x, y)
            seen.append(tuple(ctx.needs_input_grad))
            return x * y * k

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            gx = g * y * 3.0 if ctx.needs_input_grad[0] else None
            gy = g * x * 3.0 if ctx.needs_input_grad[1] else None
            return gx, gy, None

    return Rec


def _under_no_grad(lib, fn, x, y, p):
    with lib.no_grad():
        z = x * 2
        out = fn.apply(x, y, 3.0)  # needs_input_grad is the arguments' requires_grad, nothing is recorded
    return fn.apply(z, y * p, 3.0) + out * p


# name -> fn(lib, Function, x, y, p) -> a tensor; p is captured by the compiled step
CASES = {
    "arguments": lambda lib, fn, x, y, p: fn.apply(x, y, 3.0),
    "computed from the arguments": lambda lib, fn, x, y, p: fn.apply(x * 2, (y + 1).exp(), 3.0),
    "a captured tensor": lambda lib, fn, x, y, p: fn.apply(p, y, 3.0) + fn.apply(x, p * 2, 3.0),
    "detached": lambda lib, fn, x, y, p: fn.apply(x.detach(), y, 3.0) * p,
    "made or called under no_grad": _under_no_grad,
    "an argument twice": lambda lib, fn, x, y, p: fn.apply(x, x, 3.0) + fn.apply(y, y.detach(), 3.0) * p,
}
GRADS = [(True, False, False), (False, True, False), (True, True, False), (False, False, True), (True, True, True)]


def _run(lib, case: str, grads, compiled: bool, backward: bool | None = None):
    """(needs_input_grad seen at each call, the result, the gradients of x, y, p); backward() is
    called when `backward` says (None: when the result requires grad, torch's side)."""
    seen: list = []
    fn = _recording_fn(lib, seen)
    mk = (
        (lambda v, r: torch.tensor(v, requires_grad=r))
        if lib is torch
        else (lambda v, r: flame.tensor(v, dtype=flame.f64, requires_grad=r))
    )
    x, y, p = (mk(_rng(k, 3), r) for k, r in zip((1, 2, 3), grads))

    def body(x, y):
        out = CASES[case](lib, fn, x, y, p)
        if out.requires_grad if backward is None else backward:
            out.sum().backward()
        return out

    out = flame.compile(body)(x, y) if compiled else body(x, y)
    grads = [None if t.grad is None else t.grad.numpy() for t in (x, y, p)]
    return seen, out.detach().numpy(), grads, out.requires_grad


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("grads", GRADS, ids=["x", "y", "x,y", "captured", "all"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_needs_input_grad_is_torch_s(case, grads, compiled):
    want_seen, want, want_grads, differentiated = _run(torch, case, grads, False)
    seen, got, got_grads, _ = _run(flame, case, grads, compiled, differentiated)
    assert seen == want_seen
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for g, w in zip(got_grads, want_grads):
        assert (g is None) == (w is None)
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-12)


def test_flame_grad_differentiates_by_its_arguments():
    """flame.grad (torch.func.grad) differentiates by an argument that does not require grad: the
    Function sees it as needing a gradient, as torch.func's does."""
    seen: dict = {torch: [], flame: []}
    got = {}
    for lib in (torch, flame):

        class Rec(lib.autograd.Function):
            @staticmethod
            def forward(x, y):
                return x * y

            @staticmethod
            def setup_context(ctx, inputs, output, lib=lib):
                seen[lib].append(tuple(ctx.needs_input_grad))
                ctx.save_for_backward(*inputs)

            @staticmethod
            def backward(ctx, g):
                x, y = ctx.saved_tensors
                return (g * y * 3.0 if ctx.needs_input_grad[0] else None), (
                    g * x * 3.0 if ctx.needs_input_grad[1] else None
                )

        x, y = (lib.tensor(_rng(k, 3)) for k in (4, 5))
        grad = torch.func.grad if lib is torch else flame.grad
        got[lib] = grad(lambda a, b, fn=Rec: fn.apply(a, b).sum())(x, y).numpy()
    assert seen[flame] == [(True, False)]
    assert (True, False) in seen[torch]  # torch.func runs setup_context at each level of its transform
    np.testing.assert_allclose(got[flame], got[torch], rtol=1e-12)
