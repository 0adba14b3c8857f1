"""autograd.Function corners where torch's engine decides what the backward gets and what it gives
back: a tensor returned at two positions is one result, and a gradient for an argument that requires no
grad is dropped unchecked; flame against torch in float64, eagerly and @flame.compile'd."""

import numpy as np
import pytest
import torch

import flame


def _rng(seed: int, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("materialize", [True, False])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_tensor_returned_twice_is_one_result_the_last_position_s_as_torch(materialize, compiled):
    """forward returning (y, y): torch hands back one tensor for both, whose gradient is the last
    position's cotangent (the first gets zeros, or None without materialized grads)."""

    def run(lib):
        seen = []

        class Twice(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(materialize)
                y = x * 2
                return y, y

            @staticmethod
            def backward(ctx, g1, g2):
                seen.append((g1 is None, g2 is None))
                return (0 if g1 is None else g1 * 2) + g2 * 5

        x = lib.tensor(_rng(19, 3), requires_grad=True)

        def body(x):
            a, b = Twice.apply(x)
            (a * 1 + b * 3).sum().backward()
            return a is b

        same = (flame.compile(body) if compiled and lib is flame else body)(x)
        return x.grad.numpy(), same, seen

    (got, got_same, got_seen), (want, want_same, want_seen) = run(flame), run(torch)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got_same is want_same is True
    assert got_seen == want_seen


@pytest.mark.parametrize("other", ["int_index", "float_without_grad"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_gradient_for_an_argument_that_requires_none_is_dropped_unchecked_as_torch(other, compiled):
    """torch's engine has no edge to an argument that requires no grad (an index tensor, data), so a
    gradient returned for it is dropped, whatever its shape; x's gradient is the backward's."""

    def run(lib):
        class Gather(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, idx):
                ctx.save_for_backward(idx)
                return x * 2 if other == "float_without_grad" else x[idx]

            @staticmethod
            def backward(ctx, g):
                (idx,) = ctx.saved_tensors
                if other == "float_without_grad":
                    return g * 2, g.sum()
                return lib.zeros(4, dtype=g.dtype).index_add(0, idx, g), g.sum()

        x = lib.tensor(_rng(17, 4), requires_grad=True)
        idx = lib.tensor([1, 1, 3]) if other == "int_index" else lib.tensor(_rng(18, 4))

        def body(x, idx):
            (Gather.apply(x, idx) ** 2).sum().backward()

        (flame.compile(body) if compiled and lib is flame else body)(x, idx)
        return x.grad.numpy(), idx.grad

    (got, got_idx), (want, want_idx) = run(flame), run(torch)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got_idx is None and want_idx is None
