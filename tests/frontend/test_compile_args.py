"""A compiled function treats its arguments as eager code does: in-place updates reach the caller's
tensor (as aliased outputs, like parameters) and loss.backward() fills their .grad (issue 14, item 2)."""

import numpy as np
import pytest

import flame


def test_add_and_copy_into_arguments_reach_the_caller():
    @flame.compile
    def step(x, y, z):
        x.add_(1)
        y.copy_(z * 2)
        return z.sum()

    x, y, z = flame.zeros(3), flame.zeros(3), flame.ones(3)
    for k in range(1, 3):
        step(x, y, z)
        np.testing.assert_array_equal(x.numpy(), np.full(3, k, np.float32))
        np.testing.assert_array_equal(y.numpy(), np.full(3, 2, np.float32))


def test_backward_inside_the_step_fills_argument_grads_and_accumulates():
    @flame.compile
    def step(w, x):
        loss = (w * x).sum()
        loss.backward()
        return loss

    w = flame.tensor(np.ones(3, np.float32), requires_grad=True)
    x = flame.tensor(np.array([1.0, 2.0, 3.0], np.float32))
    step(w, x)
    np.testing.assert_array_equal(w.grad.numpy(), x.numpy())
    assert x.grad is None
    step(w, x)  # accumulates, as two eager backward() calls do
    np.testing.assert_array_equal(w.grad.numpy(), 2 * x.numpy())


def test_argument_without_backward_keeps_its_grad():
    @flame.compile
    def f(w):
        return w * 2

    w = flame.tensor(np.ones(2, np.float32), requires_grad=True)
    (w * 3).sum().backward()
    f(w)
    np.testing.assert_array_equal(w.grad.numpy(), np.full(2, 3, np.float32))


def test_constant_arguments_are_keyed_by_type_and_bits():
    """Issue 14 item 3: -0.0 after 0.0, 1.0 after 1, and NaN each get the right trace."""
    from flame import debug

    @flame.compile
    def f(x, c):
        return x / flame.tensor(c[0] if isinstance(c, tuple) else c, dtype=flame.float32)

    x = flame.ones(1)
    assert f(x, 0.0).item() == np.inf
    assert f(x, -0.0).item() == -np.inf
    assert f(x, (1,)).item() == 1.0
    assert f(x, (2.0,)).item() == 0.5

    @flame.compile
    def g(x, c):
        return x + c

    records = []
    with debug.observe(records.append):
        for _ in range(3):
            assert np.isnan(g(x, float("nan")).item())
    assert len(records) == 1


@pytest.mark.gpu
def test_argument_mutation_and_grads_on_the_gpu():
    """The same on the CUDA executor (arguments' buffers are bound per call, CUDA graphs included)."""
    test_add_and_copy_into_arguments_reach_the_caller()
    test_backward_inside_the_step_fills_argument_grads_and_accumulates()
